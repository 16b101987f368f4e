"""The items world: seed, refusals, P idempotent and Q not, queries, faults, the adapters' contracts."""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import pytest
from jsonschema import Draft202012Validator

from lockgate.adapters.sdk import Completed, NotSent, Rejected, SendBoundary
from lockgate.authz.engine import AuthzRequest, PolicyBundle, evaluate
from lockgate.client.output import Output
from lockgate.contracts.capability import Disclosure, EffectClass
from lockgate.contracts.messages import (
    ExecutionOrder,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
)
from lockgate.core.canonical import digest_bytes
from lockgate.runtime.settings import Settings
from lockgate.worlds.items import adapter as items_adapter
from lockgate.worlds.items.adapter import (
    DRAFT_CONTRACT,
    PUBLISH_CONTRACT,
    DraftAdapter,
    ItemsWorldSettings,
    PublishAdapter,
    build_adapters,
    draft_contract,
    publish_contract,
)
from lockgate.worlds.items.world import (
    DEMO_CREDENTIAL,
    FAULTS,
    REASONS,
    InvalidCredential,
    ItemsWorldError,
    NotAuthorized,
    ResponseLost,
    SpaceArchived,
    SpaceNotFound,
    TenantMismatch,
    World,
    WriteTooLate,
    print_ledger,
)

CRED = DEMO_CREDENTIAL
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World.seed(tmp_path / "items", clock=lambda: NOW)


def draft(world: World, space_id: str = "space-1", *, tenant: str = "tenant-a",
          actor: str = "user-42", title: str = "Quarterly notes", body: str = "Draft text.",
          key: str = "key-1", credential: str = CRED, intent_id: str = "intent-1",
          not_after: datetime | None = None) -> dict[str, str]:
    return world.create_draft(credential, tenant, actor, space_id, title, body, key, intent_id,
                              not_after=not_after)


def publish(world: World, space_id: str = "space-1", *, tenant: str = "tenant-a",
            actor: str = "user-42", title: str = "Release 1.2", body: str = "It shipped.",
            ref: str = "ref-1", credential: str = CRED, intent_id: str = "intent-1",
            not_after: datetime | None = None) -> dict[str, str]:
    return world.publish(credential, tenant, actor, space_id, title, body, ref, intent_id,
                         not_after=not_after)


CREATE: dict[str, Callable[..., dict[str, str]]] = {"P": draft, "Q": publish}


def test_reason_codes_are_stable() -> None:
    assert REASONS == (
        "items.credential-invalid",
        "space.not-found",
        "space.tenant-mismatch",
        "space.archived",
        "item.not-authorized",
        "items.write-too-late",
    )
    assert items_adapter.REASONS == (
        "argument.title.empty",
        "argument.title.too-long",
        "argument.title.invalid",
        "argument.body.empty",
        "argument.body.too-long",
        "argument.body.invalid",
        "run.context.missing",
        "items.fault-injected",
    )
    assert FAULTS == ("drop_response", "crash_after_send", "crash_after_commit", "fail_before_send",
                      "query_unavailable", "stall_before_write")


# -- seed and facts ---------------------------------------------------------------------------


def test_seed_facts(world: World) -> None:
    assert world.space_facts(CRED, "tenant-a", "user-42", "space-1") == {
        "exists": True,
        "tenant": "tenant-a",
        "status": "open",
        "actor_may_create": True,
        "sensitive": False,
        "version": 1,
    }
    assert world.space_facts(CRED, "tenant-a", "user-42", "space-archived")["status"] == "archived"
    assert world.space_facts(CRED, "tenant-b", "user-77", "space-9")["actor_may_create"]
    assert not world.space_facts(CRED, "tenant-a", "user-13", "space-1")["actor_may_create"]
    assert not world.space_facts(CRED, "tenant-a", "user-42", "space-9")["actor_may_create"]
    assert not world.space_facts(CRED, "tenant-a", "user-77", "space-1")["actor_may_create"]
    assert world.space_facts(CRED, "tenant-a", "user-42", "space-404") == {
        "exists": False, "tenant": "", "status": "", "actor_may_create": False,
        "sensitive": False, "version": 0,
    }
    assert (world.invocations("P"), world.invocations("Q")) == (0, 0)
    assert world.drafts() == world.publications() == world.notifications() == []
    assert world.faults() == []


