"""Who is asking: a token opened, its person's own NATS connection verified and kept.

A token names a NATS user and carries its password sealed (``lockgate.client.tokens``).
The console accepts it only when (1) it opens under the console's key and has not
expired, (2) its user is a reviewer or an operator of the role table, and (3) the broker
lets that user connect with that password. The connection is then kept for the person
(closed after ``idle_s`` unused, or when the token expires) and every action the console
takes for them goes over it: the broker checks it against that person's permissions and
the services record it under that person's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from lockgate.client.sdk import ClientError, Gateway, connect
from lockgate.client.tokens import Claims, TokenError, unseal
from lockgate.operations.roles import Role, operator_role, reviewer_role
from lockgate.runtime.credentials import Credentials

log = logging.getLogger("lockgate.console")

Kind = Literal["reviewer", "operator"]
#: At most this many people keep a connection at once; the least recently used goes first.
MAX_PEOPLE = 256


class NotAccepted(Exception):
    """A request the console does not act on for anyone (``status``: 401 or 503)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


@dataclass
class Person:
    """A reviewer or operator with a verified connection of their own."""

    user: str
    name: str
    kind: Kind
    #: The tenants they act in (empty: every tenant), from the role table.
    tenants: tuple[str, ...]
    expires_at: int
    gateway: Gateway
    last_used: float = field(default=0.0)


def people_of(reviewers: Mapping[str, tuple[str, ...]],
              operators: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[Kind, Role]]:
    """The users the console may act as: every reviewer's and operator's, by NATS user."""
    found: dict[str, tuple[Kind, Role]] = {}
    for person, scope in reviewers.items():
        role = reviewer_role(person, scope)
        found[role.name] = ("reviewer", role)
    for person, scope in operators.items():
        role = operator_role(person, scope)
        found[role.name] = ("operator", role)
    return found


class People:
    """Tokens to people, each with one verified connection, kept while used."""

    def __init__(self, url: str, key: bytes, known: Mapping[str, tuple[Kind, Role]], *,
                 idle_s: float, clock: Callable[[], float] = time.time,
                 connect_timeout_s: float = 2.0) -> None:
        self.url = url
        self._key = key
        self._known = dict(known)
        self.idle_s = idle_s
        self._clock = clock
        self._connect_timeout_s = connect_timeout_s
        self._people: dict[str, Person] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._people)

    async def verify(self, token: str) -> Person:
        """The person ``token`` is, with a live connection of their own.

        Raises:
            NotAccepted: 401 for a token that is forged, expired, not a reviewer's or an
                operator's, or whose password the broker refuses; 503 when the broker
                cannot be reached.
        """
        now = self._clock()
        try:
            claims = unseal(self._key, token, now=now)
        except TokenError as exc:
            raise NotAccepted(401, exc.code, str(exc)) from None
        slot = hashlib.sha256(token.encode()).hexdigest()
        lock = self._locks.setdefault(slot, asyncio.Lock())
        async with lock:
            person = self._people.get(slot)
            if person is not None and not person.gateway.nc.is_closed:
                person.last_used = now
                return person
            if person is not None:
                self._people.pop(slot, None)
            person = await self._connect(claims)
            person.last_used = now
            self._people[slot] = person
        self._locks.pop(slot, None)
        await self._evict_beyond(MAX_PEOPLE)
        return person

    async def _connect(self, claims: Claims) -> Person:
        found = self._known.get(claims.user)
        if found is None:
            raise NotAccepted(401, "auth.not-a-person",
                              "the console acts only for reviewers and operators")
        kind, role = found
        credentials = Credentials(
            user=role.name, password=claims.password, account=role.account,
            inbox_prefix=role.inbox_prefix, js_prefix=role.js_prefix, principal=role.principal)
        refused: list[Exception] = []

        async def on_error(exc: Exception) -> None:
            # The broker says "Authorization Violation" to each try; the connect then
            # fails with "no servers", so the reason is taken from here.
            if "authorization" in str(exc).lower():
                refused.append(exc)

        try:
            # Few reconnects: a connection the broker dropped for good is closed, and the
            # person's next request connects afresh (a first connection with unlimited
            # reconnects would retry a refused password forever).
            gateway = await connect(
                self.url, credentials=credentials, connect_timeout=self._connect_timeout_s,
                max_reconnect_attempts=2, reconnect_time_wait=0.5, name=f"console.{role.name}",
                error_cb=on_error,
            )
        except ClientError as exc:
            if refused or "authorization" in str(exc.__cause__ or exc).lower():
                raise NotAccepted(401, "auth.refused",
                                  "the broker refused this token's credentials") from None
            raise NotAccepted(503, "lockgate.unavailable", "the broker cannot be reached") from None
        log.info("verified %s (%s) by connecting as that user", role.principal, kind)
        return Person(user=role.name, name=role.principal, kind=kind, tenants=role.tenants,
                      expires_at=claims.expires_at, gateway=gateway)

    async def sweep(self) -> None:
        """Close the connections of people idle for ``idle_s`` and of expired tokens."""
        now = self._clock()
        gone = [slot for slot, p in self._people.items()
                if now - p.last_used >= self.idle_s or now >= p.expires_at]
        for slot in gone:
            await self._close(slot)

    async def _evict_beyond(self, limit: int) -> None:
        while len(self._people) > limit:
            oldest = min(self._people, key=lambda s: self._people[s].last_used)
            await self._close(oldest)

    async def _close(self, slot: str) -> None:
        person = self._people.pop(slot, None)
        if person is not None:
            with contextlib.suppress(Exception):
                await person.gateway.close()

    async def close(self) -> None:
        """Close every connection."""
        for slot in list(self._people):
            await self._close(slot)

    async def keep_tidy(self, stop: asyncio.Event, every_s: float = 5.0) -> None:
        """Sweep until ``stop`` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            await self.sweep()
