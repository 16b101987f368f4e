"""How services talk to adapters: request/reply on ``lg.adapter.<capability>.<verb>``."""

from __future__ import annotations

from typing import TypeVar

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
        try:
            body = msgspec.json.decode(reply.data)
            if isinstance(body, dict) and "error" in body:
                # Every field of some answers has a default: a refusal would decode as one.
                raise AdapterRefused(capability, msgspec.convert(body, type=Refusal))
            return msgspec.convert(body, type=answer)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise AdapterRefused(capability, Refusal("adapter.malformed-answer", str(exc)[:200])) from exc

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
