"""Subjects and permissions from one grammar: what a family builds, the broker configuration
the roles render from it, and no subject spelled anywhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lockgate.contracts import mcp_subjects, subjects
from lockgate.contracts.subjects import Family, Param
from lockgate.eventstore.partitions import Partitions
from lockgate.operations import roles
from lockgate.runtime import topology
from tests.unit.test_spec import covers

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "broker_permissions.golden"

#: The modules that may write subject syntax: the grammar itself, the MCP adapter's
#: families, and the event store's (its prefix is configurable per stream).
SUBJECTS_MODULES = frozenset({
    "libs/lockgate/contracts/subjects.py",
    "libs/lockgate/contracts/mcp_subjects.py",
    "libs/lockgate/eventstore/subjects.py",
})
#: ``lg.`` where a subject (or a pattern, or a subject embedded in an API subject) starts.
_SPELLED = re.compile(r"(?<![A-Za-z0-9_])lg\.")

#: A family of every kind of position: a token, a dotted capability, a verb from a vocabulary.
ASK = Family((subjects.ROOT, "ask", Param("tenant", "tenant"), Param("capability", "capability", "capability"),
              Param("verb", "verb", choices=("go", "stop"))))

#: Every family with values for each parameter (a dotted capability where one is taken).
SAMPLES: list[tuple[Family, dict[str, str]]] = [
    (subjects.RUN_OPEN, {"tenant": "tenant-a"}),
    (subjects.RUN_CLOSE, {"tenant": "tenant-a"}),
    (subjects.LEASE, {"tenant": "tenant-a", "run": "r1"}),
    (subjects.TURN, {"tenant": "tenant-a", "run": "r1"}),
    (subjects.PROPOSE, {"tenant": "tenant-a", "run": "r1"}),
    (subjects.RESPONSE, {"tenant": "tenant-a", "run": "r1", "candidate": "c1"}),
    (subjects.WITHDRAW, {"tenant": "tenant-a", "run": "r1", "intent": "i1", "user": "agent-tenant-a"}),
    (subjects.REVIEW, {"tenant": "tenant-a", "intent": "i1", "verb": "decide", "reviewer": "alice"}),
    (subjects.RESOLVE, {"tenant": "tenant-a", "intent": "i1", "operator": "ops"}),
    (subjects.CLAIM, {"capability": "case.add_note"}),
    (subjects.EXEC, {"capability": "case.add_note"}),
    (subjects.INTERRUPT, {"capability": "case.add_note"}),
    (subjects.REPORT, {"capability": "case.add_note", "intent": "i1"}),
    (subjects.ADAPTER, {"capability": "case.add_note", "verb": "facts"}),
    (subjects.STATUS, {"name": "adapter.casenotes"}),
    (mcp_subjects.RECORD, {"server": "board", "kind": "snapshot"}),
    (mcp_subjects.MAPPING, {"server": "board", "capability": "board.publish"}),
    (mcp_subjects.OP, {"verb": "map", "principal": "ops"}),
]


def _placeholder(user: str) -> str:
    return f"CHANGE-ME-{user}"


def render_deployments() -> str:
    """The accounts blocks and role rows of two representative deployments, and the streams' subjects.

    The demo (one events stream, the demo's adapters and people) and a partitioned one with
    tenant-scoped people, a scoped host and an adapter serving a three-part capability name.
    """
    demo = roles.roles(["tenant-a", "tenant-b"])
    partitioned = Partitions(3)
    scoped = [
        *roles.roles(
            ["tenant-a", "t_2"],
            {"casenotes": ("case.add_note",), "mcp": ("board.draft_private", "board.publish"),
             "deep": ("one.two.three", "x")},
            reviewers={"alice": (), "bob": ("tenant-a", "t_2")},
            operators={"ops": (), "night-ops": ("t_2",)},
            partitions=partitioned,
        ),
        roles.host_role(["tenant-a", "t_2"]),
    ]
    parts = ["# demo: accounts", roles.render_accounts(roles.deployment_users(demo, password=_placeholder))]
    parts += ["# demo: roles", *(repr(r) for r in demo)]
    parts += ["# partitioned and scoped: accounts",
              roles.render_accounts(roles.deployment_users(scoped[:-1], password=_placeholder))]
    parts += ["# partitioned and scoped: roles", *(repr(r) for r in scoped)]
    for replicas, layout in ((1, Partitions()), (3, partitioned)):
        parts.append(f"# streams: {layout.count} partition(s)")
        parts += [f"{c.name}: {c.subjects}" for c in topology.stream_configs(replicas, layout)]
    return "\n".join(parts) + "\n"


def spelled_subjects(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string in ``source`` that writes subject syntax: a literal or an
    f-string part with ``lg.`` where a subject starts, or the bare root token ``lg``.
    Docstrings (a string standing as a statement) are prose and pass."""
    tree = ast.parse(source)
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return sorted(
        (node.lineno, node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
        and (node.value == subjects.ROOT or _SPELLED.search(node.value))
    )


# -- the broker configuration is unchanged ---------------------------------------------------


def test_the_broker_configuration_is_the_one_rendered_before_subjects_came_from_the_grammar() -> None:
    assert render_deployments() == GOLDEN.read_text()


# -- one definition per family: subject, pattern, parser, address ------------------------------


@pytest.mark.parametrize(("family", "values"), SAMPLES, ids=lambda v: v.address() if isinstance(v, Family) else "")
def test_a_familys_subject_parses_back_and_its_patterns_match_it(family: Family, values: dict[str, str]) -> None:
    subject = family.subject(**values)
    assert family.match(subject) == values
    assert covers(family.tail(), subject)
    assert family.pattern(**values) == subject
    for param in family.params:
        # Open one position: one '*' per token its value spans.
        others = {name: value for name, value in values.items() if name != param.name}
        wildcard = ".".join([subjects.ANY] * len(values[param.name].split(".")))
        assert covers(family.pattern(**others, **{param.name: wildcard}), subject), param.name
        assert not covers(family.pattern(**others, **{param.name: wildcard}), subject + ".more")
    assert family.address().count("{") == len(family.params)
    assert family.address(**values) == subject


def test_a_pattern_leaves_out_what_it_is_not_given_and_checks_what_it_is() -> None:
    assert ASK.pattern() == "lg.ask.*.*.*"
    assert ASK.pattern(tenant="t", verb="go") == "lg.ask.t.*.go"
    assert ASK.pattern(capability="*.*", verb="go") == "lg.ask.*.*.*.go"
    assert ASK.pattern(capability="case.add_note") == "lg.ask.*.case.add_note.*"
    assert ASK.tail() == "lg.ask.>" and ASK.tail(tenant="t") == "lg.ask.t.>"
    assert ASK.address(verb="stop") == "lg.ask.{tenant}.{capability}.stop"
    for bad in ({"tenant": "a.b"}, {"tenant": "**"}, {"verb": "run"}, {"capability": "Case"}, {"who": "x"}):
        with pytest.raises(ValueError):
            ASK.pattern(**bad)
    with pytest.raises(ValueError):  # a pattern can leave a position open, a subject cannot
        ASK.subject(tenant="t", verb="go")
    with pytest.raises(ValueError):  # nothing after '>'
        ASK.tail(verb="go")
    with pytest.raises(ValueError):  # a subject, not a tail
        subjects.RUN_OPEN.tail(tenant="t")
    with pytest.raises(ValueError):
        ASK.subject(tenant="*", capability="case.add_note", verb="go")


def test_a_subject_of_another_shape_is_not_matched() -> None:
    assert ASK.match("lg.ask.t.case.add_note.go") == {"tenant": "t", "capability": "case.add_note", "verb": "go"}
    assert ASK.match("lg.ask.t.go") is None
    assert ASK.match("lg.other.t.c.go") is None
    assert subjects.RUN_OPEN.match("lg.run.t.open.extra") is None
    with pytest.raises(ValueError):
        Family((subjects.ROOT, "x", Param("a", "a", "dotted"), Param("b", "b", "capability")))


def test_the_roles_grant_what_the_families_build_for_their_own_names() -> None:
    agent = roles.agent_role("tenant-a")
    assert covers(subjects.TURN.pattern(tenant="tenant-a"), subjects.turn_subject("tenant-a", "r1"))
    assert subjects.TURN.pattern(tenant="tenant-a") in agent.publish
    assert subjects.WITHDRAW.pattern(tenant="tenant-a", user="agent-tenant-a") in agent.publish
    reviewer = roles.reviewer_role("bob", ["tenant-a"])
    assert reviewer.publish[:3] == tuple(subjects.REVIEW.pattern(tenant="tenant-a", verb=v, reviewer="bob")
                                         for v in subjects.REVIEW_VERBS)
    operator = roles.operator_role("ops")
    assert mcp_subjects.OP.pattern(principal="ops") in operator.publish
    assert not any(covers(g, mcp_subjects.op("map", "eve")) for g in operator.publish)


# -- no subject spelled outside the subjects modules -----------------------------------------


def test_the_guard_finds_a_subject_spelled_in_code_and_not_in_prose() -> None:
    source = '''"""Answers ``lg.status.<name>``."""
STREAM = "LG_EVENTS"
def grant(x: str) -> str:
    """Where ``lg.foo.<x>`` goes."""
    return f"lg.foo.{x}"
API = f"$JS.API.CONSUMER.CREATE.S.c.lg.exec.{1}"
ROOT = ["lg", "run"]
TOKEN = "lgc1.abc"
'''
    assert [line for line, _ in spelled_subjects(source)] == [5, 6, 7]


def test_no_subject_is_spelled_outside_the_subjects_modules() -> None:
    spelled = [
        f"{path.relative_to(REPO)}:{line}: {text!r}"
        for root in ("libs", "services")
        for path in sorted((REPO / root).rglob("*.py"))
        if str(path.relative_to(REPO)) not in SUBJECTS_MODULES
        for line, text in spelled_subjects(path.read_text())
    ]
    assert not spelled, "build these with lockgate.contracts.subjects:\n" + "\n".join(spelled)
