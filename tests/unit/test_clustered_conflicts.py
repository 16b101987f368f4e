"""A clustered stream says "wrong last sequence" as 10164 (no number) where a single server
says 10071: every compare-and-set treats the two alike (event store, KV, resource locks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from nats.js.errors import APIError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.eventstore.base import AggregateHistory, ConcurrencyConflict, NewEvent, RecordedEvent
from lockgate.eventstore.jetstream import CONFLICT_CODES, JetStreamEventStore, PubAck
from lockgate.runtime.ports.locks import ResourceLocks

CODES = (10071, 10164)


def test_both_codes_are_conflicts() -> None:
    assert set(CODES) <= CONFLICT_CODES


class _Store(JetStreamEventStore):
    """The JetStream store with the server replaced: a refused publish, then a reload."""

    def __init__(self, code: int, head: tuple[RecordedEvent, ...]) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # never used: both calls are replaced
        self.code = code
        self.head = head

    async def _publish(self, subjects: list[str], events: Sequence[NewEvent],
                       guard: dict[str, str]) -> PubAck:
        return PubAck(error=PubAck._Error(err_code=self.code, description="wrong last sequence"))

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        return AggregateHistory(tenant, intent_id, self.head)


def _recorded(version: int, event_id: str) -> RecordedEvent:
    return RecordedEvent("t", "i", version, "CandidateReceived", event_id, b"{}", version)


@pytest.mark.parametrize("code", CODES)
async def test_an_append_that_lost_the_race_is_a_conflict(code: int) -> None:
    store = _Store(code, (_recorded(1, "theirs"),))
    with pytest.raises(ConcurrencyConflict):
        await store.append(AggregateHistory("t", "i"), [NewEvent("mine", "CandidateReceived", b"{}")])


@pytest.mark.parametrize("code", CODES)
async def test_a_retried_append_that_landed_is_success(code: int) -> None:
    store = _Store(code, (_recorded(1, "mine"),))
    after = await store.append(AggregateHistory("t", "i"), [NewEvent("mine", "CandidateReceived", b"{}")])
    assert [e.event_id for e in after.events] == ["mine"]


class _RefusingJetStream:
    """A JetStream context whose every publish is refused with ``code``."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.published: list[str] = []

    async def publish(self, subject: str, payload: bytes = b"", **_: Any) -> Any:
        self.published.append(subject)
        raise APIError(code=400, err_code=self.code, description="wrong last sequence")


@pytest.mark.parametrize("code", CODES)
async def test_kv_update_raises_wrong_last_sequence(code: int) -> None:
    js = _RefusingJetStream(code)
    kv = KeyValue(name="LG_BUDGETS", stream="KV_LG_BUDGETS", pre="$KV.LG_BUDGETS.", js=js,  # type: ignore[arg-type]
                 direct=True)
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("k", b"v", last=3)


class _FreeKeys:
    """A bucket in which every key is free."""

    async def get(self, key: str) -> Any:
        from nats.js.errors import KeyNotFoundError

        raise KeyNotFoundError


@pytest.mark.parametrize("code", CODES)
async def test_a_lock_taken_by_another_between_read_and_write_is_not_ours(code: int) -> None:
    js = _RefusingJetStream(code)
    locks = ResourceLocks(js, _FreeKeys())  # type: ignore[arg-type]
    assert await locks.take("case-1", b"intent-1") is False
    # A create (refused: the key exists after all), the read that finds it free, the
    # write that is refused too.
    assert js.published == ["$KV.LG_LOCKS.case-1"] * 2
