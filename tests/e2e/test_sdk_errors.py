"""The SDK's mistakes are told at once and by name: the system as it ships, its real users.

Arguments that are not text, a provider item nested deeper than intake reads, credentials
the broker refuses, a run opened without the trusted host, a subject of another tenant, a
wait on an id that is no candidate of the run: each is a typed error naming the cause,
raised before the call's own timeout (each test gives one it would otherwise run into),
and nothing was stored for the ones refused before sending.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from lockgate.client.sdk import (
    Gateway,
    InvalidCandidate,
    PermissionDenied,
    ResponseTimeout,
    Turn,
    Unauthorized,
    UnknownCandidate,
    connect,
)
from lockgate.core.ids import random_id
from lockgate.intake.parsing import MAX_ENVELOPE_DEPTH
from lockgate.runtime.topology import CANDIDATES
from lockgate.testing.system import System

NOTE = '{"note": "Customer called back; confirmed the delivery address."}'
#: Longer than any of these errors may take, shorter than the SDK's default.
TIMEOUT_S = 8.0


async def turn(gw: Gateway) -> Turn:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    return await run.open_turn()


async def candidates_stored(system: System) -> int:
    nc = await system.connect()
    try:
        return int((await nc.jetstream().stream_info(CANDIDATES)).state.last_seq)
    finally:
        await nc.close()


def nested(depth: int) -> dict[str, Any]:
    """A provider item ``depth`` objects deep (itself the first)."""
    item: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        item = {"a": item}
    return item


async def test_arguments_given_as_a_dict_are_refused_before_anything_is_sent(
    system: System, gw: Gateway
) -> None:
    t = await turn(gw)
    before = await candidates_stored(system)
    with pytest.raises(InvalidCandidate) as refused:
        await t.propose(tool="case.add_note", arguments=json.loads(NOTE), timeout_s=TIMEOUT_S)
    assert refused.value.code == "candidate.malformed" and "json.dumps" in str(refused.value)
    assert await candidates_stored(system) == before
    # the same arguments as text are the same call proposed properly
    assert (await t.propose(tool="case.add_note", arguments=NOTE, timeout_s=TIMEOUT_S)).status == "executed"


@pytest.mark.parametrize("depth", [MAX_ENVELOPE_DEPTH + 1, 900])
async def test_a_provider_item_nested_deeper_than_intake_reads_is_refused_before_sending(
    system: System, gw: Gateway, depth: int
) -> None:
    t = await turn(gw)
    before = await candidates_stored(system)
    with pytest.raises(InvalidCandidate) as refused:
        await t.propose(tool="case.add_note", arguments=NOTE, provider_item=nested(depth),
                        timeout_s=TIMEOUT_S)
    assert refused.value.code == "candidate.malformed" and "nested deeper" in str(refused.value)
    assert await candidates_stored(system) == before


async def test_a_provider_item_as_deep_as_intake_reads_is_answered(gw: Gateway) -> None:
    t = await turn(gw)
    # the candidate's envelope is one level, the item the rest
    answered = await t.propose(tool="case.add_note", arguments=NOTE,
                               provider_item=nested(MAX_ENVELOPE_DEPTH - 1), timeout_s=TIMEOUT_S)
    assert answered.status == "executed"


async def test_wrong_credentials_are_refused_as_such_not_unavailable(system: System) -> None:
    wrong = msgspec.structs.replace(system.credentials("agent-tenant-a"), password="not-the-password")
    with pytest.raises(Unauthorized) as refused:
        await connect(system.url, credentials=wrong)
    assert refused.value.code == "lockgate.unauthorized" and "agent-tenant-a" in str(refused.value)
    with pytest.raises(Unauthorized):
        await connect(system.url)  # no user at all


async def test_a_run_opened_without_the_host_says_the_host_opens_runs(system: System) -> None:
    gw = await connect(system.url, credentials=system.credentials("agent-tenant-a"), timeout_s=TIMEOUT_S)
    try:
        with pytest.raises(PermissionDenied) as refused:
            await gw.open_run(tenant="tenant-a", actor="user-42")
    finally:
        await gw.close()
    assert refused.value.code == "lockgate.permission-denied"
    assert refused.value.subject == "lg.run.tenant-a.open" and "host=" in str(refused.value)


async def test_another_tenants_subjects_are_refused_as_permissions(gw: Gateway) -> None:
    other = gw.run(tenant="tenant-b", run_id=random_id())
    with pytest.raises(PermissionDenied) as refused:
        await other.open_turn()
    assert "tenant-b" in refused.value.subject
    with pytest.raises(PermissionDenied) as unread:  # its responses, read by direct get
        await other.wait(random_id(), timeout_s=TIMEOUT_S)
    assert "tenant-b" in unread.value.subject


async def test_waiting_on_an_id_that_is_no_candidate_of_the_run_is_refused(gw: Gateway) -> None:
    t = await turn(gw)
    answered = await t.propose(tool="case.add_note", arguments=NOTE, call_id="call-1", timeout_s=TIMEOUT_S)
    run = t.run
    with pytest.raises(UnknownCandidate) as as_call:
        await run.wait("call-1", past="", timeout_s=TIMEOUT_S * 2)
    assert answered.candidate_id in str(as_call.value)  # it names the candidate id meant
    with pytest.raises(UnknownCandidate):
        await run.wait(random_id(), timeout_s=TIMEOUT_S * 2)
    elsewhere = gw.run(tenant="tenant-a", run_id=random_id())
    with pytest.raises(UnknownCandidate):
        await elsewhere.wait(answered.candidate_id, timeout_s=TIMEOUT_S * 2)
    # the candidate itself, waited on in its own run, is answered as before
    assert (await run.wait(answered.candidate_id, past="")).status == "executed"


async def test_a_candidate_still_in_flight_is_no_unknown_one(gw: Gateway) -> None:
    t = await turn(gw)
    answered = await t.propose(tool="case.add_note", arguments=NOTE, timeout_s=TIMEOUT_S)
    with pytest.raises(ResponseTimeout):  # known: waits its whole timeout for another status
        await t.run.wait(answered.candidate_id, past=answered.status, timeout_s=TIMEOUT_S / 2)
