"""What the in-memory fakes check of a key: what a JetStream key-value bucket accepts."""

from __future__ import annotations

import re

#: nats-server's key grammar for a key-value bucket (``nats.js.kv``'s ``VALID_KEY_RE``).
_VALID_KEY = re.compile(r"^[-/_=\.a-zA-Z0-9]+$")


class InvalidKey(ValueError):
    """The ids make no key of a bucket (a stand-in's, say): nothing is stored under them."""


def checked(key: str) -> str:
    """``key``, when a bucket accepts it.

    Raises:
        InvalidKey: a bucket refuses it.
    """
    if not _VALID_KEY.match(key) or key.startswith(".") or key.endswith("."):
        raise InvalidKey(key)
    return key