def test_open_or_seed_keeps_existing_state(world: World) -> None:
    draft(world)
    publish(world)
    world.inject("Q", "drop_response")
    again = World.open_or_seed(world.directory)
    assert (len(again.drafts()), len(again.publications()), again.invocations("Q")) == (1, 1, 1)
    assert again.faults() == [{"server": "Q", "fault": "drop_response", "remaining": 1}]


def test_reading_a_world_that_was_never_seeded_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        World(tmp_path / "nothing").drafts()


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["P", "Q"])
@pytest.mark.parametrize(
    ("kwargs", "error", "reason"),
    [
        ({"space_id": "space-404"}, SpaceNotFound, "space.not-found"),
        ({"space_id": "space-9"}, TenantMismatch, "space.tenant-mismatch"),
        ({"space_id": "space-archived"}, SpaceArchived, "space.archived"),
        ({"actor": "user-13"}, NotAuthorized, "item.not-authorized"),
        ({"actor": "user-77"}, NotAuthorized, "item.not-authorized"),
        ({"actor": "user-nobody"}, NotAuthorized, "item.not-authorized"),
        ({"credential": "guess"}, InvalidCredential, "items.credential-invalid"),
    ],
)
def test_refusals_carry_their_reason_and_write_nothing(
    world: World, server: str, kwargs: dict[str, Any], error: type[ItemsWorldError], reason: str
) -> None:
    with pytest.raises(error) as caught:
        CREATE[server](world, **kwargs)
    assert caught.value.reason == caught.value.code == reason
    assert world.drafts() == world.publications() == world.notifications() == []
    other = "Q" if server == "P" else "P"
    assert (world.invocations(server), world.invocations(other)) == (1, 0)
    assert world.space_facts(CRED, "tenant-a", "user-42", "space-1")["version"] == 1


def test_wrong_credential_is_refused_everywhere(world: World) -> None:
    with pytest.raises(InvalidCredential):
        world.space_facts("guess", "tenant-a", "user-42", "space-1")
    with pytest.raises(InvalidCredential):
        world.find_draft("guess", "tenant-a", "key-1")
    with pytest.raises(InvalidCredential):
        world.find_publication("guess", "tenant-a", "ref-1")


def test_unknown_server_or_fault_is_a_programming_error(world: World) -> None:
    with pytest.raises(ValueError, match="server"):
        world.inject("R", "drop_response")
    with pytest.raises(ValueError, match="fault"):
        world.inject("P", "explode")
    with pytest.raises(ValueError, match="times"):
        world.inject("P", "drop_response", times=0)
    with pytest.raises(ValueError, match="server"):
        world.invocations("R")
    with pytest.raises(ValueError, match="server"):
        world.take_fault("R", "drop_response")


# -- server P: private drafts, idempotent by key ------------------------------------------------


def test_draft_is_private_and_idempotent_by_key(world: World) -> None:
    first = draft(world, key="same")
    assert first == {"draft_id": "draft-000001", "space_id": "space-1", "idempotency_key": "same"}
    # A retry of the same intent (even with other text): the same draft, nothing written.
    second = draft(world, key="same", title="Changed", intent_id="intent-2")
    assert second == first
    assert len(world.drafts()) == 1
    assert world.invocations("P") == 2
    assert world.notifications() == []
    # Private: the space does not change and nothing is published.
    assert world.space_facts(CRED, "tenant-a", "user-42", "space-1")["version"] == 1
    assert world.items("space-1") == []
    third = draft(world, key="other")
    assert third["draft_id"] == "draft-000002"


