"""Canonical serialization (RFC 8785 JSON) and the digest of a normalized request."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import rfc8785

#: Recorded next to every digest so a future serializer change is detectable.
SERIALIZER_ID = "jcs-rfc8785+sha256/1"
#: The integers RFC 8785 writes exactly (IEEE 754 doubles' safe range).
_INT_MAX = 2**53 - 1
#: Above this, UTF-16 code units (RFC 8785's key order) and code points (Python's) may
#: sort differently: a key holding such a character is sorted by the library.
_LAST_BMP_BEFORE_SURROGATES = "\ud7ff"


def _plain(value: Any) -> bool:
    """True when msgspec's sorted encoding of ``value`` is byte for byte its RFC 8785 form.

    It is for strings (msgspec escapes exactly what RFC 8785 escapes, checked for every
    code point), safe integers, booleans, null, lists, tuples, and objects whose keys
    are strings that sort alike in both orders. Floats (RFC 8785 writes them as
    ECMAScript does), integers out of the safe range and anything else are left to the
    library, which serializes or refuses them.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_INT_MAX <= value <= _INT_MAX)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and max(key) > _LAST_BMP_BEFORE_SURROGATES):
                return False
            if not _plain(item):
                return False
        return True
    if kind is list or kind is tuple:
        for item in value:  # noqa: SIM110 - a loop, not a generator per array: this is the hot path
            if not _plain(item):
                return False
        return True
    return False


def canonical_json(value: Any) -> bytes:
    """Return the RFC 8785 canonical JSON bytes of ``value``.

    Most values (no floats) are encoded by msgspec with sorted keys, which gives the same
    bytes several times faster than the pure-Python library; the rest by the library.

    Raises:
        rfc8785.CanonicalizationError: when ``value`` holds something JSON cannot
            represent exactly (a float out of range, a non-string key).
    """
    try:
        plain = _plain(value)
    except RecursionError:
        plain = False
    if plain:
        return msgspec.json.encode(value, order="sorted")
    return rfc8785.dumps(value)


def digest(value: Any) -> str:
    """Return ``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def digest_bytes(data: bytes) -> str:
    """Return ``sha256:<hex>`` of raw bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
