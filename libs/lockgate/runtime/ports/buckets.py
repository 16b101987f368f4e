"""Reading a key-value bucket where no replica lags, and changing a key by compare-and-set.

``KeyValue.get`` is a direct get, and on a replicated bucket any current replica
answers one: a replica that has not applied the latest write answers with the value
before it, or with no key at all (the server guarantees no read-your-writes for direct
gets, and nats-server 2.15 has no ``min_last_seq`` to ask for one). Where acting on
such an answer would be wrong rather than late (a run just opened reported unknown, a
lock left held, a budget hold never released), the read is confirmed with a message
get (``STREAM.MSG.GET``), which only the bucket stream's leader answers. A role that
reads a bucket may make both (``lockgate.operations.roles.kv_read``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

#: The ``KV-Operation`` header values that mark a key deleted or purged.
_GONE = frozenset({"DEL", "PURGE"})


class LeaderEntry(NamedTuple):
    """A key as the bucket's leader holds it: its revision and value (empty when deleted)."""

    revision: int
    value: bytes


async def leader_entry(js: JetStreamContext, bucket: str, key: str) -> LeaderEntry | None:
    """The key's last revision as the stream's leader holds it, or ``None`` for no key.

    Raises:
        nats.errors.Error: no answer (an election in progress, say): ask again later.
    """
    try:
        msg = await js.get_msg(f"KV_{bucket}", subject=f"$KV.{bucket}.{key}")
    except NotFoundError:
        return None
    operation = (msg.headers or {}).get("KV-Operation", "")
    return LeaderEntry(int(msg.seq or 0), b"" if operation in _GONE else msg.data or b"")


async def confirmed_get(js: JetStreamContext, kv: KeyValue, bucket: str, key: str) -> bytes | None:
    """The key's value, or ``None`` only when the bucket's leader has none either.

    A direct get first (the common case: the key is there); only a miss costs a message
    get, so a key written a moment ago is never reported absent by a lagging replica.
    A deleted key is ``None``.

    Raises:
        nats.js.errors.InvalidKeyError: ``key`` is not a key.
        nats.errors.Error: the leader did not answer.
    """
    try:
        return (await kv.get(key)).value or b""
    except KeyNotFoundError:
        found = await leader_entry(js, bucket, key)
    return found.value if found is not None and found.value else None


async def compare_and_set(kv: KeyValue, key: str, change: Callable[[bytes | None], bytes | None],
                          tries: int) -> bool:
    """Write ``change`` of the key's value (``None``: absent) unless another write came in
    between, reading again after each lost race; ``None`` from ``change``: nothing to write.

    Returns ``False`` when every one of ``tries`` was lost (the caller says whether giving up
    is an error), else ``True``.
    """
    for _ in range(tries):
        try:
            entry = await kv.get(key)
            data, revision = entry.value, entry.revision
        except KeyNotFoundError:
            data, revision = None, None
        value = change(data)
        if value is None:
            return True
        try:
            if revision is None:
                await kv.create(key, value)
            else:
                await kv.update(key, value, last=revision)
            return True
        except KeyWrongLastSequenceError:
            continue
    return False
