"""The adapters port: what a handler asks a capability's adapter (request/reply).

``AdapterClient`` asks over NATS, request/reply on ``lg.adapter.<capability>.<verb>``;
``FakeAdapters`` answers from what a test scripted, and records every question.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    Describe,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
    Refusal,
)
from lockgate.core.errors import LockgateError, TransientError

__all__ = ["AdapterClient", "AdapterRefused", "AdapterUnavailable", "Adapters", "FakeAdapters"]

A = TypeVar("A")
Q = TypeVar("Q")

T = TypeVar("T")



class AdapterUnavailable(TransientError):
    """No adapter answered in time; the question may be asked again."""

    def __init__(self, capability: str, verb: str) -> None:
        super().__init__(
            f"no adapter for {capability} answered {verb}", code="capability.unavailable"
        )
        self.capability = capability


class AdapterRefused(LockgateError):
    """The adapter answered with a refusal (a malformed question, a bug)."""

    def __init__(self, capability: str, refusal: Refusal) -> None:
        super().__init__(f"{capability}: {refusal.error} {refusal.detail}", code=refusal.error)


def _decoded(capability: str, data: bytes, answer: type[T]) -> T:
    """Read an adapter's reply as ``answer``.

    Raises:
        AdapterRefused: the reply is a refusal (its code), or does not decode as ``answer``
            (``adapter.malformed-answer``).
    """
    try:
        body = msgspec.json.decode(data)
        if isinstance(body, dict) and "error" in body:
            # Every field of some answers has a default: a refusal would decode as one.
            raise AdapterRefused(capability, msgspec.convert(body, type=Refusal))
        return msgspec.convert(body, type=answer)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise AdapterRefused(capability, Refusal("adapter.malformed-answer", str(exc)[:200])) from exc


class AdapterClient:
    """Asks adapters for describe, normalize, facts and query answers."""

    def __init__(self, nc: Client, *, timeout_s: float = 2.0) -> None:
        self._nc = nc
        self._timeout_s = timeout_s

    async def _ask(self, capability: str, verb: str, body: object, answer: type[T]) -> T:
        try:
            reply = await self._nc.request(
                subjects.adapter(capability, verb),
                msgspec.json.encode(body),
                timeout=self._timeout_s,
            )
        except (NatsTimeout, NoRespondersError) as exc:
            raise AdapterUnavailable(capability, verb) from exc
        return _decoded(capability, reply.data, answer)

    async def describe(self, capability: str) -> Describe:
        """Return the contract the adapter serves."""
        return await self._ask(capability, "describe", {}, Describe)

    async def normalize(self, capability: str, request: NormalizeRequest) -> NormalizeResult:
        """Return canonical arguments and resource, or the reason there are none."""
        return await self._ask(capability, "normalize", request, NormalizeResult)

    async def facts(self, capability: str, request: FactsRequest) -> Facts:
        """Return fresh facts about a resource."""
        return await self._ask(capability, "facts", request, Facts)

    async def query(self, capability: str, request: QueryRequest) -> QueryResult:
        """Ask whether the effect with this identity happened."""
        return await self._ask(capability, "query", request, QueryResult)


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
    may be a value, an exception to raise, an async function of the request, or the bytes an
    adapter would reply, read as ``AdapterClient`` reads them (a refusal or a malformed reply
    is ``AdapterRefused``).
    """

    normalizes: NormalizeResult | BaseException | bytes \
        | Callable[[NormalizeRequest], Awaitable[NormalizeResult]] | None = None
    facts_answer: Facts | BaseException | bytes | Callable[[FactsRequest], Awaitable[Facts]] | None = None
    queries: QueryResult | BaseException | bytes | Callable[[QueryRequest], Awaitable[QueryResult]] \
        | None = None
    describes: Describe | BaseException | bytes | None = None
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
        answer: A | BaseException | bytes | Callable[[Q], Awaitable[A]] | None, kind: type[A],
    ) -> A:
        """Keep the question, then answer it as scripted: a value, a raise, a reply, or a call."""
        self.asked.append((verb, capability, request))
        if answer is None:
            raise AdapterUnavailable(capability, verb)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, bytes):
            return _decoded(capability, answer, kind)
        if isinstance(answer, kind):
            return answer
        # Not an ``A``, so the scripted function (mypy does not narrow a union by ``type[A]``).
        return await cast(Callable[[Q], Awaitable[A]], answer)(request)

    def asked_for(self, verb: str) -> list[object]:
        """The requests of one verb, in order."""
        return [request for v, _, request in self.asked if v == verb]