def test_find_draft_by_key_and_tenant(world: World) -> None:
    receipt = draft(world, key="k1")
    assert world.find_draft(CRED, "tenant-a", "k1") == receipt
    assert world.find_draft(CRED, "tenant-a", "k2") is None
    assert world.find_draft(CRED, "tenant-b", "k1") is None


def test_a_known_key_returns_its_draft_even_where_a_new_one_would_be_refused(world: World) -> None:
    receipt = draft(world, key="k1")
    assert draft(world, "space-archived", key="k1") == receipt


# -- server Q: publishes and notifies, not idempotent ------------------------------------------


def test_publish_notifies_every_subscriber_and_moves_the_version(world: World) -> None:
    receipt = publish(world, ref="ref-1", title="Release 1.2")
    assert receipt == {"publication_id": "pub-000001", "space_id": "space-1",
                       "client_ref": "ref-1", "notified": "3"}
    assert [n["subscriber"] for n in world.notifications()] == [
        "subscriber-1", "subscriber-2", "subscriber-3"
    ]
    assert {n["publication_id"] for n in world.notifications()} == {"pub-000001"}
    assert world.space_facts(CRED, "tenant-a", "user-42", "space-1")["version"] == 2
    assert world.items("space-1") == ["Release 1.2"]


def test_publish_is_not_idempotent(world: World) -> None:
    first = publish(world, ref="same")
    second = publish(world, ref="same")  # the same request again: a second publication
    assert first["publication_id"] != second["publication_id"]
    assert [p["client_ref"] for p in world.publications()] == ["same", "same"]
    assert len(world.notifications()) == 2 * 3
    assert world.invocations("Q") == 2
    # Asked by client reference, Q names the first one.
    assert world.find_publication(CRED, "tenant-a", "same") == first


def test_find_publication_by_client_ref_and_tenant(world: World) -> None:
    assert world.find_publication(CRED, "tenant-a", "ref-1") is None
    receipt = publish(world, ref="ref-1")
    assert world.find_publication(CRED, "tenant-a", "ref-1") == receipt
    assert world.find_publication(CRED, "tenant-b", "ref-1") is None
    other = publish(world, "space-9", tenant="tenant-b", actor="user-77", ref="ref-1")
    assert other["notified"] == "1"
    assert world.find_publication(CRED, "tenant-b", "ref-1") == other


def test_ledgers_record_each_effect(world: World) -> None:
    draft(world, title="T1", body="B1", key="k1", intent_id="i1")
    publish(world, title="T2", body="B2", ref="r2", intent_id="i2")
    assert world.drafts() == [{
        "draft_id": "draft-000001", "space_id": "space-1", "tenant": "tenant-a",
        "actor": "user-42", "idempotency_key": "k1", "intent_id": "i1",
        "title_digest": digest_bytes(b"T1"), "body_digest": digest_bytes(b"B1"),
        "at": NOW.isoformat(),
    }]
    assert world.publications() == [{
        "publication_id": "pub-000001", "space_id": "space-1", "tenant": "tenant-a",
        "actor": "user-42", "client_ref": "r2", "intent_id": "i2",
        "title_digest": digest_bytes(b"T2"), "body_digest": digest_bytes(b"B2"),
        "notified": "3", "at": NOW.isoformat(),
    }]
    assert world.notifications()[0] == {
        "notification_id": "ntf-000001", "publication_id": "pub-000001",
        "subscriber": "subscriber-1", "space_id": "space-1", "tenant": "tenant-a",
        "actor": "user-42", "client_ref": "r2", "intent_id": "i2",
        "title_digest": digest_bytes(b"T2"), "at": NOW.isoformat(),
    }
    out = io.StringIO()
    print_ledger(world.directory, Output(json=True, stdout=out))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line.pop("ledger") for line in lines] == ["draft", "publication"] + ["notification"] * 3
    assert lines == world.drafts() + world.publications() + world.notifications()


