"""A request is answered on the connection it came on, never across a reconnection."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from lockgate.runtime.consumer import connection_of, respond


class FakeClient:
    def __init__(self) -> None:
        self.stats: dict[str, Any] = {"reconnects": 0}


class FakeMsg:
    def __init__(self, reply: str = "_INBOX.x") -> None:
        self.reply = reply
        self.subject = "lg.claim.case.add_note"
        self.sent: list[bytes] = []

    async def respond(self, data: bytes) -> None:
        self.sent.append(data)


async def test_an_answer_goes_on_the_connection_the_request_came_on() -> None:
    nc, msg = FakeClient(), FakeMsg()
    asked_on = connection_of(nc)  # type: ignore[arg-type]
    assert await respond(nc, msg, b"yes", asked_on, logging.getLogger("t"))  # type: ignore[arg-type]
    assert msg.sent == [b"yes"]


async def test_no_answer_across_a_reconnection(caplog: pytest.LogCaptureFixture) -> None:
    """The broker forgot the grant to reply with the old connection: a reply now would be a
    publish outside the role. The asker asks again."""
    nc, msg = FakeClient(), FakeMsg()
    asked_on = connection_of(nc)  # type: ignore[arg-type]
    nc.stats["reconnects"] += 1
    with caplog.at_level(logging.INFO):
        assert not await respond(nc, msg, b"late", asked_on, logging.getLogger("t"))  # type: ignore[arg-type]
    assert msg.sent == [] and "asked before the connection was made again" in caplog.text


async def test_a_request_without_a_reply_subject_is_not_answered() -> None:
    nc, msg = FakeClient(), FakeMsg(reply="")
    assert not await respond(nc, msg, b"x", connection_of(nc), logging.getLogger("t"))  # type: ignore[arg-type]
