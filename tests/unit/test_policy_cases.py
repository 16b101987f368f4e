"""Policy authors' tooling: case tables, ``lockgate policy validate|test``, the policy benchmark."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lockgate.authz import PolicyBundle
from lockgate.authz.cases import DEFAULT_CONTEXT, CaseError, load_cases, run_cases
from lockgate.cli.policy import policy_main

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "deploy" / "policies"
TABLES = [POLICIES / "case-notes" / "cases.yaml", POLICIES / "items" / "cases.yaml",
          POLICIES / "repo" / "cases.yaml", POLICIES / "mcp" / "cases.yaml",
          POLICIES / "assistant" / "cases.yaml"]

OPEN_CASE = ("{exists: true, tenant: tenant-a, status: open, writes_suspended: false, "
             "actor_may_add_note: true, sensitive: false, version: 3}")
CLOSED_CASE = OPEN_CASE.replace("status: open", "status: closed")

SCHEMA = """
namespace Lockgate {
  entity Actor = { tenant: String, name: String };
  entity Case = { exists: Bool, tenant: String };
  action "case.add_note", "case.add_note::unattended" appliesTo {
    principal: [Actor], resource: [Case], context: { effect_class: String, digest: String },
  };
}
"""
GOOD_POLICY = """
@id("case.not-found")
forbid (principal, action, resource is Lockgate::Case) unless { resource.exists };

@id("members")
permit (principal, action, resource is Lockgate::Case) when { resource.tenant == principal.tenant };
"""


@pytest.fixture(scope="module")
def bundle() -> PolicyBundle:
    """Every world's policies, as the policy service loads them."""
    return PolicyBundle.load(POLICIES)


