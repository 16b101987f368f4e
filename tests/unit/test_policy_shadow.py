"""Shadow bundles on in-memory ports: operators' commands, and the shadow decision recorded
beside the real one (never enforced).

The commands are answered as policy answers them (``PolicyHandlers.commands``, a subject and
a body), on a copy of the demo bundle in a temporary directory.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from lockgate.authz.engine import PolicyBundle, bundle_files
from lockgate.authz.source import BundleSource
from lockgate.contracts import subjects
from lockgate.contracts.messages import PolicyCommand, PolicyStatus, Refusal
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.intent.aggregate import State
from lockgate.intent.codec import decode_event
from lockgate.intent.disclosure import model_view
from lockgate.intent.events import PolicyDecided
from lockgate.policy.handlers import PolicyHandlers
from lockgate.runtime.context import MemoryPorts
from lockgate.runtime.ports.policies import ShadowSource
from lockgate.runtime.settings import Settings
from lockgate.testing.intents import T0, History
from tests.unit.memory_ports import OPEN_FACTS, state_of, store_history

#: A forbid that turns every case note the demo bundle allows into a denial.
NO_NOTES = '@id("shadow.no-notes")\nforbid (principal, action, resource is Lockgate::Case);\n'


@pytest.fixture
def active(tmp_path: Path) -> Path:
    """A copy of the demo bundle, as the active bundle's directory, with a case table beside it."""
    directory = tmp_path / "active"
    shutil.copytree(Settings().policy_dir, directory)
    (directory / "cases.yaml").write_text("cases: []\n")
    return directory


@pytest.fixture
def shadow_files(active: Path) -> dict[str, str]:
    """The demo bundle plus a forbid on every case note: the bundle to try."""
    return {**bundle_files(active), "case-notes/shadow.cedar": NO_NOTES}


def handlers(ports: MemoryPorts, active: Path) -> PolicyHandlers:
    return PolicyHandlers(ports, BundleSource(active, check_every_s=0.0),
                          lambda: T0 + timedelta(seconds=2),
                          ShadowSource(ports.policies, check_every_s=0.0))


async def command(h: PolicyHandlers, verb: str, body: PolicyCommand | bytes | None = None,
                  operator: str = "ops") -> PolicyStatus | Refusal:
    data = body if isinstance(body, bytes) else msgspec.json.encode(body or PolicyCommand())
    reply = await h.commands(subjects.policy_command(verb, operator), data)
    try:
        return msgspec.json.decode(reply, type=PolicyStatus)
    except msgspec.ValidationError:
        return msgspec.json.decode(reply, type=Refusal)


async def test_a_shadow_is_validated_kept_and_logged(ports: MemoryPorts, active: Path,
                                                      shadow_files: dict[str, str]) -> None:
    h = handlers(ports, active)
    status = await command(h, "shadow", PolicyCommand(files=shadow_files))
    assert isinstance(status, PolicyStatus)
    expected = PolicyBundle.from_files(shadow_files).revision
    assert status.shadow_revision == expected and status.shadow_by == "ops"
    assert status.active_revision == PolicyBundle.load(active).revision
    assert [(c.action, c.revision, c.by) for c in status.changes] == [("shadow", expected, "ops")]


@pytest.mark.parametrize("name", ["../escape.cedar", "/etc/x.cedar", "a/../../b.cedar", "run.sh",
                                  "a\\b.cedar", "", "x.cedar\x00.txt"])
async def test_a_file_outside_the_bundle_is_refused(ports: MemoryPorts, active: Path,
                                                    shadow_files: dict[str, str], name: str) -> None:
    refused = await command(handlers(ports, active), "shadow",
                            PolicyCommand(files={**shadow_files, name: NO_NOTES}))
    assert isinstance(refused, Refusal) and refused.error == "policy.files-invalid"
    assert await ports.policies.shadow() is None and await ports.policies.changes() == []


async def test_a_bundle_that_does_not_validate_is_refused(ports: MemoryPorts, active: Path,
                                                          shadow_files: dict[str, str]) -> None:
    broken = {**shadow_files, "x.cedar": "permit (principal, action, resource) when { nope };"}
    refused = await command(handlers(ports, active), "shadow", PolicyCommand(files=broken))
    assert isinstance(refused, Refusal) and refused.error == "policy.bundle-invalid"
    assert await ports.policies.shadow() is None