def test_credential_never_on_disk_or_returned(world: World) -> None:
    returned: list[Any] = [
        draft(world, key="k1"),
        publish(world, ref="r1"),
        world.space_facts(CRED, "tenant-a", "user-42", "space-1"),
        world.find_draft(CRED, "tenant-a", "k1"),
        world.find_publication(CRED, "tenant-a", "r1"),
        world.drafts(), world.publications(), world.notifications(), world.faults(),
    ]
    with pytest.raises(SpaceArchived) as caught:
        publish(world, "space-archived")
    world.inject("Q", "drop_response")
    with pytest.raises(ResponseLost) as lost:
        publish(world)
    out = io.StringIO()
    print_ledger(world.directory, Output(json=True, stdout=out))
    assert CRED not in json.dumps(returned) + out.getvalue()
    assert CRED not in str(caught.value) + str(lost.value)
    for path in world.directory.iterdir():
        assert CRED.encode() not in path.read_bytes(), path.name


def test_invocations_are_shared_between_instances(world: World) -> None:
    other = World(world.directory)
    draft(world, key="k1")
    draft(other, key="k1")
    with pytest.raises(SpaceArchived):
        publish(other, "space-archived")
    assert world.invocations("P") == other.invocations("P") == 2
    assert world.invocations("Q") == other.invocations("Q") == 1


# -- faults -------------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["P", "Q"])
def test_a_write_reaching_the_server_after_its_not_after_is_refused(world: World, server: str) -> None:
    late = NOW - timedelta(microseconds=1)
    with pytest.raises(WriteTooLate) as caught:
        CREATE[server](world, not_after=late)
    assert caught.value.reason == "items.write-too-late"
    assert (world.drafts(), world.publications(), world.notifications()) == ([], [], [])
    assert world.invocations(server) == 1  # it reached the server: counted, not written
    assert CREATE[server](world, not_after=NOW)  # due now: still in time


@pytest.mark.parametrize("server", ["P", "Q"])
def test_dropped_response_commits_the_effect_once(world: World, server: str) -> None:
    world.inject(server, "drop_response")
    with pytest.raises(ResponseLost) as caught:
        CREATE[server](world)
    assert caught.value.code == "items.response-lost"
    assert not isinstance(caught.value, ItemsWorldError)  # not a refusal: the effect happened
    assert len(world.drafts() if server == "P" else world.publications()) == 1
    assert world.faults() == []
    CREATE[server](world)  # consumed: the next call answers
    assert world.invocations(server) == 2


def test_dropped_response_after_publish_then_retry_publishes_twice(world: World) -> None:
    world.inject("Q", "drop_response")
    with pytest.raises(ResponseLost):
        publish(world, ref="r1")
    # The caller cannot tell; a blind retry duplicates. A query first would have found it.
    assert world.find_publication(CRED, "tenant-a", "r1") is not None
    publish(world, ref="r1")
    assert len(world.publications()) == 2
    assert len(world.notifications()) == 6


def test_dropped_response_after_draft_then_retry_is_harmless(world: World) -> None:
    world.inject("P", "drop_response")
    with pytest.raises(ResponseLost):
        draft(world, key="k1")
    assert draft(world, key="k1") == world.find_draft(CRED, "tenant-a", "k1")
    assert len(world.drafts()) == 1


def test_dropped_response_hides_a_refusal_too(world: World) -> None:
    world.inject("Q", "drop_response")
    with pytest.raises(ResponseLost) as caught:
        publish(world, "space-archived")
    assert isinstance(caught.value.__cause__, SpaceArchived)
    assert world.publications() == []
    assert world.faults() == []


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("server", ["P", "Q"])
def test_each_fault_is_taken_exactly_once_across_instances(
    world: World, server: str, fault: str
) -> None:
    assert not World(world.directory).take_fault(server, fault)
    world.inject(server, fault)
    other_server = "Q" if server == "P" else "P"
    assert not world.take_fault(other_server, fault)  # armed per server
    # Another instance (as another process would) sees what this one armed.
    assert World(world.directory).take_fault(server, fault)
    assert not World(world.directory).take_fault(server, fault)
    assert world.faults() == []


