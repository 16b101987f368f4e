"""Text that came from outside, made safe to store."""

from __future__ import annotations


def safe_text(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters and made storable as UTF-8.

    A lone surrogate (which msgspec refuses to encode) becomes its ``\\udXXX`` escape.
    """
    return value[:limit].encode("utf-8", "backslashreplace").decode("utf-8")
