"""``@capability``: a typed function becomes a contract and an adapter, tested on in-memory fakes."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from lockgate.adapters.sdk import (
    CapabilityFunction,
    Completed,
    Context,
    DeclarationError,
    IntentKey,
    NotSent,
    Rejected,
    SendBoundary,
    capability,
)
from lockgate.contracts.capability import Disclosure, EffectClass
from lockgate.contracts.disclosure import disclose
from lockgate.contracts.messages import (
    ExecutionOrder,
    FactsRequest,
    NormalizeRequest,
    QueryRequest,
)
from lockgate.contracts.vocabulary import QueryFinding


@dataclass
class Crossings:
    """A send boundary's fake executor: counts crossings, and when the function ran."""

    crossed: int = 0

    def boundary(self) -> SendBoundary:
        async def cross() -> datetime | None:
            self.crossed += 1
            return None
        return SendBoundary(cross)


def order(arguments: dict[str, Any], key: str = "key-1") -> ExecutionOrder:
    return ExecutionOrder(
        tenant="tenant-a", intent_id="i-1", attempt_id="a-1", intent_key=key,
        capability="ticket.comment", digest="sha256:x", arguments=arguments,
        resource={"type": "Ticket", "id": "T-1"}, actor="user-42", preconditions={},
        authorized_version=3)


def normalize(fn: CapabilityFunction, arguments: dict[str, Any], **context: str) -> Any:
    return fn.normalize(NormalizeRequest(tenant="tenant-a", actor="user-42", arguments=arguments,
                                         context=context or {"ticket_id": "T-1"}))


def ticket_comment() -> tuple[CapabilityFunction, list[tuple[str, str, str]]]:
    """The README's capability, over an in-memory ticket system."""
    written: list[tuple[str, str, str]] = []

    @capability("ticket.comment", effect="write", resource=("Ticket", "ticket_id"),
                disclose={"ticket.locked": Disclosure("rejected", "ticket.locked", persistent=True)})
    async def comment(ticket_id: Annotated[str, Context()],
                      text: Annotated[str, Field(min_length=1, max_length=20)],
                      key: IntentKey) -> dict[str, str]:
        """Comment on the ticket you are working on."""
        if ticket_id == "locked":
            raise Rejected("ticket.locked")
        written.append((ticket_id, text, key))
        return {"comment_id": f"c{len(written)}"}

    return comment, written


# -- the contract ---------------------------------------------------------------------------


def test_the_schema_covers_only_what_the_model_controls() -> None:
    comment, _ = ticket_comment()
    contract = comment.contract
    schema = contract.argument_schema
    assert set(schema["properties"]) == {"text"}  # neither the context argument nor the key
    assert schema["required"] == ["text"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["text"]["maxLength"] == 20
    assert contract.context_arguments == ("ticket_id",)
    assert contract.idempotency is not None and contract.idempotency.key_field == "intent_key"
    assert contract.description == "Comment on the ticket you are working on."
    assert contract.effect_class is EffectClass.WRITE
    assert contract.disclosure["ticket.locked"].code == "ticket.locked"


def test_a_named_context_key_and_defaults_reach_the_schema() -> None:
    @capability("case.note", resource=("Case", "case"), description="Add a note.")
    def note(case: Annotated[str, Context("case_id")], text: str, pinned: bool = False) -> str:
        return text

    schema = note.contract.argument_schema
    assert schema["required"] == ["text"] and schema["properties"]["pinned"]["default"] is False
    result = normalize(note, {"text": "x"}, case_id="C-9")
    assert result.reason is None
    assert result.arguments == {"text": "x", "pinned": False, "case": "C-9"}
    assert result.resource == {"type": "Case", "id": "C-9", "tenant": "tenant-a"}


def test_a_write_without_a_query_goes_to_an_operator_and_with_one_is_queried() -> None:
    comment, _ = ticket_comment()
    assert comment.contract.recovery == ("operator",) and not comment.contract.query_by_identity

    @comment.query
    async def find(key: IntentKey) -> dict[str, str] | None:
        return None

    assert comment.contract.query_by_identity
    assert comment.contract.recovery == ("query", "retry_same_intent", "operator")


# -- normalization ----------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "reason", "field"), [
    ({"text": ""}, "argument.text.empty", "text"),
    ({"text": "x" * 21}, "argument.text.too-long", "text"),
    ({}, "argument.text.missing", "text"),
    ({"text": 7}, "argument.text.invalid", "text"),
    ({"text": "hi", "ticket_id": "T-2"}, "argument.ticket_id.unexpected", "ticket_id"),
])
def test_a_validation_error_is_a_field_scoped_reason(
    arguments: dict[str, Any], reason: str, field: str,
) -> None:
    comment, _ = ticket_comment()
    result = normalize(comment, arguments)
    assert (result.reason, result.field) == (reason, field)
    assert result.arguments == {} and result.resource == {}


