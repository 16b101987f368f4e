"""The MCP fixture servers P and Q as real processes, spoken to with the official client.

Each behaviour runs over stdio (a process per client) and streamable HTTP (one process per
module on an ephemeral loopback port); the ledger in the state directory proves what the
server did, whatever the client was told.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from lockgate.worlds.mcpservers import (
    INJECTED_DESCRIPTION,
    SUBSCRIBERS,
    HttpServerProcess,
    State,
    UnknownFault,
    arm,
    disarm,
    stdio_command,
)

TIMEOUT_S = 10.0


class Servers:
    """The module's HTTP servers and where their state lives."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.http: dict[str, HttpServerProcess] = {}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """P and Q on streamable HTTP, one process each for the module, always stopped."""
    found = Servers(tmp_path_factory.mktemp("mcp-fixtures"))
    try:
        for name in ("p", "q"):
            found.http[name] = HttpServerProcess(name, found.root / f"http-{name}").start()
        yield found
    finally:
        for process in found.http.values():
            process.stop()


@pytest.fixture(autouse=True)
def _disarmed(servers: Servers) -> Iterator[None]:
    yield
    for process in servers.http.values():
        disarm(process.state_dir)


Connect = Callable[[str], Any]


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> Connect:
    """``connect(server)`` -> ``(client context, state dir)`` over the parametrized transport."""

    def make(server: str) -> tuple[Any, Path]:
        if request.param == "http":
            process = servers.http[server]
            return _client(process.url), process.state_dir
        state_dir = tmp_path / f"stdio-{server}"
        command = stdio_command(server, state_dir)
        return _client(StdioServerParameters(command=command[0], args=list(command[1:]))), state_dir

    return make


def _client(server: StdioServerParameters | str, notices: list[str] | None = None) -> Client:
    async def on_message(message: IncomingMessage) -> None:
        if notices is not None and isinstance(message, types.ServerNotification):
            notices.append(message.method)

    return Client(server, mode="legacy", read_timeout_seconds=TIMEOUT_S, cache=None,
                  message_handler=on_message)


@asynccontextmanager
async def _http(servers: Servers, server: str, notices: list[str] | None = None
                ) -> AsyncIterator[Client]:
    async with _client(servers.http[server].url, notices) as client:
        yield client


def _draft(key: str, body: str = "the body") -> dict[str, Any]:
    return {"title": "a draft", "body": body, "client_key": key}


def _item(ref: str, **extra: Any) -> dict[str, Any]:
    return {"title": "news", "body": "the body", "client_ref": ref, **extra}


