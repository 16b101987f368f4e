"""Canonical serialization (RFC 8785 JSON) and the digest of a normalized request."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

#: Recorded next to every digest so a future serializer change is detectable.
SERIALIZER_ID = "jcs-rfc8785+sha256/1"


def canonical_json(value: Any) -> bytes:
    """Return the RFC 8785 canonical JSON bytes of ``value``.

    Raises:
        rfc8785.CanonicalizationError: when ``value`` holds something JSON cannot
            represent exactly (a float out of range, a non-string key).
    """
    return rfc8785.dumps(value)


def digest(value: Any) -> str:
    """Return ``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def digest_bytes(data: bytes) -> str:
    """Return ``sha256:<hex>`` of raw bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
