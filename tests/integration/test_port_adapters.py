"""One contract for the adapters port: ``AdapterClient`` asking a responder the test scripts on
the server, and ``FakeAdapters`` scripted with the same replies, answer and fail alike.

The fake is scripted with the very bytes the responder replies, so a refusal, a reply that
is no answer, and silence are held to what the client makes of them on the broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    Describe,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
)
from lockgate.contracts.vocabulary import QueryFinding
from lockgate.core.ids import random_id
from lockgate.runtime.context import MemoryPorts, Ports, ports_for
from lockgate.runtime.ports.adapters import AdapterRefused, AdapterUnavailable
from lockgate.runtime.settings import Settings
from lockgate.worlds.casenotes.adapter import CONTRACT

#: The fake's field that scripts each verb.
SCRIPTED = {"describe": "describes", "normalize": "normalizes", "facts": "facts_answer",
            "query": "queries"}
VERBS = tuple(SCRIPTED)

NORMALIZE = NormalizeRequest(tenant="tenant-a", actor="user-42", arguments={"case": "123", "note": "hi"},
                             context={"turn": "turn-1"}, with_facts=True)
FACTS = FactsRequest(tenant="tenant-a", actor="user-42", resource={"type": "case", "id": "case-123"})
QUERY = QueryRequest(tenant="tenant-a", intent_id="intent-1", intent_key="key-1",
                     arguments={"case_id": "case-123", "note": "hi"})
#: The question each verb is asked here (``describe`` asks nothing), and the answer scripted.
QUESTIONS: dict[str, tuple[msgspec.Struct | None, msgspec.Struct]] = {
    "describe": (None, Describe(contract=CONTRACT, adapter="casenotes-1")),
    "normalize": (NORMALIZE, NormalizeResult(
        arguments={"case_id": "case-123", "note": "hi"}, resource={"type": "case", "id": "case-123"},
        destination="case-notes:tenant-a/case-123", facts=Facts(facts={"open": True}, revision="r3"))),
    "facts": (FACTS, Facts(facts={"status": "open", "notes": 2, "locked": False}, revision="r7")),
    "query": (QUERY, QueryResult(finding=QueryFinding.FOUND, receipt={"note_id": "note-9"})),
}
REFUSAL = b'{"error": "facts.unknown-resource", "detail": "no such case"}'


@pytest.fixture(params=["memory", "nats"])
async def ports(request: pytest.FixtureRequest, nc: Client) -> Ports:
    if request.param == "memory":
        return MemoryPorts.create()
    # A short wait for an adapter that never replies: the client's own timeout, not a sleep.
    return await ports_for(nc, Settings(manage_topology=True, adapter_timeout_s=0.2))


@dataclass
class Adapter:
    """One capability's adapter as a test scripts it: a responder on its subjects on the
    broker, the fake's answers in memory."""

    ports: Ports
    nc: Client
    capability: str = field(default_factory=lambda: f"port.a{random_id()[:12]}")
    #: What the responder was asked, by verb (on the broker).
    heard: dict[str, list[bytes]] = field(default_factory=dict)

    async def replies(self, verb: str, reply: bytes | None) -> None:
        """Reply ``reply`` to every ``verb`` question; ``None``: take the question, never reply."""
        if isinstance(self.ports, MemoryPorts):
            setattr(self.ports.adapters, SCRIPTED[verb], reply)  # the fake's silence is None
            return

        async def respond(msg: Msg) -> None:
            self.heard.setdefault(verb, []).append(msg.data)
            if reply is not None:
                await msg.respond(reply)

        await self.nc.subscribe(subjects.adapter(self.capability, verb), cb=respond)
        await self.nc.flush()

    async def ask(self, verb: str) -> msgspec.Struct:
        """Ask the port ``verb`` with this module's question."""
        adapters = self.ports.adapters
        if verb == "describe":
            return await adapters.describe(self.capability)
        if verb == "normalize":
            return await adapters.normalize(self.capability, NORMALIZE)
        if verb == "facts":
            return await adapters.facts(self.capability, FACTS)
        return await adapters.query(self.capability, QUERY)

    def asked(self, verb: str, kind: type[msgspec.Struct]) -> list[object]:
        """The questions of ``verb`` the adapter was asked, decoded."""
        if isinstance(self.ports, MemoryPorts):
            return self.ports.adapters.asked_for(verb)
        return [msgspec.json.decode(data, type=kind) for data in self.heard.get(verb, [])]


@pytest.fixture
def adapter(ports: Ports, nc: Client) -> Adapter:
    return Adapter(ports, nc)


@pytest.mark.parametrize("verb", VERBS)
async def test_each_verb_answers_what_the_adapter_replied(adapter: Adapter, verb: str) -> None:
    question, answer = QUESTIONS[verb]
    await adapter.replies(verb, msgspec.json.encode(answer))
    assert await adapter.ask(verb) == answer
    if question is not None:
        assert adapter.asked(verb, type(question)) == [question]


@pytest.mark.parametrize("verb", VERBS)
async def test_a_refusal_is_raised_with_its_code(adapter: Adapter, verb: str) -> None:
    await adapter.replies(verb, REFUSAL)
    with pytest.raises(AdapterRefused, match="no such case") as refused:
        await adapter.ask(verb)
    assert refused.value.code == "facts.unknown-resource"
    assert not refused.value.retryable


@pytest.mark.parametrize("reply", [b"not json", b'"an answer"', b'{"error": 7}', b"[]"],
                         ids=["not-json", "a-string", "a-refusal-without-a-code", "a-list"])
@pytest.mark.parametrize("verb", VERBS)
async def test_a_reply_that_is_no_answer_is_refused_as_malformed(adapter: Adapter, verb: str,
                                                                reply: bytes) -> None:
    await adapter.replies(verb, reply)
    with pytest.raises(AdapterRefused) as refused:
        await adapter.ask(verb)
    assert refused.value.code == "adapter.malformed-answer"


@pytest.mark.parametrize("verb", VERBS)
async def test_no_adapter_listening_is_unavailable(adapter: Adapter, verb: str) -> None:
    with pytest.raises(AdapterUnavailable) as unavailable:
        await adapter.ask(verb)
    assert unavailable.value.code == "capability.unavailable"
    assert unavailable.value.retryable
    assert unavailable.value.capability == adapter.capability


async def test_an_adapter_that_never_replies_is_unavailable(adapter: Adapter) -> None:
    await adapter.replies("facts", None)
    with pytest.raises(AdapterUnavailable) as unavailable:
        await adapter.ask("facts")
    assert unavailable.value.code == "capability.unavailable"

