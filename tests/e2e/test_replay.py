"""Replay: recorded candidates through the same gates in a fixture world, and under another bundle.

The system runs as processes; four candidates are recorded through it (executed, denied,
approved by a reviewer and executed, left waiting for one). The replays read them from
the views, the runs' contexts and contracts as the ``replay`` user, and run in a fixture
world of their own: the real world's ledger never moves.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from nats.errors import Error as NatsError

from lockgate.authz import PolicyBundle
from lockgate.cli.app import main
from lockgate.contracts import subjects
from lockgate.contracts.messages import Describe
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.intent.events import CandidateNormalized, CandidateReceived, ReviewRequested
from lockgate.replay.counterfactual import counterfactual
from lockgate.replay.fixtures import FIXTURE_MISSING
from lockgate.replay.record import Candidate, Selection, Sources, candidates
from lockgate.replay.report import Replay, replay
from lockgate.replay.sources import BrokerDeployment
from lockgate.runtime.topology import CAPABILITIES_BUCKET, RUNS_BUCKET
from lockgate.testing.invariants import violations
from lockgate.testing.system import REPO, System, bundle_copy
from lockgate.views.store import open_views
from lockgate.worlds.casenotes.adapter import CONTRACT
from lockgate.worlds.casenotes.world import World

POLICIES = REPO / "deploy" / "policies"
#: The rule that sends notes on sensitive cases to a reviewer, flipped: sensitive notes go
#: unattended, every other note waits for a reviewer.
UNATTENDED = "unless { resource.sensitive };"
FLIPPED = "when { resource.sensitive };"


@dataclass(frozen=True)
class Recorded:
    """The four recorded candidates, by what happened to them live."""

    executed: str
    denied: str
    approved: str
    waiting: str

    @property
    def all(self) -> tuple[str, ...]:
        return (self.executed, self.denied, self.approved, self.waiting)


async def _record(system: System) -> Recorded:
    gw = await system.gateway("tenant-a")
    alice = await system.person("reviewer-alice")
    try:
        ids = []
        for case_id, note in (("case-123", "Customer called back."), ("case-closed", "Reopen?"),
                              ("case-sensitive", "Escalated to legal."), ("case-sensitive", "And again.")):
            run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": case_id})
            turn = await run.open_turn()
            answer = await turn.propose(tool="case.add_note", arguments=json.dumps({"note": note}))
            ids.append(answer.candidate_id)
            if note == "Escalated to legal.":
                nc = await system.connect()
                try:
                    history = await JetStreamEventStore(nc).load("tenant-a", answer.candidate_id)
                finally:
                    await nc.close()
                review = next(e for e in map(decode_event, history.events)
                              if isinstance(e, ReviewRequested))
                await alice.decide_review(tenant="tenant-a", candidate_id=answer.candidate_id,
                                          review_id=review.review_id, digest=review.digest, approve=True)
                assert (await run.wait(answer.candidate_id)).status == "executed"
    finally:
        await gw.close()
        await alice.close()
    return Recorded(*ids)


def _settled(system: System, recorded: Recorded) -> None:
    """Wait until the views hold every recorded candidate's end (the projector folds them)."""
    views = open_views(var_dir=system.root)
    try:
        deadline = time.monotonic() + 30
        want = {"completed", "denied", "awaiting_approval"}
        while time.monotonic() < deadline:
            rows = [views.intent(i) for i in recorded.all]
            if all(r is not None and r.state in want for r in rows):
                return
            time.sleep(0.2)
    finally:
        views.close()
    raise AssertionError("the views did not catch up")


@pytest.fixture(scope="module")
def recorded(system: System) -> Recorded:
    ids = asyncio.run(_record(system))
    _settled(system, ids)
    return ids


@pytest.fixture(scope="module")
def flipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("flipped")
    cedar = (POLICIES / "case-notes" / "case-notes.cedar").read_text()
    assert cedar.count(UNATTENDED) == 1
    return bundle_copy(root, (POLICIES / "bundle.yaml").read_text(),
                       {"case-notes/case-notes.cedar": cedar.replace(UNATTENDED, FLIPPED)})


def _candidates(system: System, ids: tuple[str, ...]) -> list[Candidate]:
    views = open_views(var_dir=system.root)
    try:
        return candidates(views, Selection(intent_ids=ids))
    finally:
        views.close()