async def _eventually(check: Callable[[], Any], timeout_s: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        await anyio.sleep(0.05)


def _mine(state_dir: Path, key: str) -> list[dict[str, Any]]:
    return [row for row in State(state_dir).items() if row["key"] == key]


# -- P: idempotent private drafts --------------------------------------------------------


async def test_p_returns_the_same_draft_for_a_repeated_key(connect: Connect) -> None:
    context, state_dir = connect("p")
    async with context as client:
        first = await client.call_tool("create_item", _draft("p-same"))
        again = await client.call_tool("create_item", _draft("p-same"))
        looked_up = await client.call_tool("get_item", {"client_key": "p-same"})
    assert not first.is_error and not again.is_error
    assert first.structured_content["item_id"] == again.structured_content["item_id"]
    assert (first.structured_content["created"], again.structured_content["created"]) == (True, False)
    assert looked_up.structured_content["item_ids"] == [first.structured_content["item_id"]]
    assert len(_mine(state_dir, "p-same")) == 1
    calls = [c for c in State(state_dir).ledger() if c["arguments"]["client_key"] == "p-same"]
    assert [c["outcome"] for c in calls] == ["created", "replayed"]


async def test_p_refuses_a_changed_body_under_one_key(connect: Connect) -> None:
    context, state_dir = connect("p")
    async with context as client:
        await client.call_tool("create_item", _draft("p-changed"))
        refused = await client.call_tool("create_item", _draft("p-changed", body="another body"))
    assert refused.is_error
    assert refused.structured_content["error"] == "mcpfixture.key-conflict"
    assert "p-changed" in refused.structured_content["message"]
    (draft,) = _mine(state_dir, "p-changed")
    assert draft["body"] == "the body" and draft["status"] == "draft"
    calls = [c for c in State(state_dir).ledger() if c["arguments"]["client_key"] == "p-changed"]
    assert [c["outcome"] for c in calls] == ["created", "refused.key-conflict"]


async def test_p_annotations_are_honest(connect: Connect) -> None:
    context, _ = connect("p")
    async with context as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    hints = tools["create_item"].annotations
    assert hints is not None
    assert (hints.idempotent_hint, hints.destructive_hint, hints.open_world_hint) == (True, False, False)
    assert set(tools) == {"create_item", "get_item", "list_items"}


# -- Q: publishes and notifies ------------------------------------------------------------


async def test_q_publishes_and_notifies_each_subscriber_once_per_call(connect: Connect) -> None:
    context, state_dir = connect("q")
    async with context as client:
        one = await client.call_tool("create_item", _item("q-twice"))
        two = await client.call_tool("create_item", _item("q-twice"))
        found = await client.call_tool("find_item", {"client_ref": "q-twice"})
    ids = [one.structured_content["item_id"], two.structured_content["item_id"]]
    assert ids[0] != ids[1]
    assert one.structured_content["notified"] == len(SUBSCRIBERS)
    assert found.structured_content["found"] is True
    assert found.structured_content["item_ids"] == ids
    assert [i["status"] for i in _mine(state_dir, "q-twice")] == ["published", "published"]
    sent = [(n["item_id"], n["subscriber"]) for n in State(state_dir).notifications()
            if n["key"] == "q-twice"]
    assert sorted(sent) == sorted((i, s) for i in ids for s in SUBSCRIBERS)


async def test_q_does_not_notify_when_told_not_to(connect: Connect) -> None:
    context, state_dir = connect("q")
    async with context as client:
        quiet = await client.call_tool("create_item", _item("q-quiet", notify=False))
    assert quiet.structured_content["notified"] == 0
    assert not [n for n in State(state_dir).notifications() if n["key"] == "q-quiet"]


async def test_q_annotations_say_it_is_not_idempotent(connect: Connect) -> None:
    context, _ = connect("q")
    async with context as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    hints = tools["create_item"].annotations
    assert hints is not None and hints.idempotent_hint is False and hints.read_only_hint is False
    assert tools["create_item"].input_schema["properties"]["visibility"]["default"] == "subscribers"


async def test_an_unknown_tool_is_refused_as_invalid_params(connect: Connect) -> None:
    context, state_dir = connect("q")
    async with context as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("no_such_tool", {})
    assert refused.value.code == types.INVALID_PARAMS
    assert State(state_dir).ledger("no_such_tool")[-1]["outcome"] == "refused.unknown-tool"


# -- faults (on the module's HTTP servers; the ledger proves each) ------------------------


def test_arming_an_unknown_fault_is_refused(servers: Servers) -> None:
    with pytest.raises(UnknownFault):
        arm(servers.http["q"].state_dir, "set_on_fire")


async def test_drop_response_commits_and_never_answers(servers: Servers) -> None:
    state_dir = servers.http["p"].state_dir
    arm(state_dir, "drop_response")
    async with _http(servers, "p") as client:
        with pytest.raises(MCPError) as lost:
            await client.call_tool("create_item", _draft("p-dropped"), read_timeout_seconds=1.0)
        assert lost.value.code == types.REQUEST_TIMEOUT
        (draft,) = _mine(state_dir, "p-dropped")
        (call,) = [c for c in State(state_dir).ledger() if c["arguments"]["client_key"] == "p-dropped"]
        assert call["faults"] == ["drop_response"] and call["outcome"] == "created"
        # One-shot: the retry is answered, with the draft the lost call made.
        retry = await client.call_tool("create_item", _draft("p-dropped"))
    assert retry.structured_content["item_id"] == draft["item_id"]


#: How long an armed delay_response holds the answer back: long beside polling the state
#: every 50 ms, so seeing the commit before the answer does not depend on a busy machine.
DELAY_S = 3.0


async def test_delay_response_answers_late_after_committing(servers: Servers) -> None:
    state_dir = servers.http["q"].state_dir
    arm(state_dir, "delay_response", seconds=DELAY_S)
    answered: list[float] = []
    async with _http(servers, "q") as client:

        async def call() -> None:
            await client.call_tool("create_item", _item("q-late"))
            answered.append(time.monotonic())

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            # Committed while the answer is still held back (a liveness bound, not a timing one).
            assert await _eventually(lambda: _mine(state_dir, "q-late"), timeout_s=30)
            assert answered == []
    assert answered[0] - started >= DELAY_S


async def test_crash_after_commit_exits_after_the_effect(tmp_path: Path) -> None:
    with HttpServerProcess("q", tmp_path / "crash") as process:
        arm(process.state_dir, "crash_after_commit")
        with pytest.raises(Exception):  # noqa: B017  the transport's error, whichever it is
            async with _client(process.url) as client:
                await client.call_tool("create_item", _item("q-crash"), read_timeout_seconds=5.0)
        assert process.wait(timeout_s=5.0) == 137
        (item,) = _mine(process.state_dir, "q-crash")
        assert len([n for n in State(process.state_dir).notifications()
                    if n["item_id"] == item["item_id"]]) == len(SUBSCRIBERS)


async def test_crash_after_commit_over_stdio_closes_the_connection(tmp_path: Path) -> None:
    state_dir = tmp_path / "stdio-crash"
    command = stdio_command("p", state_dir)
    State(state_dir).open("p")
    arm(state_dir, "crash_after_commit")
    with pytest.raises(Exception):  # noqa: B017  the transport's error, whichever it is
        async with _client(StdioServerParameters(command=command[0], args=list(command[1:]))) as c:
            await c.call_tool("create_item", _draft("p-crash"), read_timeout_seconds=5.0)
    assert len(_mine(state_dir, "p-crash")) == 1


async def test_delay_visibility_hides_a_new_item_from_queries_for_a_while(servers: Servers) -> None:
    state_dir = servers.http["q"].state_dir
    arm(state_dir, "delay_visibility", seconds=1.0)
    async with _http(servers, "q") as client:
        made = await client.call_tool("create_item", _item("q-hidden"))
        at_once = await client.call_tool("find_item", {"client_ref": "q-hidden"})
        assert _mine(state_dir, "q-hidden"), "the item exists in the ledger at once"
        assert at_once.structured_content["found"] is False

        async def visible() -> bool:
            found = await client.call_tool("find_item", {"client_ref": "q-hidden"})
            return bool(found.structured_content["found"])

        deadline = time.monotonic() + 5.0
        while not await visible():
            assert time.monotonic() < deadline, "never became visible"
            await anyio.sleep(0.1)
    assert made.structured_content["item_id"] == _mine(state_dir, "q-hidden")[0]["item_id"]


async def test_change_description_is_listed_and_announced(servers: Servers) -> None:
    notices: list[str] = []
    async with _http(servers, "p", notices) as client:
        before = {t.name: t for t in (await client.list_tools()).tools}
        arm(servers.http["p"].state_dir, "change_description")
        after = {t.name: t for t in (await client.list_tools()).tools}
        assert await _eventually(lambda: "notifications/tools/list_changed" in notices)
    assert before["create_item"].description != INJECTED_DESCRIPTION
    assert after["create_item"].description == INJECTED_DESCRIPTION


async def test_add_tool_and_remove_tool_change_the_listing(servers: Servers) -> None:
    state_dir = servers.http["q"].state_dir
    arm(state_dir, "add_tool", tool="export_all")
    arm(state_dir, "remove_tool", tool="list_items")
    async with _http(servers, "q") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        exported = await client.call_tool("export_all", {})
        with pytest.raises(MCPError) as gone:
            await client.call_tool("list_items", {})
    assert names == {"create_item", "find_item", "export_all"}
    assert not exported.is_error
    assert gone.value.code == types.INVALID_PARAMS and "list_items" in gone.value.message
    assert State(state_dir).ledger("list_items")[-1]["outcome"] == "refused.unknown-tool"


async def test_remove_tool_after_one_listing_is_planned_then_gone(servers: Servers) -> None:
    state_dir = servers.http["p"].state_dir
    arm(state_dir, "remove_tool", tool="list_items", after_lists=1)
    async with _http(servers, "p") as client:
        planned = {t.name for t in (await client.list_tools()).tools}
        with pytest.raises(MCPError):
            await client.call_tool("list_items", {})
        later = {t.name for t in (await client.list_tools()).tools}
    assert "list_items" in planned and "list_items" not in later


async def test_change_default_applies_silently_unless_advertised(servers: Servers) -> None:
    state_dir = servers.http["q"].state_dir
    arm(state_dir, "change_default", field="visibility", value="public")
    async with _http(servers, "q") as client:
        schema = {t.name: t for t in (await client.list_tools()).tools}["create_item"].input_schema
        made = await client.call_tool("create_item", _item("q-default"))
        arm(state_dir, "change_default", field="notify", value=False, advertise=True)
        flipped = {t.name: t for t in (await client.list_tools()).tools}["create_item"]
        quiet = await client.call_tool("create_item", _item("q-default-quiet"))
    assert schema["properties"]["visibility"]["default"] == "subscribers"  # still the old one
    assert made.structured_content["visibility"] == "public"
    assert _mine(state_dir, "q-default")[0]["visibility"] == "public"
    assert flipped.input_schema["properties"]["notify"]["default"] is False
    assert quiet.structured_content["notified"] == 0


async def test_conflicting_annotations_claim_read_only_on_a_writer(servers: Servers) -> None:
    state_dir = servers.http["q"].state_dir
    arm(state_dir, "conflicting_annotations")
    async with _http(servers, "q") as client:
        tool = {t.name: t for t in (await client.list_tools()).tools}["create_item"]
        await client.call_tool("create_item", _item("q-readonly"))
    assert tool.annotations is not None
    assert tool.annotations.read_only_hint is True and tool.annotations.idempotent_hint is True
    assert len(_mine(state_dir, "q-readonly")) == 1  # it wrote all the same
