"""The fixture world's adapter, asked over the world's own broker: what no fixture answers is refused."""

from __future__ import annotations

from pathlib import Path

import msgspec

from lockgate.contracts import subjects
from lockgate.contracts.messages import QueryRequest
from lockgate.intent.events import EffectCompleted
from lockgate.replay.fixtures import FIXTURE_MISSING, Fixtures
from lockgate.replay.record import Candidate, Known
from lockgate.replay.world import FixtureWorld
from lockgate.testing.intents import History
from lockgate.worlds.casenotes.adapter import CONTRACT

POLICIES = Path(__file__).resolve().parents[2] / "deploy" / "policies"


def _executed() -> Candidate:
    h = History(contract_revision=CONTRACT.revision).normalized(digest="sha256:d1")
    h.add(EffectCompleted, attempt_id="a1", receipt={"note_id": "n1"}, result={}, provenance={})
    return Candidate(h.intent_id, "tenant-a", 1, tuple(h.events))


async def test_a_query_no_fixture_answers_is_refused_as_a_missing_fixture(tmp_path: Path) -> None:
    """The reconciler's question about a consequence the record holds no effect for: the world
    does not know it is absent, so it says so instead of answering ``absent``."""
    executed = _executed()
    fixtures = Fixtures.recorded([executed])
    async with FixtureWorld(fixtures, Known({}, {CONTRACT.name: CONTRACT}), POLICIES, replay_id="r",
                            root=tmp_path) as world:
        (replayed,) = await world.replay([executed])  # registers the fixture adapter
        assert replayed.stopped.startswith(FIXTURE_MISSING)  # no run declared or known
        ask = QueryRequest(tenant="tenant-a", intent_id="0" * 32, intent_key="k1", arguments={})
        reply = await world.ports.nc.request(subjects.adapter(CONTRACT.name, "query"),
                                             msgspec.json.encode(ask), timeout=5)
    answer = msgspec.json.decode(reply.data)
    assert answer == {"error": FIXTURE_MISSING, "detail": "no recorded effect to query"}
    assert [m.verb for m in fixtures.misses] == ["query"]
