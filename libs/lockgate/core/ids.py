"""Identities: deterministic where a redelivery must reproduce them, random elsewhere."""

from __future__ import annotations

import hashlib
import re
import uuid

# Tokens that become NATS subject tokens: no dots, no wildcards, no spaces.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Capability names: lower-case dotted words. Each word becomes a subject token and the
#: whole name a KV key (``LG_CAPABILITIES``), so the grammar is the narrower of the two.
_CAPABILITY = re.compile(r"[a-z][a-z0-9_-]*(?:\.[a-z][a-z0-9_-]*)*")
#: A capability name has at most this many dotted parts (the broker's permissions grant
#: adapter verbs with one wildcard per part) and this many characters.
CAPABILITY_MAX_PARTS = 4
CAPABILITY_MAX_CHARS = 128


def is_subject_token(value: str) -> bool:
    """Return True when ``value`` can stand as one token of a NATS subject."""
    return bool(_TOKEN.fullmatch(value))


def is_capability_name(value: str) -> bool:
    """Return True when ``value`` is a capability name (``case.add_note``).

    Checked before a name is used as a subject or a key: a space, a dot at either end,
    a wildcard or a name longer than the server's control line would otherwise reach
    the broker (which closes the connection of a client that sends such a line).
    """
    return (
        len(value) <= CAPABILITY_MAX_CHARS
        and value.count(".") < CAPABILITY_MAX_PARTS
        and bool(_CAPABILITY.fullmatch(value))
    )


def derived_id(*parts: str) -> str:
    """Return a stable 32-hex-digit id derived from ``parts``.

    A redelivered message must produce the same event ids, so ids of decisions are
    derived from the triggering event instead of drawn at random.
    """
    # surrogatepass: a part taken from a hostile message may hold a lone surrogate; the
    # id must still be stable (valid text encodes exactly as with plain UTF-8).
    h = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return h[:32]


def random_id() -> str:
    """Return a fresh 32-hex-digit id."""
    return uuid.uuid4().hex


def intent_id_for(tenant: str, run_id: str, call_id: str) -> str:
    """Return the intent id of the candidate ``call_id`` in ``run_id``.

    One call id in one run is one intent, however often it is proposed.
    """
    return derived_id("intent", tenant, run_id, call_id)


def candidate_digest(body: bytes) -> str:
    """Return the digest of a candidate message's bytes exactly as published.

    "The same call" means the same bytes under the same call id: a runtime that sends
    other bytes under a call id already used is refused, never answered with the
    earlier call's response.
    """
    return "sha256:" + hashlib.sha256(body).hexdigest()


def reused_call_id_intent(tenant: str, run_id: str, call_id: str, digest: str) -> str:
    """Return the intent id that records a call id reused with other bytes (``digest``).

    The call id's own intent belongs to the first candidate; the refusal of a later one
    with different bytes is recorded here, and the runtime that sent those bytes waits
    for its answer here (it can compute this id from what it published).
    """
    return derived_id("intent-reused", tenant, run_id, call_id, digest)