def test_the_model_is_told_a_field_reason_but_not_one_about_a_context_argument() -> None:
    comment, _ = ticket_comment()
    contract = comment.contract
    told = disclose("argument.text.too-long", "text", contract, Disclosure("rejected", "proposal.invalid"))
    assert (told.status, told.code, told.field) == ("rejected", "argument.text.too-long", "text")
    hidden = disclose("argument.ticket_id.unexpected", "ticket_id", contract,
                      Disclosure("rejected", "proposal.invalid"))
    assert hidden.code == "proposal.invalid"


def test_normalized_arguments_are_pydantics_canonical_dump() -> None:
    class Window(BaseModel):
        start: datetime
        hours: int = 1

    @capability("calendar.block", resource=("Calendar", "calendar"), description="Block time.")
    def block(calendar: Annotated[str, Context()], window: Window) -> None:
        return None

    result = normalize(block, {"window": {"start": "2026-01-02T03:04:05Z"}}, calendar="me")
    assert result.arguments == {"window": {"start": "2026-01-02T03:04:05Z", "hours": 1},
                                "calendar": "me"}


def test_a_run_without_the_context_argument_is_refused() -> None:
    comment, _ = ticket_comment()
    assert normalize(comment, {"text": "hi"}, other="x").reason == "run.context.missing"


# -- execution --------------------------------------------------------------------------------


async def test_the_worker_crosses_right_before_the_function_and_it_gets_the_key() -> None:
    comment, written = ticket_comment()
    crossings = Crossings()
    done = await comment.adapter().execute(order({"ticket_id": "T-1", "text": "hi"}), crossings.boundary())
    assert crossings.crossed == 1 and written == [("T-1", "hi", "key-1")]
    assert done == Completed(receipt={"intent_key": "key-1", "comment_id": "c1"},
                             result={"comment_id": "c1"})


async def test_a_function_that_takes_the_boundary_crosses_it_itself() -> None:
    steps: list[str] = []

    @capability("ticket.close", resource=("Ticket", "ticket_id"), description="Close it.")
    async def close(ticket_id: Annotated[str, Context()], boundary: SendBoundary) -> bool:
        steps.append("prepared")
        await boundary.cross()
        steps.append("written")
        return True

    crossings = Crossings()
    done = await close.adapter().execute(order({"ticket_id": "T-1"}), crossings.boundary())
    assert steps == ["prepared", "written"] and crossings.crossed == 1
    assert done.result == {"value": True}  # not a dict: wrapped


async def test_a_rejection_passes_through_for_the_worker_to_report() -> None:
    comment, written = ticket_comment()
    with pytest.raises(Rejected) as refused:
        await comment.adapter().execute(order({"ticket_id": "locked", "text": "hi"}),
                                        Crossings().boundary())
    assert refused.value.reason == "ticket.locked" and written == []


async def test_an_order_whose_arguments_do_not_validate_is_not_sent() -> None:
    comment, written = ticket_comment()
    crossings = Crossings()
    with pytest.raises(NotSent):
        await comment.adapter().execute(order({"ticket_id": "T-1", "text": ""}), crossings.boundary())
    assert crossings.crossed == 0 and written == []


