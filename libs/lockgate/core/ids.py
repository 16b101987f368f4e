"""Identities: deterministic where a redelivery must reproduce them, random elsewhere."""

from __future__ import annotations

import hashlib
import re
import uuid

# Tokens that become NATS subject tokens: no dots, no wildcards, no spaces.
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def is_subject_token(value: str) -> bool:
    """Return True when ``value`` can stand as one token of a NATS subject."""
    return bool(_TOKEN.fullmatch(value))


def derived_id(*parts: str) -> str:
    """Return a stable 32-hex-digit id derived from ``parts``.

    A redelivered message must produce the same event ids, so ids of decisions are
    derived from the triggering event instead of drawn at random.
    """
    h = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return h[:32]


def random_id() -> str:
    """Return a fresh 32-hex-digit id."""
    return uuid.uuid4().hex


def intent_id_for(tenant: str, run_id: str, call_id: str) -> str:
    """Return the intent id of the candidate ``call_id`` in ``run_id``.

    One call id in one run is one intent, however often it is proposed.
    """
    return derived_id("intent", tenant, run_id, call_id)
