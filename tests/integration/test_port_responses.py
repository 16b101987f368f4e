"""One contract for the responses port: the in-memory fake and the ``LG_RESPONSES`` stream.

The answer is read back as the model reads it: on the broker, the last message on the
candidate's response subject; in memory, the fake's ``answer``. Responses to one intent are
stored by several processes (a process's workers and its replicas), so each rule is held both
for the process that stored the earlier response and for another that has seen none of them.
"""

from __future__ import annotations

import msgspec
import pytest
from nats.js.errors import NotFoundError

from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import response_subject
from lockgate.core.ids import random_id
from lockgate.intent.aggregate import EffectIntent
from lockgate.runtime.context import MemoryPorts, Ports
from lockgate.runtime.ports.responses import Responses, ResponseStore
from lockgate.runtime.streams import RESPONSES
from lockgate.testing.intents import History

#: Who stores the later response: the process that stored the earlier, or another one.
WRITERS = ("same-process", "another-process")


def a_history() -> History:
    return History(run_id=f"run-{random_id()[:12]}")


def response(intent: EffectIntent, status: str) -> bytes:
    return msgspec.json.encode(ModelResponse(candidate_id=intent.intent_id, call_id=intent.call_id,
                                             status=status, code=status))


def writer(ports: Ports, which: str) -> Responses:
    """The responses port of the process ``which`` names (the fake is one store for all)."""
    if which == "same-process" or isinstance(ports, MemoryPorts):
        return ports.responses
    return ResponseStore(ports.js)


async def answer(ports: Ports, intent: EffectIntent) -> bytes | None:
    """The response the model reads for ``intent`` (``None``: none yet)."""
    if isinstance(ports, MemoryPorts):
        return ports.responses.answer(intent)
    subject = response_subject(intent.tenant, intent.run_id, intent.intent_id)
    try:
        return (await ports.js.get_last_msg(RESPONSES, subject, direct=True)).data
    except NotFoundError:
        return None


async def test_a_stored_response_is_the_candidate_s_answer(ports: Ports) -> None:
    h = a_history()
    other = History(run_id=h.intent.run_id, call_id="call-2").intent
    assert await answer(ports, h.intent) is None
    await ports.responses.store(h.intent, response(h.intent, "pending"), f"response-{random_id()}")
    assert await answer(ports, h.intent) == response(h.intent, "pending")
    assert await answer(ports, other) is None


@pytest.mark.parametrize("which", WRITERS)
async def test_a_response_from_a_later_version_replaces_the_earlier(ports: Ports, which: str) -> None:
    h = a_history()
    first = h.normalized().intent
    await ports.responses.store(first, response(first, "pending"), f"response-{random_id()}")
    later = h.decided("deny").intent
    await writer(ports, which).store(later, response(later, "denied"), f"response-{random_id()}")
    assert await answer(ports, later) == response(later, "denied")


@pytest.mark.parametrize("which", WRITERS)
async def test_a_stale_response_never_replaces_a_newer_one(ports: Ports, which: str) -> None:
    h = a_history()
    stale = h.normalized().intent
    newer = h.decided("deny").intent
    await ports.responses.store(newer, response(newer, "denied"), f"response-{random_id()}")
    await writer(ports, which).store(stale, response(stale, "pending"), f"response-{random_id()}")
    assert await answer(ports, newer) == response(newer, "denied")


@pytest.mark.parametrize("which", WRITERS)
async def test_the_first_response_of_a_version_stands(ports: Ports, which: str) -> None:
    intent = a_history().normalized().intent
    await ports.responses.store(intent, response(intent, "pending"), f"response-{random_id()}")
    await writer(ports, which).store(intent, response(intent, "paused"), f"response-{random_id()}")
    assert await answer(ports, intent) == response(intent, "pending")


@pytest.mark.parametrize("which", WRITERS)
async def test_a_repeat_by_message_id_stores_nothing_new(ports: Ports, which: str) -> None:
    h = a_history()
    e2, e3 = f"response-{random_id()}", f"response-{random_id()}"
    first = h.normalized().intent
    await ports.responses.store(first, response(first, "pending"), e2)
    newer = h.decided("deny").intent
    await ports.responses.store(newer, response(newer, "denied"), e3)
    again = writer(ports, which)
    await again.store(first, response(first, "pending"), e2)
    await again.store(newer, response(newer, "denied"), e3)
    assert await answer(ports, newer) == response(newer, "denied")
    # The process that repeated them still stores what comes later.
    latest = h.decided("pause").intent
    await again.store(latest, response(latest, "paused"), f"response-{random_id()}")
    assert await answer(ports, latest) == response(latest, "paused")
