"""Subjects and permissions from one grammar: the broker configuration it renders, and no subject spelled elsewhere."""

from __future__ import annotations

from pathlib import Path

from lockgate.eventstore.partitions import Partitions
from lockgate.runtime import roles, topology

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "broker_permissions.golden"


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


def test_the_broker_configuration_is_the_one_rendered_before_subjects_came_from_the_grammar() -> None:
    assert render_deployments() == GOLDEN.read_text()
