"""A bundle tried on live traffic, then promoted: ``lockgate policy shadow`` and ``promote`` as
a person types them, against a running system.

The shadow forbids every case note the active bundle allows. Notes proposed while it runs
are executed (the active bundle decides) and their decisions carry the shadow's denial;
promote then refuses without a person's yes, promotes with ``--yes``, and from then on the
shadow's policy is the one enforced. Weaker roles cannot ask policy to do any of it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.authz.engine import PolicyBundle
from lockgate.client.sdk import PermissionDenied
from lockgate.contracts import subjects
from lockgate.intent.codec import decode_event
from lockgate.intent.events import PolicyDecided
from lockgate.testing.system import System, bundle_copy, running
from lockgate.views.store import open_views

LOCKGATE = [sys.executable, "-m", "lockgate.cli"]
NO_NOTES = '@id("shadow.no-notes")\nforbid (principal, action, resource is Lockgate::Case);\n'


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    root = tmp_path_factory.mktemp("shadow")
    policies = bundle_copy(root, (Path(__file__).parents[2] / "deploy" / "policies" /
                                  "bundle.yaml").read_text())
    with running(System(root, extra_env={"LOCKGATE_POLICY_DIR": str(policies)})) as s:
        yield s


@pytest.fixture(scope="module")
def shadow_dir(system: System) -> Path:
    """The active bundle plus a forbid on every case note."""
    directory = system.root / "candidate"
    bundle_copy(system.root / "candidate-root", "")
    (system.root / "candidate-root" / "policies").rename(directory)
    (directory / "bundle.yaml").write_text((system.root / "policies" / "bundle.yaml").read_text())
    (directory / "case-notes" / "shadow.cedar").write_text(NO_NOTES)
    return directory


def lockgate(system: System, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env["LOCKGATE_VAR_DIR"] = str(system.root)
    return subprocess.run([*LOCKGATE, *args, "--url", system.url], env=env, input=stdin,
                          capture_output=True, text=True, timeout=60, cwd=system.root)


async def note(system: System, case: str) -> tuple[str, str]:
    """Propose a note as the demo agent; the model's status and the intent id."""
    gw = await system.gateway("tenant-a")
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": case})
        turn = await run.open_turn()
        answer = await turn.propose(tool="case.add_note", arguments='{"note": "tried under a shadow"}')
        return str(answer.status), answer.candidate_id
    finally:
        await gw.close()


async def test_shadow_then_promote(system: System, shadow_dir: Path) -> None:
    active = PolicyBundle.load(system.root / "policies").revision
    shadow = PolicyBundle.load(shadow_dir).revision
    started = lockgate(system, "policy", "shadow", str(shadow_dir), "--json")
    assert started.returncode == 0, started.stderr
    status = json.loads(started.stdout)
    assert (status["active_revision"], status["shadow_revision"]) == (active, shadow)

    # Live traffic: executed under the active bundle, denied under the shadow (recorded).
    outcome, intent_id = await note(system, "case-123")
    assert outcome == "executed"
    decided = await decision_of(system, intent_id)
    assert decided.shadow is not None and decided.shadow.revision == shadow
    assert (str(decided.outcome), str(decided.shadow.outcome)) == ("allow", "deny")
    assert decided.shadow.reasons == ["shadow.no-notes"]

    # The views show the flip; promote refuses without a person's yes (no terminal here).
    views = open_views(system.settings().views_url, var_dir=system.root)
    try:
        await system.views_caught_up(views)
    finally:
        views.close()
    refused = lockgate(system, "policy", "promote")
    assert refused.returncode == 1
    assert "allow->deny" in refused.stderr and "shadow.no-notes" in refused.stderr
    assert "not promoted" in refused.stderr
    assert PolicyBundle.load(system.root / "policies").revision == active

    promoted = lockgate(system, "policy", "promote", "--yes", "--json")
    assert promoted.returncode == 0, promoted.stderr
    after = json.loads(promoted.stdout)
    assert after["active_revision"] == shadow and after["shadow_revision"] is None
    last = after["changes"][-1]
    assert (last["action"], last["revision"], last["active_revision"], last["by"], last["flips"]) == (
        "promote", shadow, active, "ops", 1)
    assert PolicyBundle.load(system.root / "policies").revision == shadow

    # Every service reloads the directory (within seconds): the next notes are denied by the
    # promoted forbid, and no shadow is decided beside them any more.
    for _ in range(40):
        outcome, intent_id = await note(system, "case-123")
        decided = await decision_of(system, intent_id)
        if decided.outcome == "deny" and decided.shadow is None:
            break
        await asyncio.sleep(0.25)
    assert outcome != "executed"
    assert (decided.outcome, decided.reasons, decided.shadow) == ("deny", ["shadow.no-notes"], None)


async def decision_of(system: System, intent_id: str) -> PolicyDecided:
    """The policy decision on the record of ``intent_id``."""
    nc = await system.connect()
    try:
        history = await system.store(nc).load("tenant-a", intent_id)
    finally:
        await nc.close()
    return next(e for e in map(decode_event, history.events) if isinstance(e, PolicyDecided))


async def test_a_bundle_that_does_not_validate_is_refused_before_it_is_sent(
        system: System, tmp_path: Path) -> None:
    (tmp_path / "broken.cedar").write_text("permit (principal, action, resource) when { nope };")
    (tmp_path / "s.cedarschema").write_text("namespace Lockgate { entity A; }")
    proc = lockgate(system, "policy", "shadow", str(tmp_path))
    assert proc.returncode == 1 and "invalid bundle" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("user", ["agent-tenant-a", "reviewer-alice", "host"])
async def test_weaker_roles_cannot_command_the_bundles(system: System, user: str) -> None:
    gw = await system.person(user)
    try:
        for principal in ("ops", user):  # as the operator, or as themselves
            gw.principal = principal
            with pytest.raises(PermissionDenied) as refused:
                await gw.policy_command("shadow-off")
            assert refused.value.subject == subjects.policy_command("shadow-off", principal)
    finally:
        await gw.close()