async def test_malformed_commands_are_refused_with_a_code(ports: MemoryPorts, active: Path) -> None:
    h = handlers(ports, active)
    malformed = await command(h, "shadow", b"{not json")
    assert isinstance(malformed, Refusal) and malformed.error == "policy.malformed"
    reply = await h.commands("lg.policy.explode.ops", b"{}")
    assert msgspec.json.decode(reply, type=Refusal).error == "policy.unknown-command"
    unknown_field = await command(h, "shadow", b'{"files": {}, "as": "admin"}')
    assert isinstance(unknown_field, Refusal) and unknown_field.error == "policy.malformed"


async def test_off_and_promote_need_a_shadow(ports: MemoryPorts, active: Path) -> None:
    h = handlers(ports, active)
    for verb in ("shadow-off", "promote"):
        refused = await command(h, verb)
        assert isinstance(refused, Refusal) and refused.error == "policy.no-shadow"


async def test_promote_writes_the_shadow_over_the_active_bundle(
        ports: MemoryPorts, active: Path, shadow_files: dict[str, str]) -> None:
    h = handlers(ports, active)
    before = PolicyBundle.load(active).revision
    (active / "stale.cedar").write_text('@id("stale")\npermit (principal, action, resource);\n')
    stale = PolicyBundle.load(active).revision
    shadow = await command(h, "shadow", PolicyCommand(files=shadow_files))
    assert isinstance(shadow, PolicyStatus) and shadow.shadow_revision is not None
    wrong = await command(h, "promote", PolicyCommand(revision=before, flips=0))
    assert isinstance(wrong, Refusal) and wrong.error == "policy.shadow-changed"
    promoted = await command(h, "promote", PolicyCommand(revision=shadow.shadow_revision, flips=3))
    assert isinstance(promoted, PolicyStatus)
    assert promoted.active_revision == shadow.shadow_revision and promoted.shadow_revision is None
    assert PolicyBundle.load(active).revision == shadow.shadow_revision
    assert not (active / "stale.cedar").exists()  # a bundle file the shadow has not is gone
    assert (active / "cases.yaml").read_text() == "cases: []\n"  # anything else stays
    last = promoted.changes[-1]
    assert (last.action, last.revision, last.active_revision, last.flips) == (
        "promote", shadow.shadow_revision, stale, 3)


async def test_the_shadow_decides_beside_the_active_bundle_and_is_never_enforced(
        ports: MemoryPorts, active: Path, shadow_files: dict[str, str]) -> None:
    h = handlers(ports, active)
    await command(h, "shadow", PolicyCommand(files=shadow_files))
    story = History().normalized(facts=OPEN_FACTS)
    await h.normalized(await store_history(ports, story), deliveries=1)
    intent = await state_of(ports, story)
    assert intent.state is State.ALLOWED  # the active bundle's answer is the one enforced
    decided = [decode_event(e) for e in (await ports.store.load("tenant-a", story.intent_id)).events]
    decision = next(e for e in decided if isinstance(e, PolicyDecided))
    assert decision.outcome is DecisionOutcome.ALLOW
    assert decision.shadow is not None
    assert decision.shadow.outcome is DecisionOutcome.DENY
    assert decision.shadow.reasons == ["shadow.no-notes"]
    assert decision.shadow.revision == PolicyBundle.from_files(shadow_files).revision
    assert "shadow" not in msgspec.json.encode(model_view(intent, None)).decode()


async def test_without_a_shadow_nothing_is_recorded_beside(ports: MemoryPorts, active: Path) -> None:
    h = handlers(ports, active)
    story = History().normalized(facts=OPEN_FACTS)
    await h.normalized(await store_history(ports, story), deliveries=1)
    stored = (await ports.store.load("tenant-a", story.intent_id)).events
    decision = next(e for e in map(decode_event, stored) if isinstance(e, PolicyDecided))
    assert decision.shadow is None
    assert b"shadow" not in next(e.data for e in stored if e.event_type == "PolicyDecided")