def table(tmp_path: Path, body: str, name: str = "cases.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def one_case(tmp_path: Path, facts: str, expect: str, extra: str = "") -> Path:
    return table(tmp_path, f"""\
        cases:
          - name: the case
            principal: {{tenant: tenant-a, actor: user-42}}
            capability: case.add_note
            resource: {{type: Case, id: case-1, facts: {facts}}}
            expect: {expect}
        """ + textwrap.indent(textwrap.dedent(extra), " " * 4))


def bundle_dir(tmp_path: Path, policy: str) -> Path:
    directory = tmp_path / "bundle"
    directory.mkdir()
    (directory / "schema.cedarschema").write_text(SCHEMA)
    (directory / "policies.cedar").write_text(policy)
    return directory


# -- case tables ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.parent.name)
def test_shipped_case_tables_pass(bundle: PolicyBundle, path: Path) -> None:
    results = run_cases(bundle, load_cases(path))
    assert results
    failed = {r.case.name: r.problems for r in results if not r.passed}
    assert failed == {}


def test_shipped_tables_cover_every_outcome_and_forbid(bundle: PolicyBundle) -> None:
    results = [r for path in TABLES for r in run_cases(bundle, load_cases(path))]
    assert {r.actual for r in results} == {"allow", "require_approval", "deny"}
    forbids = {pid for pid, effect in bundle.effects.items() if effect == "forbid"}
    # A forbid on the unattended question sends a call to a reviewer: it determines the
    # decision (policy.approval-required is the reason).
    assert forbids <= {reason for r in results for reason in (*r.reasons, *r.determining)}


def test_a_wrong_expectation_fails_with_the_determining_policies(
    bundle: PolicyBundle, tmp_path: Path,
) -> None:
    [result] = run_cases(bundle, load_cases(one_case(tmp_path, CLOSED_CASE, "allow")))
    assert not result.passed
    assert (result.expected, result.actual) == ("allow", "deny")
    assert result.reasons == ("case.closed",)
    assert "case.closed" in result.determining
    assert result.problems == ("expected allow, got deny",)


def test_reasons_are_compared_as_a_set(bundle: PolicyBundle, tmp_path: Path) -> None:
    facts = CLOSED_CASE.replace("actor_may_add_note: true", "actor_may_add_note: false")
    right = one_case(tmp_path, facts, "deny", "reasons: [case.note.not-authorized, case.closed]\n")
    assert run_cases(bundle, load_cases(right))[0].passed
    wrong = one_case(tmp_path, facts, "deny", "reasons: [case.closed]\n")
    [result] = run_cases(bundle, load_cases(wrong))
    assert not result.passed
    assert result.problems == (
        "expected reasons [case.closed], got [case.closed, case.note.not-authorized]",)


def test_an_evaluation_error_fails_a_case_unless_expected(
    bundle: PolicyBundle, tmp_path: Path,
) -> None:
    missing = OPEN_CASE.replace("writes_suspended: false, ", "")
    [result] = run_cases(bundle, load_cases(one_case(tmp_path, missing, "deny")))
    assert result.errors and not result.passed
    expected = one_case(tmp_path, missing, "deny", "expect_errors: true\n")
    assert run_cases(bundle, load_cases(expected))[0].passed


def test_context_defaults_are_filled(tmp_path: Path) -> None:
    [case] = load_cases(one_case(tmp_path, OPEN_CASE, "allow"))
    assert case.request.context == dict(DEFAULT_CONTEXT)
    assert case.request.context["stage"] == "default" and case.request.context["prior_effects"] == 0
    [case] = load_cases(one_case(tmp_path, OPEN_CASE, "allow", "context: {digest: 'sha256:x'}\n"))
    assert case.request.context["digest"] == "sha256:x"
    assert case.request.context["stage"] == "default"


@pytest.mark.parametrize(
    ("body", "index", "message"),
    [
        ("cases: [\n", None, "not valid YAML at line"),
        ("- name: x\n", None, "exactly one key, 'cases'"),
        ("cases: []\n", None, "non-empty list"),
        ("cases:\n  - 3\n", 0, "a case must be a mapping"),
        ("cases:\n  - {name: x, principal: {tenant: t, actor: a}, capability: c,\n"
         "     resource: {type: Case, id: c, facts: {}}}\n", 0, "missing keys ['expect']"),
        ("cases:\n  - {name: x, principal: {tenant: t, actor: a}, capability: c, expect: deny,\n"
         "     resource: {type: Case, id: c, facts: {}}, reason: [a]}\n", 0, "unknown keys ['reason']"),
        ("cases:\n  - {name: x, principal: {tenant: t, actor: a}, capability: c, expect: maybe,\n"
         "     resource: {type: Case, id: c, facts: {}}}\n", 0, "expect must be one of"),
        ("cases:\n  - {name: x, principal: {tenant: t}, capability: c, expect: deny,\n"
         "     resource: {type: Case, id: c, facts: {}}}\n", 0, "principal must have the keys"),
        ("cases:\n  - {name: x, principal: {tenant: t, actor: a}, capability: c, expect: deny,\n"
         "     resource: {type: Case, id: c, facts: {score: 0.5}}}\n", 0,
         "resource.facts.score: float 0.5 is not a Cedar value"),
        ("cases:\n  - {name: x, principal: {tenant: t, actor: a}, capability: c, expect: deny,\n"
         "     resource: {type: Case, id: c, facts: {}}}\n"
         "  - {name: x, principal: {tenant: t, actor: a}, capability: c, expect: deny,\n"
         "     resource: {type: Case, id: c, facts: {}}}\n", 1, "duplicate case name 'x'"),
    ],
    ids=["yaml", "not-a-table", "empty", "not-a-mapping", "missing-key", "unknown-key",
         "bad-expect", "bad-principal", "float-fact", "duplicate"],
)
def test_a_malformed_table_is_a_typed_error_naming_file_and_case(
    tmp_path: Path, body: str, index: int | None, message: str,
) -> None:
    path = table(tmp_path, body)
    with pytest.raises(CaseError) as caught:
        load_cases(path)
    assert (caught.value.path, caught.value.index) == (path, index)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)
    assert not caught.value.retryable


def test_a_missing_table_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(CaseError, match="cannot read"):
        load_cases(tmp_path / "nope.yaml")


# -- lockgate policy validate ----------------------------------------------------------------------

def test_validate_lists_the_shipped_bundle(capsys: pytest.CaptureFixture[str]) -> None:
    assert policy_main(["validate", str(POLICIES)]) == 0
    out = capsys.readouterr().out
    bundle = PolicyBundle.load(POLICIES)
    assert f"revision {bundle.revision}" in out
    assert f"{len(bundle.order)} policies" in out
    assert "forbid  case.closed" in out
    assert "permit  items.members-publish" in out