def test_fault_times_add_up_and_can_be_cleared(world: World) -> None:
    world.inject("P", "fail_before_send", times=2)
    world.inject("P", "fail_before_send")
    assert world.faults() == [{"server": "P", "fault": "fail_before_send", "remaining": 3}]
    assert world.take_fault("P", "fail_before_send")
    assert world.faults()[0]["remaining"] == 2
    world.clear_faults()
    assert not world.take_fault("P", "fail_before_send")


def test_seed_disarms_faults_and_resets_counts(world: World) -> None:
    world.inject("Q", "crash_after_send")
    publish(world)
    again = World.seed(world.directory)
    assert again.faults() == []
    assert again.invocations("Q") == 0
    assert again.publications() == []


def _take_all(directory: str, n: int) -> int:
    world = World(directory)
    return sum(world.take_fault("Q", "crash_after_commit") for _ in range(n))


def test_racing_processes_take_each_armed_fault_once(world: World) -> None:
    world.inject("Q", "crash_after_commit", times=25)
    with ProcessPoolExecutor(max_workers=3) as pool:
        taken = list(pool.map(_take_all, [str(world.directory)] * 3, [20] * 3))
    assert sum(taken) == 25
    assert world.faults() == []


# -- the adapters, called directly (no broker) ---------------------------------------------------


