"""The adapters port: what a handler asks a capability's adapter (request/reply).

``AdapterClient`` (``lockgate.adapters.client``) asks over NATS; ``FakeAdapters`` answers
from what a test scripted, and records every question.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

from lockgate.adapters.client import AdapterClient, AdapterRefused, AdapterUnavailable
from lockgate.contracts.messages import (
    Describe,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
)

__all__ = ["AdapterClient", "AdapterRefused", "AdapterUnavailable", "Adapters", "FakeAdapters"]

A = TypeVar("A")
Q = TypeVar("Q")


class Adapters(Protocol):
    """A capability's adapter, asked and answered.

    Nobody answering in time raises ``AdapterUnavailable`` (retryable); an adapter's refusal
    or an answer that does not decode raises ``AdapterRefused``.
    """

    async def describe(self, capability: str) -> Describe:
        """The contract the adapter serves."""
        ...

    async def normalize(self, capability: str, request: NormalizeRequest) -> NormalizeResult:
        """Canonical arguments and resource, or the reason there are none."""
        ...

    async def facts(self, capability: str, request: FactsRequest) -> Facts:
        """Fresh facts about a resource."""
        ...

    async def query(self, capability: str, request: QueryRequest) -> QueryResult:
        """Whether the effect with this identity happened."""
        ...


@dataclass
class FakeAdapters:
    """The fake ``Adapters``: answers scripted per verb (for every capability), questions kept.

    A verb with no answer scripted is ``AdapterUnavailable``, as if no adapter ran. An answer
    may be a value, an exception to raise, or an async function of the request.
    """

    normalizes: NormalizeResult | BaseException | Callable[[NormalizeRequest], Awaitable[NormalizeResult]] \
        | None = None
    facts_answer: Facts | BaseException | Callable[[FactsRequest], Awaitable[Facts]] | None = None
    queries: QueryResult | BaseException | Callable[[QueryRequest], Awaitable[QueryResult]] | None = None
    describes: Describe | BaseException | None = None
    #: Every question: (verb, capability, request).
    asked: list[tuple[str, str, object]] = field(default_factory=list)

    async def describe(self, capability: str) -> Describe:
        """The scripted ``describe`` answer."""
        return await self._answer("describe", capability, None, self.describes, Describe)

    async def normalize(self, capability: str, request: NormalizeRequest) -> NormalizeResult:
        """The scripted ``normalize`` answer."""
        return await self._answer("normalize", capability, request, self.normalizes, NormalizeResult)

    async def facts(self, capability: str, request: FactsRequest) -> Facts:
        """The scripted ``facts`` answer."""
        return await self._answer("facts", capability, request, self.facts_answer, Facts)

    async def query(self, capability: str, request: QueryRequest) -> QueryResult:
        """The scripted ``query`` answer."""
        return await self._answer("query", capability, request, self.queries, QueryResult)

    async def _answer(
        self, verb: str, capability: str, request: Q,
        answer: A | BaseException | Callable[[Q], Awaitable[A]] | None, kind: type[A],
    ) -> A:
        """Keep the question, then answer it as scripted: a value, a raise, or a call."""
        self.asked.append((verb, capability, request))
        if answer is None:
            raise AdapterUnavailable(capability, verb)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, kind):
            return answer
        # Not an ``A``, so the scripted function (mypy does not narrow a union by ``type[A]``).
        return await cast(Callable[[Q], Awaitable[A]], answer)(request)

    def asked_for(self, verb: str) -> list[object]:
        """The requests of one verb, in order."""
        return [request for v, _, request in self.asked if v == verb]
