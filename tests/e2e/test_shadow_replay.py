"""The shadow bundle's live decisions and ``lockgate replay --bundle`` agree, decision for decision.

A shadow bundle runs beside the demo one; candidates over three capabilities of the demo
worlds go through (some it flips: a publication to deny, notes to and from a reviewer;
some it decides alike: drafts, a note on a closed case). Each decision recorded the
shadow's outcome, reasons and determining policies; the counterfactual of the same
record under the shadow bundle's directory, read by the real command, says the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from lockgate.intent.events import PolicyDecided
from lockgate.testing.system import System, running
from lockgate.views.store import open_views
from tests.e2e.shadow_traffic import (
    DRAFT,
    NOTE,
    PUBLISH,
    Shadowed,
    active_bundle,
    decisions,
    propose,
    shadow_bundle,
    start_shadow,
)

#: The traffic: (capability, case, candidates in one run), and what the active and shadow
#: bundles decide on each candidate.
TRAFFIC = (
    (PUBLISH, "case-123", 1, [("allow", "deny")]),
    (PUBLISH, "case-123", 1, [("allow", "deny")]),
    # The second note of a run: the shadow denies it on the history its decision read.
    (NOTE, "case-123", 2, [("allow", "require_approval"), ("allow", "deny")]),
    (NOTE, "case-sensitive", 1, [("require_approval", "allow")]),
    (NOTE, "case-closed", 1, [("deny", "deny")]),
    (DRAFT, "case-123", 2, [("allow", "allow"), ("allow", "allow")]),
)
EXPECTED = [pair for *_, pairs in TRAFFIC for pair in pairs]


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    active = active_bundle(tmp_path_factory.mktemp("active"))
    with running(System(tmp_path_factory.mktemp("system"),
                        extra_env={"LOCKGATE_POLICY_DIR": str(active)})) as s:
        yield s


@pytest.fixture(scope="module")
def shadowed(system: System, tmp_path_factory: pytest.TempPathFactory) -> Shadowed:
    return asyncio.run(start_shadow(system, shadow_bundle(tmp_path_factory.mktemp("shadow"))))


async def _traffic(system: System) -> dict[str, PolicyDecided]:
    """Each candidate's decision, as recorded, by candidate id."""
    gw = await system.gateway("tenant-a")
    try:
        ids = [a.candidate_id for tool, case, times, _ in TRAFFIC
               for a in await propose(gw, tool, case=case, times=times)]
    finally:
        await gw.close()
    decided = {}
    for candidate_id in ids:
        (decision,) = [d for d in await decisions(system, candidate_id) if d.outcome != "pause"]
        decided[candidate_id] = decision
    return decided


@pytest.fixture(scope="module")
def recorded(system: System, shadowed: Shadowed) -> dict[str, PolicyDecided]:
    decided = asyncio.run(_traffic(system))
    views = open_views(var_dir=system.root)
    try:  # the replay reads the record from the views: wait until they hold every decision
        deadline = time.monotonic() + 30
        while any(not any(e.event_type == "PolicyDecided" for e in views.events_of(i)) for i in decided):
            assert time.monotonic() < deadline, "the views did not catch up"
            time.sleep(0.2)
    finally:
        views.close()
    return decided


def test_the_traffic_is_decided_beside_the_shadow_as_expected(
    shadowed: Shadowed, recorded: dict[str, PolicyDecided],
) -> None:
    said = [(str(d.outcome), str(d.shadow.outcome) if d.shadow else None, d.shadow and d.shadow.revision)
            for d in recorded.values()]
    assert said == [(active, shadow, shadowed.revision) for active, shadow in EXPECTED]
    # The notes' decisions read the run's history, and recorded it.
    notes = [d for d in recorded.values() if d.history]
    assert len(notes) == 4 and [d.history["run"]["write"] for d in notes[:2]] == [0, 1]


def test_replay_under_the_shadow_bundle_agrees_with_every_live_shadow_decision(
    system: System, shadowed: Shadowed, recorded: dict[str, PolicyDecided],
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_VAR_DIR=str(system.root), LOCKGATE_NATS_URL=system.url)
    intents = [a for i in recorded for a in ("--intent", i)]
    proc = subprocess.run([sys.executable, "-m", "lockgate.cli", "replay", *intents,
                           "--bundle", str(shadowed.directory), "--all", "--json"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["counterfactual"]
    assert out["revision"] == shadowed.revision
    assert (out["decisions"], out["undecidable"], out["not_as_recorded"]) == (len(EXPECTED), 0, 0)
    replayed = {r["intent_id"]: r for r in out["rows"]}
    assert replayed.keys() == recorded.keys()
    for intent_id, decision in recorded.items():
        shadow, row = decision.shadow, replayed[intent_id]
        assert shadow is not None
        assert row["counterfactual"] == {"outcome": str(shadow.outcome), "reasons": shadow.reasons,
                                         "determining": shadow.determining, "revision": shadow.revision}
        assert row["recorded"]["outcome"] == str(decision.outcome)
        assert row["evidence"]["as_recorded"], row["evidence"]
    assert out["changed"] == sum(active != shadow for active, shadow in EXPECTED)