@pytest.fixture
async def deployment(system: System) -> AsyncIterator[BrokerDeployment]:
    """The running system as the replay user sees it: runs and contracts, nothing else."""
    broker = await BrokerDeployment.open(system.url, system.credentials("replay"))
    try:
        yield broker
    finally:
        await broker.close()


async def _replay(system: System, deployment: BrokerDeployment, ids: tuple[str, ...],
                  bundle: Path = POLICIES, **options: object) -> Replay:
    return await replay(_candidates(system, ids), deployment, bundle, **options)  # type: ignore[arg-type]


def _ledger(system: System) -> tuple[int, int]:
    world = World(system.world_dir)
    return world.invocations, len(world.ledger())


# -- counterfactual policy ------------------------------------------------------------------


async def test_a_flipped_rule_changes_exactly_its_rows(
    system: System, recorded: Recorded, flipped: Path, deployment: BrokerDeployment,
) -> None:
    rows = await counterfactual(_candidates(system, recorded.all), PolicyBundle.load(flipped),
                                Sources(deployment=deployment))
    changed = {r.intent_id: (r.recorded, r.outcome) for r in rows if r.changed}
    assert changed == {
        recorded.executed: ("allow", "require_approval"),
        recorded.approved: ("require_approval", "allow"),
        recorded.waiting: ("require_approval", "allow"),
    }
    approved = next(r for r in rows if r.intent_id == recorded.approved)
    assert "case-notes.unattended-unless-sensitive" in approved.determining
    denied = next(r for r in rows if r.intent_id == recorded.denied)
    assert (denied.outcome, denied.reasons) == ("deny", ("case.closed",))


