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

    Used for messages whose envelope cannot be read (nothing in them can be trusted to
    say which call they are); a readable candidate is identified by ``call_digest``.
    """
    return "sha256:" + hashlib.sha256(body).hexdigest()


def call_digest(*, call_id: str, tool: str, arguments: str, assembly_failure: str | None) -> str:
    """Return the digest of what makes a proposal *the same call*: its id, tool and raw text.

    A framework re-issues a call after a resume, often in a later turn and with the
    provider's item rebuilt: the same call id with the same tool and argument bytes is
    the same intent in any turn of its run. The turn, the provider's item, the format,
    the model and the lineage hint are evidence recorded with the first proposal; they
    do not make a second call. Other argument bytes or another tool under a call id
    already used are refused (``proposal.call-id-reused``), never answered with the
    earlier call's response.
    """
    h = hashlib.sha256()
    for part in (call_id, tool, arguments, assembly_failure or ""):
        # Length-prefixed: no choice of parts can collide with another by moving a
        # separator. surrogatepass: hostile text may hold a lone surrogate.
        encoded = part.encode("utf-8", "surrogatepass")
        h.update(len(encoded).to_bytes(8, "big"))
        h.update(encoded)
    h.update(b"\x01" if assembly_failure is not None else b"\x00")
    return "sha256:" + h.hexdigest()


def reused_call_id_intent(tenant: str, run_id: str, call_id: str, digest: str) -> str:
    """Return the intent id that records a call id reused with other bytes (``digest``).

    The call id's own intent belongs to the first candidate; the refusal of a later one
    with different bytes is recorded here, and the runtime that sent those bytes waits
    for its answer here (it can compute this id from what it published).
    """
    return derived_id("intent-reused", tenant, run_id, call_id, digest)