def test_validate_refuses_a_policy_without_an_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    directory = bundle_dir(tmp_path, GOOD_POLICY + "\npermit (principal, action, resource);\n")
    assert policy_main(["validate", str(directory)]) == 1
    err = capsys.readouterr().err
    assert "every policy needs an @id" in err
    assert "policy2 is policy 3 of policies.cedar (no @id)" in err


def test_validate_refuses_an_undeclared_attribute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    directory = bundle_dir(tmp_path, GOOD_POLICY + textwrap.dedent("""
        @id("case.closed")
        forbid (principal, action, resource is Lockgate::Case) when { resource.status == "closed" };
        """))
    assert policy_main(["validate", str(directory)]) == 1
    err = capsys.readouterr().err
    assert "attribute `status`" in err
    assert 'policy2 is policy 3 of policies.cedar (@id("case.closed"))' in err


def test_validate_names_the_file_that_does_not_parse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    directory = bundle_dir(tmp_path, GOOD_POLICY)
    (directory / "broken.cedar").write_text('@id("x") permit (principal, action, resource')
    assert policy_main(["validate", str(directory)]) == 1
    assert "broken.cedar:" in capsys.readouterr().err


def test_validate_accepts_a_small_good_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert policy_main(["validate", str(bundle_dir(tmp_path, GOOD_POLICY))]) == 0
    assert "2 policies (1 forbid, 1 permit)" in capsys.readouterr().out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert policy_main(["validate"]) == 2
    assert policy_main(["frobnicate"]) == 2
    assert "usage: lockgate policy" in capsys.readouterr().err


# -- lockgate policy test --------------------------------------------------------------------------

def test_test_passes_the_shipped_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert policy_main(["test", str(POLICIES), *map(str, TABLES)]) == 0
    out = capsys.readouterr().out
    total = sum(len(load_cases(t)) for t in TABLES)
    assert out.count("\nPASS ") == total
    assert f"{total} passed, 0 failed" in out


def test_test_reports_pass_and_fail_lines_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = table(tmp_path, f"""\
        cases:
          - name: open case is allowed
            principal: {{tenant: tenant-a, actor: user-42}}
            capability: case.add_note
            resource: {{type: Case, id: case-1, facts: {OPEN_CASE}}}
            expect: allow
          - name: closed case is wrongly expected to be allowed
            principal: {{tenant: tenant-a, actor: user-42}}
            capability: case.add_note
            resource: {{type: Case, id: case-2, facts: {CLOSED_CASE}}}
            expect: allow
        """)
    assert policy_main(["test", str(POLICIES), str(path)]) == 1
    out = capsys.readouterr().out
    assert "PASS open case is allowed\n" in out
    assert "FAIL closed case is wrongly expected to be allowed\n" in out
    assert f"at {path}: cases[1]" in out
    assert "expected: allow" in out
    assert "actual:   deny [case.closed]" in out
    assert "determining policies: case.closed" in out
    assert "1 passed, 1 failed" in out


def test_test_reports_a_malformed_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = table(tmp_path, "cases: {}\n")
    assert policy_main(["test", str(POLICIES), str(path)]) == 1
    assert f"error: {path}: 'cases' must be a non-empty list" in capsys.readouterr().err


def test_test_refuses_a_broken_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = bundle_dir(tmp_path, "permit (principal, action, resource);\n")
    assert policy_main(["test", str(directory), str(TABLES[0])]) == 1
    assert "invalid bundle" in capsys.readouterr().err


# -- the policy benchmark ------------------------------------------------------------------------

def test_policy_benchmark_smoke() -> None:
    """The generated bundle validates and the figures come back; no assertion on time."""
    from bench.policy import SCHEMA, generate, run

    assert len(PolicyBundle.from_text(generate(100).text, SCHEMA).order) == 100
    lines: list[str] = []
    figures = run(quick=True, sizes=(10,), seconds=0.05, out=lines.append)
    row = figures["policies"]["10"]
    assert set(row) >= {"lockgate_per_s", "lockgate_p50_us", "lockgate_p99_us",
                        "cedar_per_s", "cedar_p50_us"}
    assert all(isinstance(v, float) and v > 0 for v in row.values())
    assert lines[-1].startswith('{"policies": ')