async def test_a_sync_function_runs_in_a_thread_and_the_loop_keeps_turning() -> None:
    ran_on: list[int] = []
    release = threading.Event()

    @capability("files.touch", resource=("File", "path"), description="Touch a file.")
    def touch(path: str) -> dict[str, Any]:
        ran_on.append(threading.get_ident())
        release.wait(5)  # blocks its thread, not the loop
        return {"path": path, "size": 0}

    task = asyncio.create_task(touch.adapter().execute(order({"path": "a.txt"}), Crossings().boundary()))
    for _ in range(100):  # the loop turns while the function blocks
        if ran_on:
            break
        await asyncio.sleep(0.01)
    assert ran_on and ran_on[0] != threading.get_ident()
    release.set()
    done = await task
    assert done.result == {"path": "a.txt", "size": 0}
    assert done.receipt == {"intent_key": "key-1", "path": "a.txt", "size": "0"}


async def test_a_pydantic_return_value_is_dumped_to_json() -> None:
    class Stamp(BaseModel):
        at: datetime

    @capability("clock.now", effect="read", description="The time now.")
    def now() -> Stamp:
        return Stamp(at=datetime(2026, 1, 1, tzinfo=UTC))

    done = await now.adapter().execute(order({}), Crossings().boundary())
    assert done.result == {"at": "2026-01-01T00:00:00Z"}
    assert now.contract.recovery == ("operator",) and now.contract.idempotency is None
    assert now.normalize(NormalizeRequest(tenant="t", actor="a", arguments={}, context={})).resource \
        == {"type": "Clock", "id": "clock.now", "tenant": "t"}


async def test_a_query_finds_by_the_key_and_the_arguments() -> None:
    comment, written = ticket_comment()

    @comment.query
    def find(key: IntentKey, ticket_id: str) -> dict[str, str] | None:
        return next(({"comment_id": "c1"} for t, _, k in written if (t, k) == (ticket_id, key)), None)

    adapter = comment.adapter()
    ask = QueryRequest(tenant="tenant-a", intent_id="i-1", intent_key="key-1",
                       arguments={"ticket_id": "T-1", "text": "hi"})
    assert (await adapter.query(ask)).finding == QueryFinding.ABSENT
    await adapter.execute(order({"ticket_id": "T-1", "text": "hi"}), Crossings().boundary())
    found = await adapter.query(ask)
    assert found.finding == QueryFinding.FOUND and found.receipt["comment_id"] == "c1"


async def test_without_a_query_the_answer_is_no_evidence() -> None:
    comment, _ = ticket_comment()
    ask = QueryRequest(tenant="t", intent_id="i", intent_key="k", arguments={})
    assert (await comment.adapter().query(ask)).finding == QueryFinding.UNKNOWN


async def test_facts_default_to_none_and_come_from_facts_when_declared() -> None:
    comment, _ = ticket_comment()
    ask = FactsRequest(tenant="tenant-a", actor="user-42", resource={"type": "Ticket", "id": "T-1"})
    assert (await comment.adapter().facts(ask)).facts == {}

    @comment.facts
    def ticket(resource_id: str, tenant: str) -> dict[str, str | bool]:
        return {"tenant": tenant, "locked": resource_id == "locked"}

    assert (await comment.adapter().facts(ask)).facts == {"tenant": "tenant-a", "locked": False}


# -- declaration errors, at decoration time --------------------------------------------------


def test_an_unannotated_parameter_is_named() -> None:
    with pytest.raises(DeclarationError, match="'text'") as error:
        @capability("ticket.comment", description="x")
        def comment(text) -> None:  # type: ignore[no-untyped-def]
            return None
    assert isinstance(error.value, TypeError) and error.value.parameter == "text"


def test_a_context_argument_cannot_have_a_default_or_a_second_context() -> None:
    with pytest.raises(DeclarationError, match="'ticket_id'"):
        @capability("ticket.comment", description="x")
        def with_default(ticket_id: Annotated[str, Context()] = "T-1") -> None:
            return None
    with pytest.raises(DeclarationError, match="'ticket_id'"):
        @capability("ticket.comment", description="x", context={"ticket_id": Context("t")})
        def twice(ticket_id: Annotated[str, Context()]) -> None:
            return None
    with pytest.raises(DeclarationError, match="'nothing'"):
        @capability("ticket.comment", description="x", context={"nothing": Context()})
        def unknown(text: str) -> None:
            return None