def test_the_command_prints_the_changed_decisions(
    system: System, recorded: Recorded, flipped: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOCKGATE_VAR_DIR", str(system.root))
    monkeypatch.setenv("LOCKGATE_NATS_URL", system.url)
    intents = [a for i in recorded.all for a in ("--intent", i)]
    assert main(["replay", *intents, "--bundle", str(flipped), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["counterfactual"]
    assert (out["decisions"], out["changed"]) == (4, 3)
    assert {r["intent_id"] for r in out["rows"]} == {recorded.executed, recorded.approved, recorded.waiting}
    assert main(["replay", *intents, "--bundle", str(flipped)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("3 of 4 recorded decisions change")
    assert "allow  " in table and "require_approval" in table


def test_a_run_or_a_time_range_selects_candidates(
    system: System, recorded: Recorded, flipped: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOCKGATE_VAR_DIR", str(system.root))
    monkeypatch.setenv("LOCKGATE_NATS_URL", system.url)
    (candidate,) = _candidates(system, (recorded.denied,))
    assert candidate.first is not None
    assert main(["replay", candidate.first.run_id, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["replay"]["candidates"]
    assert (row["source"], row["replayed"]["state"], row["replayed"]["reason"]) == (
        recorded.denied, "denied", "case.closed")
    views = open_views(var_dir=system.root)
    try:
        times = sorted(r.created_at for r in (views.intent(i) for i in recorded.all) if r is not None)
    finally:
        views.close()
    last = datetime.fromisoformat(times[-1]) + timedelta(microseconds=1)  # ``until`` is exclusive
    assert main(["replay", "--since", times[0], "--until", last.isoformat(), "--tenant", "tenant-a",
                 "--bundle", str(flipped), "--world"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 of 4 recorded decisions change")
    assert "approved by alice" in out and FIXTURE_MISSING in out
    assert main(["replay", "--since", times[0], "--until", last.isoformat(), "--bundle", str(flipped),
                 "--world", "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["counterfactual"]["changed"] == 3
    assert [c["replayed"]["state"] for c in both["replay"]["candidates"]] == [
        "awaiting_approval", "denied", "completed", "failed"]


# -- historical approvals -------------------------------------------------------------------


async def test_a_recorded_approval_is_evidence_not_authority(
    system: System, recorded: Recorded, deployment: BrokerDeployment,
) -> None:
    before = _ledger(system)
    result = await _replay(system, deployment, (recorded.approved,))
    (row,) = result.rows
    assert (row.recorded_state, row.recorded_review) == ("completed", "approved by alice")
    assert (row.decision, row.state, row.executed) == ("require_approval", "awaiting_approval", False)
    assert row.digest == row.recorded_digest  # the same consequence, to the byte
    assert _ledger(system) == before


# -- fail closed ----------------------------------------------------------------------------


async def test_an_effect_never_recorded_fails_closed(
    system: System, recorded: Recorded, flipped: Path, deployment: BrokerDeployment,
) -> None:
    """Allowed only under the flipped bundle, the waiting note reaches the gate: its world has
    no recorded effect for it, so the attempt is refused before anything is sent."""
    before = _ledger(system)
    result = await _replay(system, deployment, (recorded.waiting,), flipped)
    (row,) = result.rows
    assert (row.recorded_state, row.decision) == ("awaiting_approval", "allow")
    assert (row.state, row.reason, row.executed) == ("failed", FIXTURE_MISSING, False)
    assert [m.verb for m in result.misses] == ["execute"]
    assert _ledger(system) == before


async def test_no_evidence_stops_at_normalization(
    system: System, recorded: Recorded, deployment: BrokerDeployment,
) -> None:
    before = _ledger(system)
    result = await _replay(system, deployment, (recorded.executed,), recorded_evidence=False)
    (row,) = result.rows
    assert (row.recorded_state, row.state, row.reason) == ("completed", "rejected", FIXTURE_MISSING)
    assert (row.decision, row.executed) == ("", False)
    assert _ledger(system) == before


async def test_missing_facts_stop_the_intent_on_the_record(
    system: System, recorded: Recorded, deployment: BrokerDeployment, tmp_path: Path,
) -> None:
    """Normalization answered by a declared fixture, no facts anywhere: policy cannot ask
    the world, and the fixture world gives the intent up with the missing fixture as cause."""
    (candidate,) = _candidates(system, (recorded.executed,))
    first, normalized = candidate.first, candidate.of(CandidateNormalized)[0]
    assert isinstance(first, CandidateReceived)
    assert isinstance(normalized, CandidateNormalized)
    declared = tmp_path / "fixtures.yaml"
    declared.write_text(json.dumps({"normalize": [{
        "capability": first.tool, "tenant": first.tenant, "actor": first.actor,
        "arguments": first.arguments, "result": {"arguments": normalized.arguments,
                                                  "resource": normalized.resource,
                                                  "destination": normalized.destination}}]}))
    before = _ledger(system)
    result = await _replay(system, deployment, (recorded.executed,), declared=declared,
                           recorded_evidence=False)
    (row,) = result.rows
    assert (row.digest, row.decision, row.stopped) == (row.recorded_digest, "", FIXTURE_MISSING)
    assert row.state == "refused"
    assert [m.verb for m in result.misses] == ["facts"]
    assert _ledger(system) == before


async def test_a_straight_replay_executes_in_its_own_world_only(
    system: System, recorded: Recorded, deployment: BrokerDeployment,
) -> None:
    before = _ledger(system)
    result = await _replay(system, deployment, (recorded.executed, recorded.denied))
    executed, denied = result.rows
    assert (executed.decision, executed.state, executed.executed) == ("allow", "completed", True)
    assert executed.digest == executed.recorded_digest and executed.intent != recorded.executed
    assert (denied.decision, denied.state, denied.reason) == ("deny", "denied", "case.closed")
    assert _ledger(system) == before


async def test_a_candidate_intake_refused_is_refused_again(
    system: System, recorded: Recorded, deployment: BrokerDeployment,
) -> None:
    """Its exact argument text is on the record: intake reads it again and refuses it again."""
    gw = await system.gateway("tenant-a")
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
        turn = await run.open_turn()
        refused = await turn.propose(tool="case.add_note", arguments='{"note": "a", "note": "b"}')
    finally:
        await gw.close()
    assert refused.status == "rejected"
    views = open_views(var_dir=system.root)
    try:
        deadline = time.monotonic() + 30
        while views.intent(refused.candidate_id) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    finally:
        views.close()
    result = await _replay(system, deployment, (refused.candidate_id,))
    (row,) = result.rows
    assert (row.recorded_state, row.recorded_reason) == ("rejected", "tool.arguments.duplicate")
    assert (row.state, row.reason, row.stopped) == ("rejected", "tool.arguments.duplicate", "")


# -- determinism ----------------------------------------------------------------------------


async def test_the_same_replay_twice_is_the_same(
    system: System, recorded: Recorded, deployment: BrokerDeployment,
) -> None:
    first = await _replay(system, deployment, recorded.all)
    second = await _replay(system, deployment, recorded.all)
    assert first.replay_id == second.replay_id
    assert first.rows == second.rows
    assert (first.decisions_digest, first.world_digest) == (second.decisions_digest, second.world_digest)
    assert [r.state for r in first.rows] == ["completed", "denied", "awaiting_approval", "awaiting_approval"]


async def test_the_fixture_world_keeps_the_invariants(
    system: System, recorded: Recorded, flipped: Path, deployment: BrokerDeployment,
) -> None:
    """the invariants (docs/design.md) over what the replays stored: nothing authorized without an allow
    or an approval bound to its digest (a recorded approval is neither), no effect twice."""
    for bundle in (POLICIES, flipped):
        result = await _replay(system, deployment, recorded.all, bundle)
        assert violations({r.intent_id: list(r.events) for r in result.replayed if r.intent_id}) == []


# -- the replay role ------------------------------------------------------------------------


async def test_the_replay_user_cannot_reach_a_real_adapter(system: System, recorded: Recorded) -> None:
    before = _ledger(system)
    errors: list[Exception] = []

    async def noted(exc: Exception) -> None:
        errors.append(exc)

    nc = await system.connect("replay", error_cb=noted)
    try:
        with pytest.raises((NatsError, TimeoutError)):
            await nc.request("lg.adapter.case.add_note.facts", b"{}", timeout=1)
        with pytest.raises((NatsError, TimeoutError)):
            await nc.request("lg.adapter.case.add_note.normalize", b"{}", timeout=1)
        for subject in ("lg.exec.case.add_note", "lg.propose.tenant-a.r1", "lg.run.tenant-a.open",
                        "lg.evt.tenant-a.x.1.CandidateReceived._"):
            await nc.publish(subject, b"{}")
        await nc.flush()
        await asyncio.sleep(0.3)
    finally:
        await nc.close()
    refused = " ".join(str(e) for e in errors).lower()  # nats-py lower-cases the server's -ERR
    for subject in ("lg.adapter.case.add_note.facts", "lg.adapter.case.add_note.normalize",
                    "lg.exec.case.add_note", "lg.propose.tenant-a.r1", "lg.run.tenant-a.open"):
        assert f'permissions violation for publish to "{subject}"' in refused
    assert _ledger(system) == before


async def test_the_replay_user_reads_runs_and_contracts(
    system: System, recorded: Recorded, deployment: BrokerDeployment,
) -> None:
    (candidate,) = _candidates(system, (recorded.executed,))
    first = candidate.first
    assert isinstance(first, CandidateReceived)
    run = await deployment.run("tenant-a", first.run_id)
    assert run is not None and run.context == {"case_id": "case-123"}
    contract = await deployment.contract("case.add_note")
    assert contract is not None and contract.revision == first.contract_revision


# -- evidence: as recorded, current, or none --------------------------------------------------

#: A rule that reads the contract: nothing moving personal data goes through.
NO_PII = """@id("case.pii")
forbid (principal, action, resource is Lockgate::Case)
when { context.data_classes.contains("pii") };
"""


def _lockgate(system: System, *args: str, url: str = "", var_dir: Path | None = None,
              ) -> subprocess.CompletedProcess[str]:
    """The ``lockgate`` command as a process of its own, pointed at the system (or elsewhere)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_VAR_DIR=str(var_dir or system.root), LOCKGATE_NATS_URL=url or system.url)
    return subprocess.run([sys.executable, "-m", "lockgate.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _refused_credentials(system: System, root: Path) -> Path:
    """A var directory whose replay user has the wrong password."""
    creds = json.loads((system.root / "credentials" / "replay.json").read_text())
    (root / "credentials").mkdir(parents=True)
    (root / "credentials" / "replay.json").write_text(json.dumps({**creds, "password": "not-it"}))
    return root


@pytest.mark.parametrize("broken", ["unreachable", "refused"])
def test_a_deployment_that_cannot_be_read_is_one_line_and_no_answer(
    system: System, recorded: Recorded, flipped: Path, tmp_path: Path, broken: str,
) -> None:
    """No silent fallback to the contracts compiled into lockgate, or to no runs at all."""
    if broken == "unreachable":
        proc = _lockgate(system, "replay", "--intent", recorded.executed, "--bundle", str(flipped),
                         url=f"nats://127.0.0.1:{_closed_port()}")
    else:
        proc = _lockgate(system, "replay", "--intent", recorded.executed, "--bundle", str(flipped),
                         var_dir=_refused_credentials(system, tmp_path / "var"))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot read runs and contracts" in lines[0] and "--offline" in lines[0]
    if broken == "refused":
        assert "authorization violation" in lines[0].lower()  # the server's word, not a reset
    assert proc.stdout == ""


async def test_a_contract_changed_since_is_decided_as_recorded(
    system: System, recorded: Recorded, tmp_path: Path,
) -> None:
    """The capability now says it moves personal data, and a bundle forbids that: the note was
    normalized under a contract that did not, so the decision stands as recorded."""
    bundle = bundle_copy(tmp_path, (POLICIES / "bundle.yaml").read_text(), {"pii.cedar": NO_PII})
    changed = msgspec.structs.replace(CONTRACT, data_classes=(*CONTRACT.data_classes, "pii"))
    system.kill("adapter.casenotes")  # its heartbeat would register the contract it has again
    nc = await system.connect()
    try:
        kv = await nc.jetstream().key_value(CAPABILITIES_BUCKET)
        await kv.put(subjects.capability_key(CONTRACT.name), msgspec.json.encode(
            Describe(contract=changed, adapter="adapter-casenotes", alive_at=datetime.now().astimezone())))
        proc = _lockgate(system, "replay", "--intent", recorded.executed, "--bundle", str(bundle), "--all",
                         "--json")
    finally:
        await nc.close()
        await system.restart("adapter.casenotes")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["counterfactual"]
    (row,) = out["rows"]
    assert (row["recorded"]["outcome"], row["counterfactual"]["outcome"], row["changed"]) == (
        "allow", "allow", False)
    assert row["evidence"]["contract"] == "recorded" and row["evidence"]["as_recorded"]
    assert (out["decisions"], out["changed"], out["not_as_recorded"], out["undecidable"]) == (1, 0, 0, 0)


@dataclass(frozen=True)
class Altered:
    """Two more candidates: one whose run was opened again since, one whose run is lost."""

    reopened: str
    lost: str


async def _alter(system: System) -> Altered:
    gw = await system.gateway("tenant-a")
    try:
        ids, runs = [], []
        for case_id in ("case-123", "case-123"):
            run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": case_id})
            answer = await (await run.open_turn()).propose(
                tool="case.add_note", arguments=json.dumps({"note": "One more."}))
            assert answer.status == "executed"
            ids.append(answer.candidate_id)
            runs.append(run.id)
        # Opened again by the host, read-only this time: today's record of it is not the
        # context the decision read.
        await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"},
                          stage="read-only", run_id=runs[0])
    finally:
        await gw.close()
    nc = await system.connect()
    try:
        await (await nc.jetstream().key_value(RUNS_BUCKET)).delete(subjects.run_key("tenant-a", runs[1]))
    finally:
        await nc.close()
    return Altered(*ids)


@pytest.fixture(scope="module")
def altered(system: System) -> Altered:
    made = asyncio.run(_alter(system))
    views = open_views(var_dir=system.root)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = [views.intent(i) for i in (made.reopened, made.lost)]
            if all(r is not None and r.state == "completed" for r in rows):
                return made
            time.sleep(0.2)
    finally:
        views.close()
    raise AssertionError("the views did not catch up")


def test_a_run_opened_again_since_is_current_evidence_and_says_so(
    system: System, altered: Altered, flipped: Path,
) -> None:
    proc = _lockgate(system, "replay", "--intent", altered.reopened, "--bundle", str(POLICIES), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["counterfactual"]
    (row,) = out["rows"]  # listed although it may not change: it is not as recorded
    assert row["evidence"]["run"] == "current" and not row["evidence"]["as_recorded"]
    assert "opened again" in row["evidence"]["notes"][0]
    assert (out["decisions"], out["not_as_recorded"]) == (1, 1)
    today = "the run's context as the deployment's runs hold it today"
    assert f"1 of the 1 decided on evidence not as recorded: {today} (1 decision)" in out["summary"]
    text = _lockgate(system, "replay", "--intent", altered.reopened, "--bundle", str(flipped))
    assert text.returncode == 0, text.stderr
    head, _, line, because, why = text.stdout.strip().splitlines()
    assert head == (f"1 of 1 recorded decisions change under {flipped}; "
                    f"1 of the 1 decided on evidence not as recorded: {today} (1 decision)")
    assert line.startswith(altered.reopened[:12]) and line.endswith(f"not as recorded: {today}")
    assert because == "not as recorded, because:" and "was opened again at" in why
    world = _lockgate(system, "replay", "--intent", altered.reopened, "--json")
    assert world.returncode == 0, world.stderr
    (replayed,) = json.loads(world.stdout)["replay"]["candidates"]
    assert replayed["evidence"] == f"not as recorded: {today}"


def test_a_run_with_no_record_is_undecidable(system: System, altered: Altered, flipped: Path) -> None:
    proc = _lockgate(system, "replay", "--intent", altered.lost, "--intent", altered.reopened,
                     "--bundle", str(flipped), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["counterfactual"]
    lost = next(r for r in out["rows"] if r["intent_id"] == altered.lost)
    assert lost["undecidable"].startswith("no record of the context run")
    assert (lost["counterfactual"], lost["changed"]) == (None, False)
    assert (out["decisions"], out["undecidable"]) == (1, 1)  # neither changed nor unchanged
    assert out["summary"].endswith("1 undecidable (no evidence), not counted")


def test_offline_the_builtin_contracts_answer_only_when_asked_and_say_so(
    system: System, recorded: Recorded, tmp_path: Path,
) -> None:
    """No running system at all (its port closed): runs from a fixture file, and the contract
    the fixture world registers from lockgate's own code only with --builtin-contracts."""
    (candidate,) = _candidates(system, (recorded.executed,))
    first = candidate.first
    assert first is not None
    runs = tmp_path / "runs.yaml"
    runs.write_text(json.dumps({"runs": [{"tenant": "tenant-a", "run_id": first.run_id, "actor": "user-42",
                                          "context": {"case_id": "case-123"}}]}))
    offline = ("replay", "--intent", recorded.executed, "--offline", "--fixtures", str(runs), "--json")
    closed = f"nats://127.0.0.1:{_closed_port()}"
    without = _lockgate(system, *offline, url=closed)
    assert without.returncode == 0, without.stderr
    (row,) = json.loads(without.stdout)["replay"]["candidates"]
    assert row["replayed"]["stopped"] == f"{FIXTURE_MISSING}: no contract for case.add_note"
    assert row["evidence"] == ("not as recorded: the run's context declared in the fixture file; "
                               "no contract at all")
    builtin = _lockgate(system, *offline, "--builtin-contracts", url=closed)
    assert builtin.returncode == 0, builtin.stderr
    (row,) = json.loads(builtin.stdout)["replay"]["candidates"]
    assert (row["replayed"]["state"], row["replayed"]["digest"]) == ("completed", row["recorded"]["digest"])
    assert row["evidence"] == ("not as recorded: the run's context declared in the fixture file; "
                               "the contract compiled into lockgate")


async def test_prior_effects_are_read_from_the_whole_run(system: System, tmp_path: Path) -> None:
    """Only the run's second note selected: the first one it completed is still on the record."""
    one_note = """@id("run.one-note-only")
forbid (principal, action, resource is Lockgate::Case)
when { context.prior_effects >= 1 };
"""
    bundle = bundle_copy(tmp_path, (POLICIES / "bundle.yaml").read_text(), {"one-note.cedar": one_note})
    gw = await system.gateway("tenant-a")
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
        turn = await run.open_turn()
        answers = [await turn.propose(tool="case.add_note", arguments=json.dumps({"note": note}))
                   for note in ("First.", "Second.")]
    finally:
        await gw.close()
    assert [a.status for a in answers] == ["executed", "executed"]
    second = answers[1].candidate_id
    views = open_views(var_dir=system.root)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
                (r := views.intent(a.candidate_id)) is not None and r.state == "completed" for a in answers):
            await asyncio.sleep(0.2)
    finally:
        views.close()
    proc = _lockgate(system, "replay", "--intent", second, "--bundle", str(bundle), "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["counterfactual"]["rows"]
    assert (row["intent_id"], row["counterfactual"]["outcome"], row["counterfactual"]["reasons"]) == (
        second, "deny", ["run.one-note-only"])
