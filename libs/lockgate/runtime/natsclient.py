"""Changes to nats-py's per-message path: writes coalesced, headers parsed, requests timed.

What a loop turn publishes goes to the socket in one write.

nats-py appends each publish to a pending buffer and kicks its flusher task, which
writes the buffer to the socket. At a pipeline's pace (every handler publishing an
ack, an append, a request, each after its own await) nearly every message is kicked
alone and is one write system call of its own; on loopback TCP those calls were about
a third of every service's CPU. With ``coalesce_writes`` a publish does not kick the
flusher itself: the first of a loop turn schedules one kick for the next turn, so every
handler ready in this one adds its messages to the same buffer and the flusher writes
them together. A message waits one loop turn more (microseconds); nothing is reordered
(the buffer is one list, appended in order). The kick puts in the flusher's queue the
future nats-py would have (unless one is waiting there already); a forced flush (the
buffer over its limit), and a client not connected or without its flusher, take
nats-py's own ``Client._flush_pending`` (2.x); with a client that has no such coroutine
nothing is changed. (Before, a publish yielded to the loop once and then kicked: a task
switch, a future and a queue put per publish, 2 us of a publish's 9.5.)

Every JetStream delivery and reply carries a header block (a candidate's path reads
about 45 across the processes). nats-py 2.16's ``Client._parse_header_lines`` tests each
name for whitespace character by character (``any(c.isspace() for c in key)``), a
generator per header: 6 us for a direct get's reply, of which the generators are more
than half. ``parse_headers_faster`` swaps in the same parser with that test behind one
that decides the common case in C: a name with no space in it whose characters are all
printable has no whitespace (every ``str.isspace`` character but the space is
unprintable), so only other names reach the original test; and a name already read
is looked up instead of read again. The result is the same dictionary for every block
(``tests/unit/test_natsclient_headers.py`` compares the two); before replacing, the
original is checked against the replacement on blocks that probe each rule, and left
alone when they differ (a nats-py that changed its rules).

A request (about twenty per candidate across the processes) waited for its reply with
``asyncio.wait_for``, which wraps and watches the future: 4 us of the 20 a request
costs its sender. ``timed_requests`` makes ``Client._request_new_style`` (2.x) wait on
the future itself with a timer that fails it with nats-py's ``TimeoutError``; the
token, the reply subject, the response map and the errors are nats-py's own, and the
request leaves the map however it ends (nats-py's left it there when its publish
failed).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from secrets import token_hex
from typing import Any

from nats import errors
from nats.aio.client import Client
from nats.aio.msg import Msg

_original: Callable[..., Awaitable[Any]] | None = None
_original_headers: Callable[[bytes], dict[str, str]] | None = None
_original_request: Callable[..., Awaitable[Msg]] | None = None


def coalesce_writes(enable: bool = True) -> bool:
    """Make publishes of one loop turn share a write (or, ``enable=False``, stop).

    Returns whether the client now coalesces. Safe to call more than once.
    """
    global _original
    current = getattr(Client, "_flush_pending", None)
    if not enable:
        if _original is not None:
            Client._flush_pending = _original  # type: ignore[method-assign,assignment]
            _original = None
        return False
    if _original is not None:
        return True
    if current is None or not inspect.iscoroutinefunction(current) \
            or "force_flush" not in inspect.signature(current).parameters:
        return False
    original = current

    async def flush_next_turn(self: Client, force_flush: bool = False) -> Any:
        if force_flush or not _flushing(self):
            return await original(self, force_flush)
        if self not in _kicks:
            _kicks.add(self)
            asyncio.get_running_loop().call_soon(_kick, self)
        return None

    _original = original
    Client._flush_pending = flush_next_turn  # type: ignore[method-assign]
    return True


#: Clients whose flusher is kicked at the next loop turn (each at most once a turn).
_kicks: set[Client] = set()


def _flushing(nc: Client) -> bool:
    """Connected, with its flusher task running: the state in which nats-py only queues
    a future for the flusher (any other, and a forced flush, take nats-py's own way)."""
    task = nc._flusher_task
    return nc.is_connected and task is not None and not task.done() and nc._flush_queue is not None


def _kick(nc: Client) -> None:
    """Hand the flusher the future nats-py's ``_flush_pending`` would have: it writes
    everything pending. One already waiting in its queue will write this turn's too."""
    _kicks.discard(nc)
    queue = nc._flush_queue
    if queue is not None and queue.empty() and _flushing(nc):
        queue.put_nowait(asyncio.get_running_loop().create_future())


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """Parse a NATS header block (``Name: Value\\r\\n`` per line) as nats-py 2.16 does.

    Names are stripped and must be ASCII without whitespace (others are skipped);
    values are stripped and decoded as UTF-8 with ``errors="replace"``; a later line
    with the same name wins; a line without a colon is skipped.
    """
    out: dict[str, str] = {}
    names = _NAMES
    for line in raw.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key = names.get(name)
        if key is None:
            try:
                key = name.strip().decode("ascii")
            except UnicodeDecodeError:
                continue
            # A printable name without a space has no whitespace: only the others are
            # looked at character by character (\x1c-\x1f are whitespace to str.isspace).
            if (" " in key or not key.isprintable()) and any(c.isspace() for c in key):
                continue
            if len(names) < _NAMES_KEPT:
                names[name] = key
        out[key] = value.strip().decode("utf-8", "replace")
    return out


#: Names as they came (unstripped bytes) and the key each one is, for names that are
#: keys: a block's names are nearly always the same few, and a name is read once.
#: Bounded: names beyond the first few hundred are read every time.
_NAMES: dict[bytes, str] = {}
_NAMES_KEPT = 256


#: Header blocks on which the client's parser must agree with ``parse_header_lines``
#: before it is replaced: each rule of the parser, and a reply as the server sends it.
_PROBES = (
    b"Nats-Stream: LG_EVENTS\r\nNats-Sequence: 12\r\nNats-Msg-Id: a1\r\n\r\n",
    b"A:1\r\nA: 2\r\nB:\t x \r\n :empty\r\nno colon\r\n\r\n",
    b"Bad Name: 1\r\nTab\tName: 2\r\nFs\x1cName: 3\r\n\x1fEdge: 4\r\nNul\x00Name: 5\r\n",
    b"N\xc3\xa9: 1\r\nV: caf\xc3\xa9\r\nW: \xff\xfe\r\nLone\nLf: 6\r\nX: a:b: c\r\n",
)


def parse_headers_faster(enable: bool = True) -> bool:
    """Make the client parse header blocks with ``parse_header_lines`` (or, ``enable=False``, stop).

    Returns whether the client now does. Safe to call more than once. Nothing changes
    when the client has no ``_parse_header_lines`` or parses a probe block differently.
    """
    global _original_headers
    if not enable:
        if _original_headers is not None:
            Client._parse_header_lines = staticmethod(_original_headers)  # type: ignore[method-assign,assignment]
            _original_headers = None
        return False
    if _original_headers is not None:
        return True
    current = getattr(Client, "_parse_header_lines", None)
    if current is None or not callable(current):
        return False
    try:
        if any(current(probe) != parse_header_lines(probe) for probe in _PROBES):
            return False
    except Exception:  # noqa: BLE001 - a parser with other rules is left as it is
        return False
    _original_headers = current
    Client._parse_header_lines = staticmethod(parse_header_lines)  # type: ignore[method-assign]
    return True


def _time_out(future: asyncio.Future[Msg]) -> None:
    if not future.done():
        future.set_exception(errors.TimeoutError())


async def _request_on_timer(
    self: Client, subject: str, payload: bytes, timeout: float | None = 1,
    headers: dict[str, Any] | None = None,
) -> Msg:
    """nats-py 2.16's ``Client._request_new_style`` with a timer instead of ``wait_for``."""
    if self.is_draining_pubs:
        raise errors.ConnectionDrainingError
    if not self._resp_sub_prefix:
        await self._init_request_sub()
    prefix = self._resp_sub_prefix
    if prefix is None:  # _init_request_sub sets it
        raise errors.Error("nats: no inbox for replies")
    token = self._nuid.next()
    token.extend(token_hex(2).encode())
    inbox = prefix[:]
    inbox.extend(token)
    key = token.decode()
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Msg] = loop.create_future()
    waiting = self._resp_map
    waiting[key] = future
    try:
        await self.publish(subject, payload, reply=inbox.decode(), headers=headers)
        if timeout is None:
            return await future
        timer = loop.call_later(timeout, _time_out, future)
        try:
            return await future
        finally:
            timer.cancel()
    finally:
        waiting.pop(key, None)


def timed_requests(enable: bool = True) -> bool:
    """Make requests wait for their replies on a timer (or, ``enable=False``, stop).

    Returns whether they now do. Safe to call more than once. Nothing changes when the
    client has no ``_request_new_style`` coroutine taking ``(subject, payload, timeout,
    headers)``.
    """
    global _original_request
    if not enable:
        if _original_request is not None:
            Client._request_new_style = _original_request  # type: ignore[method-assign,assignment]
            _original_request = None
        return False
    if _original_request is not None:
        return True
    current = getattr(Client, "_request_new_style", None)
    if current is None or not inspect.iscoroutinefunction(current) \
            or list(inspect.signature(current).parameters) != [
                "self", "subject", "payload", "timeout", "headers"]:
        return False
    _original_request = current
    Client._request_new_style = _request_on_timer  # type: ignore[method-assign]
    return True