class Crashed(Exception):
    """What the fake ``os._exit`` raises, so the test sees where the worker would die."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def crash(status: int) -> NoReturn:
    raise Crashed(status)


def adapters(world: World, deadline_s: float = 30.0) -> dict[str, DraftAdapter | PublishAdapter]:
    return {
        "P": DraftAdapter(world, CRED, outcome_deadline_s=deadline_s, exit_process=crash),
        "Q": PublishAdapter(world, CRED, outcome_deadline_s=deadline_s, exit_process=crash),
    }


def order(capability: str, *, space_id: str = "space-1", key: str = "key-1") -> ExecutionOrder:
    return ExecutionOrder(
        tenant="tenant-a", intent_id="intent-1", attempt_id="att-1", intent_key=key,
        capability=capability, digest="sha256:d", actor="user-42",
        arguments={"space_id": space_id, "title": "Release", "body": "Body text."},
        resource={"type": "space", "id": space_id, "tenant": "tenant-a"},
        preconditions={"version": 1}, authorized_version=4,
    )


class Boundary:
    """A send boundary that records whether it was crossed (and says until when to write)."""

    def __init__(self, not_after: datetime | None = None) -> None:
        self.crossings = 0
        self.not_after = not_after
        self.boundary = SendBoundary(self._cross)

    async def _cross(self) -> datetime | None:
        self.crossings += 1
        return self.not_after


def contract_name(server: str) -> str:
    return {"P": "draft.prepare_private", "Q": "item.publish"}[server]


async def run(server: str, world: World, *, not_after: datetime | None = None,
              **kwargs: Any) -> tuple[Boundary, Awaitable[Completed]]:
    boundary = Boundary(not_after)
    adapter = adapters(world)[server]
    return boundary, adapter.execute(order(contract_name(server), **kwargs), boundary.boundary)


async def test_execute_creates_a_draft_on_p(world: World) -> None:
    boundary, pending = await run("P", world)
    completed = await pending
    assert completed.receipt == {"draft_id": "draft-000001", "space_id": "space-1",
                                 "idempotency_key": "key-1"}
    assert completed.result == {"draft_id": "draft-000001", "space_id": "space-1"}
    assert DRAFT_CONTRACT.result_schema is not None
    Draft202012Validator(DRAFT_CONTRACT.result_schema).validate(completed.result)
    assert boundary.crossings == 1
    assert world.drafts()[0]["intent_id"] == "intent-1"


async def test_execute_publishes_on_q_with_the_key_as_client_ref(world: World) -> None:
    boundary, pending = await run("Q", world)
    completed = await pending
    assert completed.result == {"publication_id": "pub-000001", "space_id": "space-1", "notified": 3}
    assert PUBLISH_CONTRACT.result_schema is not None
    Draft202012Validator(PUBLISH_CONTRACT.result_schema).validate(completed.result)
    assert world.publications()[0]["client_ref"] == "key-1"
    assert boundary.crossings == 1


async def test_q_does_not_publish_again_what_it_already_published(world: World) -> None:
    first = await (await run("Q", world))[1]
    boundary, pending = await run("Q", world)  # the same order again (a redelivery)
    assert await pending == first
    assert boundary.crossings == 0  # nothing was sent
    assert world.invocations("Q") == 1
    assert len(world.publications()) == 1


@pytest.mark.parametrize("server", ["P", "Q"])
async def test_the_boundary_s_not_after_reaches_the_server(world: World, server: str) -> None:
    # The world's clock says NOW: a write due by a second earlier arrived too late.
    boundary, pending = await run(server, world, not_after=NOW - timedelta(seconds=1))
    with pytest.raises(Rejected) as caught:
        await pending
    assert caught.value.reason == "items.write-too-late"
    assert boundary.crossings == 1
    assert (world.drafts(), world.publications(), world.invocations(server)) == ([], [], 1)
    completed = await (await run(server, world, not_after=NOW))[1]
    assert completed.receipt


@pytest.mark.parametrize("server", ["P", "Q"])
async def test_world_refusal_is_rejected(world: World, server: str) -> None:
    boundary, pending = await run(server, world, space_id="space-archived")
    with pytest.raises(Rejected) as caught:
        await pending
    assert caught.value.reason == "space.archived"
    assert boundary.crossings == 1


@pytest.mark.parametrize("server", ["P", "Q"])
async def test_fail_before_send_never_crosses_nor_reaches_the_world(world: World, server: str) -> None:
    world.inject(server, "fail_before_send")
    boundary, pending = await run(server, world)
    with pytest.raises(NotSent) as caught:
        await pending
    assert caught.value.reason == "items.fault-injected"
    assert (boundary.crossings, world.invocations(server)) == (0, 0)
    assert world.faults() == []


@pytest.mark.parametrize("server", ["P", "Q"])
async def test_crash_after_send_dies_past_the_boundary_before_the_world(
    world: World, server: str
) -> None:
    world.inject(server, "crash_after_send")
    boundary, pending = await run(server, world)
    with pytest.raises(Crashed) as caught:
        await pending
    assert caught.value.status == 137
    assert (boundary.crossings, world.invocations(server)) == (1, 0)
    assert world.drafts() == world.publications() == []
    assert world.faults() == []


@pytest.mark.parametrize("server", ["P", "Q"])
async def test_crash_after_commit_dies_after_the_effect(world: World, server: str) -> None:
    world.inject(server, "crash_after_commit")
    boundary, pending = await run(server, world)
    with pytest.raises(Crashed):
        await pending
    assert (boundary.crossings, world.invocations(server)) == (1, 1)
    assert len(world.drafts() if server == "P" else world.publications()) == 1
    assert world.faults() == []


@pytest.mark.parametrize("server", ["P", "Q"])
async def test_lost_response_is_an_error_after_the_boundary(world: World, server: str) -> None:
    world.inject(server, "drop_response")
    boundary, pending = await run(server, world)
    with pytest.raises(RuntimeError, match="no response"):
        await pending
    assert boundary.crossings == 1
    assert len(world.drafts() if server == "P" else world.publications()) == 1


@pytest.mark.parametrize("server", ["P", "Q"])
async def test_query_by_intent_key(world: World, server: str) -> None:
    adapter = adapters(world)[server]
    req = QueryRequest(tenant="tenant-a", intent_id="intent-1", intent_key="key-1", arguments={})
    assert await adapter.query(req) == QueryResult(finding="absent")
    completed = await (await run(server, world))[1]
    assert await adapter.query(req) == QueryResult(finding="found", receipt=completed.receipt)


async def test_facts_come_from_the_world(world: World) -> None:
    facts = await adapters(world)["Q"].facts(
        FactsRequest(tenant="tenant-a", actor="user-13",
                     resource={"type": "space", "id": "space-archived"})
    )
    assert facts.revision == "1"
    assert (facts.facts["status"], facts.facts["actor_may_create"]) == ("archived", False)


def normalize_request(arguments: dict[str, Any], context: dict[str, str] | None = None) -> NormalizeRequest:
    return NormalizeRequest(tenant="tenant-a", actor="user-42", arguments=arguments,
                            context={"space_id": "space-1"} if context is None else context)


@pytest.mark.parametrize("server", ["P", "Q"])
async def test_normalize_trims_the_title_and_takes_the_space_from_context(
    world: World, server: str
) -> None:
    result = await adapters(world)[server].normalize(
        normalize_request({"title": "  Release  ", "body": "  kept as written\n",
                           "space_id": "space-9"})
    )
    assert result == NormalizeResult(
        arguments={"space_id": "space-1", "title": "Release", "body": "  kept as written\n"},
        resource={"type": "space", "id": "space-1", "tenant": "tenant-a"},
        destination=f"items-{server}:tenant-a/space-1",
    )


@pytest.mark.parametrize(
    ("arguments", "context", "reason", "field"),
    [
        ({"title": "   ", "body": "b"}, None, "argument.title.empty", "title"),
        ({"title": "x" * 121, "body": "b"}, None, "argument.title.too-long", "title"),
        ({"title": 7, "body": "b"}, None, "argument.title.invalid", "title"),
        ({"body": "b"}, None, "argument.title.invalid", "title"),
        ({"title": "t", "body": " \n "}, None, "argument.body.empty", "body"),
        ({"title": "t", "body": "é" * 1001}, None, "argument.body.too-long", "body"),
        ({"title": "t", "body": ["b"]}, None, "argument.body.invalid", "body"),
        ({"title": "t", "body": "b"}, {}, "run.context.missing", None),
    ],
)
async def test_normalize_reasons(
    world: World, arguments: dict[str, Any], context: dict[str, str] | None, reason: str,
    field: str | None,
) -> None:
    for adapter in adapters(world).values():
        result = await adapter.normalize(normalize_request(arguments, context))
        assert (result.reason, result.field, result.arguments) == (reason, field, {})


async def test_normalize_accepts_the_limits_exactly(world: World) -> None:
    result = await adapters(world)["P"].normalize(
        normalize_request({"title": " " + "é" * 120 + " ", "body": "é" * 1000})
    )
    assert result.reason is None
    assert result.arguments["title"] == "é" * 120


# -- contracts and settings ---------------------------------------------------------------------


def test_contracts() -> None:
    p, q = DRAFT_CONTRACT, PUBLISH_CONTRACT
    assert (p.name, q.name) == ("draft.prepare_private", "item.publish")
    assert p.argument_schema == q.argument_schema  # one remote schema, two product verbs
    assert p.argument_schema["required"] == ["title", "body"]
    assert p.argument_schema["additionalProperties"] is False
    assert p.context_arguments == q.context_arguments == ("space_id",)
    assert (p.effect_class, q.effect_class) == (EffectClass.WRITE, EffectClass.PUBLISH)
    assert p.idempotency is not None
    assert (p.idempotency.key_field, p.idempotency.retention_s) == ("intent_key", 7 * 24 * 3600)
    assert q.idempotency is None
    assert p.query_by_identity and q.query_by_identity
    assert p.recovery == ("query", "retry_same_intent")
    assert q.recovery == ("query", "retry_same_intent_if_absent", "operator")
    expected = {
        "argument.title.empty": Disclosure("rejected", "argument.title.empty", "title"),
        "argument.title.too-long": Disclosure("rejected", "argument.title.too-long", "title"),
        "argument.body.empty": Disclosure("rejected", "argument.body.empty", "body"),
        "argument.body.too-long": Disclosure("rejected", "argument.body.too-long", "body"),
    }
    assert p.disclosure == q.disclosure == expected
    assert p.outcome_deadline_s == q.outcome_deadline_s == 30.0


def test_the_deadline_is_configurable_and_part_of_the_revision(world: World) -> None:
    assert draft_contract(2.0).outcome_deadline_s == publish_contract(2.0).outcome_deadline_s == 2.0
    assert draft_contract(2.0).revision != DRAFT_CONTRACT.revision
    built = adapters(world, deadline_s=2.0)
    assert built["P"].contract == draft_contract(2.0)
    assert built["Q"].contract == publish_contract(2.0)


def test_settings_keep_the_credential_out_of_reprs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOCKGATE_ITEMS_WORLD_CREDENTIAL", "s3cret-from-env")
    monkeypatch.setenv("LOCKGATE_ITEMS_WORLD_DIR", str(tmp_path / "w"))
    monkeypatch.setenv("LOCKGATE_ITEMS_WORLD_OUTCOME_DEADLINE_S", "2")
    settings = ItemsWorldSettings()
    assert settings.credential.get_secret_value() == "s3cret-from-env"
    assert settings.outcome_deadline_s == 2.0
    assert "s3cret-from-env" not in repr(settings)
    p, q = build_adapters(settings)
    assert (p.contract.outcome_deadline_s, q.contract.outcome_deadline_s) == (2.0, 2.0)
    # The world was seeded with the configured credential.
    assert World(tmp_path / "w").space_facts("s3cret-from-env", "tenant-a", "user-42", "space-1")


def test_settings_defaults() -> None:
    settings = ItemsWorldSettings()
    # Under the deployment's var directory, never relative to where a command runs.
    assert settings.dir == Settings().var_dir / "worlds" / "items" and settings.dir.is_absolute()
    assert settings.credential.get_secret_value() == DEMO_CREDENTIAL
    assert settings.outcome_deadline_s == 30.0


# -- policies -----------------------------------------------------------------------------------

def _bundle() -> PolicyBundle:
    """Every world's policies, as the policy service loads them."""
    return PolicyBundle.load(REPO / "deploy" / "policies")


