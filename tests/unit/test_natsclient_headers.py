"""The faster header parser reads every header block exactly as nats-py's own does."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from lockgate.runtime import natsclient
from lockgate.runtime.natsclient import parse_header_lines, parse_headers_faster

Parser = Callable[[bytes], dict[str, str]]


def nats_py_parser() -> Parser:
    """nats-py's own parser, whether or not this process replaced it."""
    original = natsclient._original_headers or Client._parse_header_lines
    assert original is not parse_header_lines
    return original


@pytest.fixture
def restored() -> Iterator[None]:
    was = parse_headers_faster(False)
    yield
    parse_headers_faster(was)


#: Bytes that each rule of the parser turns on: separators, every ASCII whitespace
#: (``\x1c``-``\x1f`` are whitespace to ``str.isspace`` but not to ``bytes.strip``),
#: other control bytes, non-ASCII and broken UTF-8.
EDGES = [b":", b" ", b"\t", b"\r", b"\n", b"\r\n", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e",
         b"\x1f", b"\x00", b"\x7f", b"\x85", b"\xa0", b"\xc3\xa9", b"\xe2\x80\x83", b"\xff", b"\xc3"]
PIECE = st.one_of(
    st.sampled_from(EDGES),
    st.sampled_from([b"Nats-Msg-Id", b"Nats-Sequence", b"Status", b"a", b"X-1", b"12345"]),
    st.binary(max_size=4),
    st.text(max_size=4).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
LINE = st.lists(PIECE, max_size=8).map(b"".join)
BLOCK = st.lists(LINE, max_size=8).map(b"\r\n".join)


@settings(max_examples=3000, derandomize=True, deadline=None)
@given(st.one_of(BLOCK, BLOCK.map(lambda b: b + b"\r\n\r\n"), st.binary(max_size=64)))
def test_every_block_parses_to_the_same_dictionary_in_the_same_order(raw: bytes) -> None:
    assert list(parse_header_lines(raw).items()) == list(nats_py_parser()(raw).items())


@pytest.mark.parametrize("kept", [0, 256])
def test_names_read_before_and_names_never_kept_read_alike(
    kept: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(natsclient, "_NAMES", {})
    monkeypatch.setattr(natsclient, "_NAMES_KEPT", kept)
    raw = b"A: 1\r\n a :2\r\nB\x1c: 3\r\nC: caf\xc3\xa9\r\nA: 4\r\n\r\n"
    first, again = parse_header_lines(raw), parse_header_lines(raw)
    assert list(first.items()) == list(again.items()) == list(nats_py_parser()(raw).items())
    assert len(natsclient._NAMES) == min(kept, 3)


def test_a_direct_get_reply_parses_to_its_headers() -> None:
    raw = (b"Nats-Stream: LG_EVENTS\r\nNats-Subject: lg.evt.t.i.3.PolicyDecided._\r\n"
           b"Nats-Sequence: 12\r\nNats-Msg-Id: 9a8b\r\nNats-Num-Pending: 2\r\n\r\n")
    assert parse_header_lines(raw) == {
        "Nats-Stream": "LG_EVENTS", "Nats-Subject": "lg.evt.t.i.3.PolicyDecided._",
        "Nats-Sequence": "12", "Nats-Msg-Id": "9a8b", "Nats-Num-Pending": "2",
    }


@pytest.mark.parametrize("name", [b"Bad Name", b"Tab\tName", b"Fs\x1cName", b"\x1fEdge", b"N\xc3\xa9"])
def test_a_name_with_whitespace_or_not_ascii_is_skipped(name: bytes) -> None:
    assert parse_header_lines(name + b": 1\r\nOk: 2\r\n") == {"Ok": "2"}


def test_the_client_parses_with_it_once_installed_and_with_its_own_once_removed(restored: None) -> None:
    own = Client._parse_header_lines
    assert parse_headers_faster()
    assert parse_headers_faster()
    assert Client._parse_header_lines is parse_header_lines
    assert not parse_headers_faster(False)
    assert Client._parse_header_lines is own


def test_a_client_whose_parser_reads_a_probe_otherwise_keeps_it(
    restored: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def strict(raw: bytes) -> dict[str, str]:
        return {k: v for k, v in nats_py_parser()(raw).items() if k.isalnum()}

    monkeypatch.setattr(Client, "_parse_header_lines", staticmethod(strict))
    assert not parse_headers_faster()
    assert Client._parse_header_lines is strict
