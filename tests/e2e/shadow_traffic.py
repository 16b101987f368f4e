"""A shadow bundle beside the active one, and traffic it decides otherwise (for the shadow tests).

The active bundle is the demo bundle with a cap on a run's notes, so every note's decision
reads (and records) the run's history. The shadow bundle is the active one with
publication forbidden, the case-notes rule that sends sensitive notes to a reviewer turned
around, and one note a run: a publication flips allow->deny (by ``shadow.no-publication``),
a note on an ordinary case allow->require_approval, a note on a sensitive case
require_approval->allow, a run's second note allow->deny (``shadow.one-note-a-run``, on the
history its decision read); drafts and notes on closed cases decide alike.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

from lockgate.authz.engine import bundle_files
from lockgate.client.sdk import Gateway
from lockgate.contracts.messages import PolicyCommand
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import random_id
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.intent.events import PolicyDecided
from lockgate.testing.system import REPO, System, bundle_copy

POLICIES = REPO / "deploy" / "policies"
NO_PUBLICATION = """@id("shadow.no-publication")
forbid (principal, action == Lockgate::Action::"item.publish", resource is Lockgate::Space);
"""
#: A cap no run of the tests reaches: it makes every note's decision read the run's history.
NOTES_CAP = """@id("case.notes-cap")
forbid (principal, action == Lockgate::Action::"case.add_note", resource is Lockgate::Case)
when { context.history.run.write >= 100 };
"""
ONE_NOTE = """@id("shadow.one-note-a-run")
forbid (principal, action == Lockgate::Action::"case.add_note", resource is Lockgate::Case)
when { context.history.run.write >= 1 };
"""
UNATTENDED = "unless { resource.sensitive };"
FLIPPED = "when { resource.sensitive };"
NOTE = "case.add_note"
DRAFT = "draft.prepare_private"
PUBLISH = "item.publish"


def active_bundle(root: Path) -> Path:
    """The active bundle's directory under ``root`` (the system is pointed at it)."""
    return bundle_copy(root, (POLICIES / "bundle.yaml").read_text(), {"cap.cedar": NOTES_CAP})


def shadow_bundle(root: Path) -> Path:
    """The shadow bundle's directory under ``root``."""
    cedar = (POLICIES / "case-notes" / "case-notes.cedar").read_text()
    assert cedar.count(UNATTENDED) == 1
    return bundle_copy(root, (POLICIES / "bundle.yaml").read_text(), {
        "cap.cedar": NOTES_CAP, "case-notes/case-notes.cedar": cedar.replace(UNATTENDED, FLIPPED),
        "shadow.cedar": NO_PUBLICATION + ONE_NOTE})


async def decisions(system: System, candidate_id: str, tenant: str = "tenant-a") -> list[PolicyDecided]:
    """The candidate's policy decisions as the event store holds them."""
    nc = await system.connect()
    try:
        history = await JetStreamEventStore(nc).load(tenant, candidate_id)
    finally:
        await nc.close()
    return [e for e in map(decode_event, history.events) if isinstance(e, PolicyDecided)]


async def propose(gw: Gateway, tool: str, *, case: str = "case-123", times: int = 1) -> list[ModelResponse]:
    """``times`` candidates of ``tool`` (each with other arguments) in a run of their own, one
    after the other."""
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": case, "space_id": "space-1"})
    answers = []
    for _ in range(times):
        turn = await run.open_turn()
        arguments = {"note": f"Note {random_id()[:6]}."} if tool == NOTE else {
            "title": f"Item {random_id()[:6]}", "body": "Numbers are in."}
        answers.append(await turn.propose(tool=tool, arguments=json.dumps(arguments), call_id=random_id(),
                                          timeout_s=60))
    return answers


@dataclass(frozen=True)
class Shadowed:
    """The shadow bundle's directory and revision, once policy decides beside it."""

    directory: Path
    revision: str


async def start_shadow(system: System, directory: Path, timeout_s: float = 30.0) -> Shadowed:
    """Set the shadow bundle as operator ``ops``, then wait until a decision is made beside it
    (policy looks the shadow up every few seconds)."""
    ops = await system.person("operator-ops")
    try:
        status = await ops.policy_command("shadow", PolicyCommand(files=bundle_files(directory)))
    finally:
        await ops.close()
    assert status.shadow_revision is not None and status.shadow_by == "ops"
    gw = await system.gateway("tenant-a")
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            (answer,) = await propose(gw, DRAFT)
            if any(d.shadow is not None for d in await decisions(system, answer.candidate_id)):
                return Shadowed(directory, status.shadow_revision)
            await asyncio.sleep(0.5)
    finally:
        await gw.close()
    raise AssertionError("no decision was made beside the shadow bundle")