def test_policy_ids_are_the_world_reasons() -> None:
    bundle = _bundle()
    forbids = {pid for pid, effect in bundle.effects.items() if effect == "forbid"}
    # What no fact can foresee: a wrong credential, a write that reached the server late.
    assert set(REASONS) - {"items.credential-invalid", "items.write-too-late"} <= forbids


@pytest.mark.parametrize("capability", ["draft.prepare_private", "item.publish"])
@pytest.mark.parametrize(
    ("tenant", "actor", "space", "outcome", "reasons"),
    [
        ("tenant-a", "user-42", "space-1", "allow", ()),
        ("tenant-b", "user-77", "space-9", "allow", ()),
        ("tenant-a", "user-42", "space-404", "deny", ("space.not-found", "item.not-authorized")),
        ("tenant-a", "user-42", "space-9", "deny", ("space.tenant-mismatch", "item.not-authorized")),
        ("tenant-a", "user-42", "space-archived", "deny", ("space.archived",)),
        ("tenant-a", "user-13", "space-1", "deny", ("item.not-authorized",)),
    ],
)
def test_policy_decisions_on_world_facts(
    world: World, capability: str, tenant: str, actor: str, space: str, outcome: str,
    reasons: tuple[str, ...],
) -> None:
    facts = world.space_facts(CRED, tenant, actor, space)
    decision = evaluate(_bundle(), AuthzRequest(
        tenant=tenant, actor=actor, capability=capability, resource_type="Space",
        resource_id=space, resource_facts=facts,
        context={"effect_class": "write", "digest": "sha256:d"},
    ))
    assert (decision.outcome, decision.reasons, decision.errors) == (outcome, reasons, ())