def test_a_query_that_does_not_fit_is_refused_naming_the_parameter() -> None:
    comment, _ = ticket_comment()
    with pytest.raises(DeclarationError, match="'since'"):
        @comment.query
        def find(key: IntentKey, since: int) -> None:
            return None


def test_other_declaration_errors() -> None:
    with pytest.raises(DeclarationError, match="description"):
        @capability("ticket.comment")
        def undocumented(text: str) -> None:
            return None
    with pytest.raises(DeclarationError, match="'nope'"):
        @capability("ticket.comment", description="x", resource=("Ticket", "nope"))
        def wrong_resource(text: str) -> None:
            return None
    with pytest.raises(DeclarationError, match="'boundary'"):
        @capability("ticket.comment", description="x")
        def sync_crossing(boundary: SendBoundary) -> None:
            return None
    with pytest.raises(DeclarationError, match="capability name"):
        capability("Ticket Comment", description="x")(lambda: None)
    with pytest.raises(DeclarationError, match="effect"):
        capability("ticket.comment", effect="delete", description="x")(  # type: ignore[arg-type]
            lambda: None)


def test_the_function_stays_callable_as_it_was() -> None:
    @capability("math.add", effect="derive", description="Add two numbers.")
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5 and add.__name__ == "add"
    assert add.contract.argument_schema["required"] == ["a", "b"]


async def test_the_result_schema_is_declared_and_the_executor_keeps_what_it_describes() -> None:
    from lockgate.executor.domain import checked_result

    comment, _ = ticket_comment()
    assert comment.contract.result_schema is not None
    assert comment.contract.result_schema["type"] == "object"

    @capability("git.log", effect="read", description="The latest commits.")
    def log(max_count: int = 2) -> list[str]:
        return [f"commit {i}" for i in range(max_count)]

    schema = log.contract.result_schema
    assert schema is not None and schema["properties"]["value"]["type"] == "array"
    done = await log.adapter().execute(order({"max_count": 3}), Crossings().boundary())
    assert done.result == {"value": ["commit 0", "commit 1", "commit 2"]}
    assert checked_result(dict(done.result), log.contract) == done.result  # neither withheld


def test_an_argument_type_without_a_schema_is_a_declaration_error() -> None:
    class Client:
        pass

    with pytest.raises(DeclarationError, match="JSON Schema"):
        @capability("ticket.comment", description="x")
        def comment(client: Client, text: str) -> None:
            return None


async def test_a_function_that_raises_after_the_boundary_leaves_the_outcome_to_the_worker() -> None:
    """Crossed, then failed: the exception reaches the worker as it is (not a rejection, not
    "not sent"), and the worker reports nothing after a crossing: the outcome is unknown."""
    @capability("ticket.comment", resource=("Ticket", "ticket_id"), description="x")
    def comment(ticket_id: Annotated[str, Context()], text: str) -> None:
        raise ConnectionResetError("the remote system hung up mid-write")

    crossings = Crossings()
    boundary = crossings.boundary()
    with pytest.raises(ConnectionResetError):
        await comment.adapter().execute(order({"ticket_id": "T-1", "text": "hi"}), boundary)
    assert boundary.crossed and crossings.crossed == 1


async def test_a_context_argument_becomes_the_type_the_function_takes() -> None:
    seen: list[object] = []

    @capability("board.post", resource=("Board", "board"), description="Post on the board.")
    def post(board: Annotated[int, Context("board_id")], text: str) -> None:
        seen.append(board)

    normalized = normalize(post, {"text": "hi"}, board_id="7")
    assert normalized.arguments == {"text": "hi", "board": "7"}  # the record keeps the text
    await post.adapter().execute(order(normalized.arguments), Crossings().boundary())
    assert seen == [7]

    class Client:
        pass

    with pytest.raises(DeclarationError, match="'client'"):
        @capability("board.post", description="x")
        def opaque(client: Annotated[Client, Context()]) -> None:
            return None
