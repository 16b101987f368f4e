"""One contract for the proposals port: the in-memory fake and the ``LG_CANDIDATES`` stream.

What intake would receive is read back: on the broker, every message stored on the run's
candidate subject (its bytes and message id); in memory, what the fake kept.
"""

from __future__ import annotations

from nats.js.errors import NotFoundError

from lockgate.contracts.subjects import propose_subject
from lockgate.core.ids import random_id
from lockgate.runtime.context import MemoryPorts, Ports
from lockgate.runtime.streams import CANDIDATES


def a_run() -> str:
    return f"run-{random_id()[:12]}"


async def proposed(ports: Ports, tenant: str, run_id: str) -> list[tuple[str, str, bytes]]:
    """The run's proposals as intake would receive them, in order: (subject, message id, bytes)."""
    subject = propose_subject(tenant, run_id)
    if isinstance(ports, MemoryPorts):
        return [(propose_subject(t, r), message_id, candidate)
                for message_id, (t, r, candidate) in ports.proposals.proposed.items()
                if (t, r) == (tenant, run_id)]
    found: list[tuple[str, str, bytes]] = []
    seq = 1
    while True:
        try:
            msg = await ports.js.get_msg(CANDIDATES, seq, subject=subject, next=True)
        except NotFoundError:
            return found
        found.append((msg.subject or "", (msg.headers or {}).get("Nats-Msg-Id", ""), msg.data or b""))
        seq = (msg.seq or seq) + 1


async def test_a_proposal_reaches_the_run_s_subject_with_its_bytes_and_message_id(ports: Ports) -> None:
    run_id = a_run()
    await ports.proposals.propose("tenant-a", run_id, b'{"call_id": "call-2"}', message_id=f"{run_id}.edit")
    assert await proposed(ports, "tenant-a", run_id) == [
        (propose_subject("tenant-a", run_id), f"{run_id}.edit", b'{"call_id": "call-2"}')]
    assert await proposed(ports, "tenant-b", run_id) == []
    assert await proposed(ports, "tenant-a", a_run()) == []


async def test_the_same_message_id_again_proposes_nothing_new(ports: Ports) -> None:
    run_id = a_run()
    for candidate in (b'{"call_id": "call-2"}', b'{"call_id": "call-2"}', b'{"call_id": "call-2", "v": 2}'):
        await ports.proposals.propose("tenant-a", run_id, candidate, message_id=f"{run_id}.edit")
    assert await proposed(ports, "tenant-a", run_id) == [
        (propose_subject("tenant-a", run_id), f"{run_id}.edit", b'{"call_id": "call-2"}')]


async def test_proposals_under_their_own_message_ids_each_stand_in_order(ports: Ports) -> None:
    run_id = a_run()
    for n in (1, 2, 3):
        await ports.proposals.propose("tenant-a", run_id, b'{"n": %d}' % n, message_id=f"{run_id}.{n}")
    subject = propose_subject("tenant-a", run_id)
    assert await proposed(ports, "tenant-a", run_id) == [
        (subject, f"{run_id}.1", b'{"n": 1}'), (subject, f"{run_id}.2", b'{"n": 2}'),
        (subject, f"{run_id}.3", b'{"n": 3}')]


async def test_a_message_id_is_one_proposal_whichever_run_it_names(ports: Ports) -> None:
    first, second = a_run(), a_run()
    message_id = f"edit-{random_id()}"
    await ports.proposals.propose("tenant-a", first, b'{"run": 1}', message_id=message_id)
    await ports.proposals.propose("tenant-a", second, b'{"run": 2}', message_id=message_id)
    assert await proposed(ports, "tenant-a", first) == [
        (propose_subject("tenant-a", first), message_id, b'{"run": 1}')]
    assert await proposed(ports, "tenant-a", second) == []
