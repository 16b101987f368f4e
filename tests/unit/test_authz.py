"""The policy engine's guarantees: default deny, forbid wins, errors never allow; bundles reload."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lockgate.authz import AuthzRequest, BundleError, PolicyBundle, evaluate
from lockgate.authz.cases import DEFAULT_CONTEXT
from lockgate.authz.source import BundleSource

REPO = Path(__file__).resolve().parents[2]
CASE = {"exists": True, "tenant": "tenant-a", "status": "open", "writes_suspended": False,
        "actor_may_add_note": True, "sensitive": False, "version": 3}


def ask(bundle: PolicyBundle, **facts: object) -> str:
    request = AuthzRequest("tenant-a", "user-42", "case.add_note", "Case", "case-123",
                           {**CASE, **facts}, dict(DEFAULT_CONTEXT))
    return evaluate(bundle, request).outcome


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Path:
    target = tmp_path / "policies"
    shutil.copytree(REPO / "deploy" / "policies", target)
    (target / "bundle.yaml").unlink()
    return target


def test_demo_rules(bundle_dir: Path) -> None:
    bundle = PolicyBundle.load(bundle_dir)
    assert ask(bundle) == "allow"
    assert ask(bundle, sensitive=True) == "require_approval"
    assert ask(bundle, status="closed") == "deny"


def test_default_deny_and_errors_never_allow(bundle_dir: Path) -> None:
    bundle = PolicyBundle.load(bundle_dir)
    other = AuthzRequest("tenant-a", "user-42", "case.export_all_notes", "Case", "c", CASE, {})
    assert evaluate(bundle, other).outcome == "deny"  # no permit names it
    missing = AuthzRequest("tenant-a", "user-42", "case.add_note", "Case", "c",
                           {"exists": True}, dict(DEFAULT_CONTEXT))
    decision = evaluate(bundle, missing)
    assert decision.outcome == "deny"  # forbids that cannot be evaluated do not let it through


def test_a_bundle_needs_ids_and_valid_config(bundle_dir: Path) -> None:
    (bundle_dir / "extra.cedar").write_text("permit (principal, action, resource);\n")
    with pytest.raises(BundleError, match="@id"):
        PolicyBundle.load(bundle_dir)
    (bundle_dir / "extra.cedar").unlink()
    (bundle_dir / "bundle.yaml").write_text("budgets:\n  - name: b\n    scope: actor\n")
    with pytest.raises(BundleError, match="max_count"):
        PolicyBundle.load(bundle_dir)
    (bundle_dir / "bundle.yaml").write_text("pause: {timeout_s: 5}\nprogress: {max_repeated_denials: 2}\n")
    config = PolicyBundle.load(bundle_dir).config
    assert (config.pause.timeout_s, config.progress.max_repeated_denials) == (5, 2)


def test_a_bundle_is_replaced_while_running_and_a_broken_edit_is_not(bundle_dir: Path) -> None:
    now = [0.0]
    source = BundleSource(bundle_dir, check_every_s=2.0, clock=lambda: now[0])
    first = source.current()
    policies = bundle_dir / "case-notes" / "case-notes.cedar"
    policies.write_text(policies.read_text().replace('resource.status == "closed"', 'resource.status == "archived"'))
    assert source.current() is first  # not checked again yet
    now[0] = 3.0
    second = source.current()
    assert second.revision != first.revision
    assert ask(second, status="closed") == "allow" and ask(first, status="closed") == "deny"
    policies.write_text("this is not cedar")
    now[0] = 6.0
    assert source.current() is second  # a broken edit keeps the running bundle


def test_prior_effects_are_read_only_by_bundles_that_ask(bundle_dir: Path) -> None:
    assert not PolicyBundle.load(bundle_dir).uses_prior_effects
    (bundle_dir / "case-notes" / "limit.cedar").write_text(
        '@id("case-notes.three-notes-a-run")\n'
        "forbid (principal, action, resource is Lockgate::Case)\n"
        "when { context.prior_effects >= 3 };\n"
    )
    bundle = PolicyBundle.load(bundle_dir)
    assert bundle.uses_prior_effects
    request = AuthzRequest("tenant-a", "user-42", "case.add_note", "Case", "case-123", CASE,
                           {**DEFAULT_CONTEXT, "prior_effects": 3})
    decision = evaluate(bundle, request)
    assert (decision.outcome, decision.reasons) == ("deny", ("case-notes.three-notes-a-run",))
    assert ask(bundle) == "allow"  # no prior effects in this run yet
