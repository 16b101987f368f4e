"""Canonical JSON: every value gives the RFC 8785 library's bytes (or its refusal), fast path or not."""

from __future__ import annotations

import enum
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.core.canonical import _plain, canonical_json, digest

# Keys and strings from all of Unicode but lone surrogates (which neither side encodes),
# weighted towards what sorts differently in UTF-16 and in code points.
texts = st.text(st.characters(exclude_categories=("Cs",))) | st.text(
    st.sampled_from(["a", "Z", "\u00e9", "\ue000", "\uffff", "\U0001f600", "\U00010000", "\x00", "\x7f",
                     "\n", '"', "\\", "\u2028"]))
scalars = (st.none() | st.booleans() | texts
           | st.integers(min_value=-(2**53) - 2, max_value=2**53 + 2)
           | st.integers()
           | st.floats(allow_nan=True, allow_infinity=True))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
                      | st.dictionaries(texts, inner, max_size=5), max_leaves=30)


def library(value: Any) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(value)
    except Exception as exc:  # noqa: BLE001 - the refusal's kind is what is compared
        return type(exc)


def ours(value: Any) -> bytes | type[Exception]:
    try:
        return canonical_json(value)
    except Exception as exc:  # noqa: BLE001
        return type(exc)


@settings(max_examples=1500, deadline=None)
@given(values)
def test_every_value_is_encoded_as_the_library_encodes_it(value: Any) -> None:
    assert ours(value) == library(value)


@pytest.mark.parametrize("value", [
    {"b": 1, "a": [True, None, {"z": "\u00e9", "y": -3}]},
    {"\ue000": 1, "\U0001f600": 2},  # U+E000 after the emoji in UTF-16 order, before it by code point
    {"x": 1.0}, {"x": 1e21}, {"x": -0.0}, {"x": 2**53}, {1: "not a string key"},
    [math.inf], {"nested": [[[[{"k": "v"}]]]]},
])
def test_known_cases(value: Any) -> None:
    assert ours(value) == library(value)


def test_the_fast_path_takes_what_it_can_and_only_that() -> None:
    assert _plain({"tenant": "t", "arguments": {"note": "\u00e9\U0001f600"}, "n": [1, True, None]})
    assert not _plain({"x": 1.5})  # floats: written as ECMAScript writes them, by the library
    assert not _plain({"\U0001f600": 1})  # a key that sorts differently in UTF-16
    assert not _plain(2**53)

    class Kind(enum.StrEnum):
        A = "a"

    assert not _plain({"k": Kind.A})  # only exact types; the library decides the rest
    assert canonical_json({"k": Kind.A}) == b'{"k":"a"}'


def test_a_digest_names_its_bytes() -> None:
    assert digest({"b": 1, "a": 2}) == digest({"a": 2, "b": 1})
    assert digest({"a": 1}).startswith("sha256:") and len(digest({"a": 1})) == 7 + 64
