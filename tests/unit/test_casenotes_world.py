"""The case world: seed, refusals with stable codes, conditional and idempotent writes."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lockgate.client.output import Output
from lockgate.core.canonical import digest_bytes
from lockgate.worlds.casenotes.world import (
    DEMO_CREDENTIAL,
    REASONS,
    CaseClosed,
    CaseNotFound,
    CaseWorldError,
    InvalidCredential,
    NotAuthorized,
    TenantMismatch,
    VersionConflict,
    World,
    WritesSuspended,
    print_ledger,
)

CRED = DEMO_CREDENTIAL
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World.seed(tmp_path / "case", clock=lambda: NOW)


def add(world: World, case_id: str = "case-123", *, tenant: str = "tenant-a",
        actor: str = "user-42", note: str = "called the customer", version: int = 1,
        key: str = "key-1", credential: str = CRED) -> dict[str, str]:
    return world.add_note(credential, tenant, actor, case_id, note, version, key, "intent-1")


def test_reason_codes_are_stable() -> None:
    assert REASONS == (
        "case.credential-invalid",
        "case.not-found",
        "case.tenant-mismatch",
        "case.closed",
        "case.writes-suspended",
        "case.note.not-authorized",
        "case.version-conflict",
    )


def test_seed_facts(world: World) -> None:
    facts = world.case_facts(CRED, "tenant-a", "user-42", "case-123")
    assert facts == {
        "exists": True,
        "tenant": "tenant-a",
        "status": "open",
        "writes_suspended": False,
        "version": 1,
        "actor_may_add_note": True,
        "sensitive": False,
    }
    assert world.case_facts(CRED, "tenant-a", "user-42", "case-closed")["status"] == "closed"
    assert world.case_facts(CRED, "tenant-a", "user-42", "case-frozen")["writes_suspended"]
    assert world.case_facts(CRED, "tenant-b", "user-77", "case-999")["actor_may_add_note"]
    assert not world.case_facts(CRED, "tenant-a", "user-13", "case-123")["actor_may_add_note"]
    assert not world.case_facts(CRED, "tenant-a", "user-42", "case-999")["actor_may_add_note"]
    assert world.case_facts(CRED, "tenant-a", "user-42", "case-404")["exists"] is False


def test_open_or_seed_keeps_existing_state(world: World) -> None:
    add(world)
    again = World.open_or_seed(world.directory)
    assert len(again.ledger()) == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "reason"),
    [
        ({"case_id": "case-404"}, CaseNotFound, "case.not-found"),
        ({"case_id": "case-999"}, TenantMismatch, "case.tenant-mismatch"),
        ({"case_id": "case-closed"}, CaseClosed, "case.closed"),
        ({"case_id": "case-frozen"}, WritesSuspended, "case.writes-suspended"),
        ({"actor": "user-13"}, NotAuthorized, "case.note.not-authorized"),
        ({"actor": "user-77"}, NotAuthorized, "case.note.not-authorized"),
        ({"version": 7}, VersionConflict, "case.version-conflict"),
        ({"credential": "guess"}, InvalidCredential, "case.credential-invalid"),
    ],
)
def test_refusals_carry_their_reason_and_write_nothing(
    world: World, kwargs: dict[str, object], error: type[CaseWorldError], reason: str
) -> None:
    with pytest.raises(error) as caught:
        add(world, **kwargs)  # type: ignore[arg-type]
    assert caught.value.reason == reason
    assert caught.value.code == reason
    assert world.ledger() == []
    assert world.invocations == 1


def test_wrong_credential_is_refused_everywhere(world: World) -> None:
    with pytest.raises(InvalidCredential):
        world.case_facts("guess", "tenant-a", "user-42", "case-123")
    with pytest.raises(InvalidCredential):
        world.find_note("guess", "tenant-a", "key-1")


def test_conditional_write_moves_the_version(world: World) -> None:
    receipt = add(world, version=1, key="k1")
    assert receipt == {"note_id": "note-000001", "case_id": "case-123", "version": "2"}
    assert world.case_facts(CRED, "tenant-a", "user-42", "case-123")["version"] == 2
    with pytest.raises(VersionConflict):
        add(world, version=1, key="k2")  # written against the old version
    add(world, version=2, key="k2")
    assert world.notes("case-123") == ["called the customer", "called the customer"]


def test_contended_case_always_conflicts(world: World) -> None:
    for _ in range(3):
        version = world.case_facts(CRED, "tenant-a", "user-42", "case-contended")["version"]
        with pytest.raises(VersionConflict):
            add(world, "case-contended", version=version)
    assert world.ledger() == []


def test_repeated_idempotency_key_writes_once(world: World) -> None:
    first = add(world, key="same")
    # A retry of the same intent: same key, the version it saw before is stale now.
    second = add(world, key="same", version=1)
    assert first == second
    assert len(world.ledger()) == 1
    assert world.invocations == 2
    assert world.find_note(CRED, "tenant-a", "same") == first
    assert world.find_note(CRED, "tenant-a", "other") is None
    assert world.find_note(CRED, "tenant-b", "same") is None


def test_ledger_entry_records_the_write(world: World) -> None:
    add(world, note="hello", key="k1")
    assert world.ledger() == [
        {
            "case_id": "case-123",
            "tenant": "tenant-a",
            "actor": "user-42",
            "note_digest": digest_bytes(b"hello"),
            "intent_id": "intent-1",
            "idempotency_key": "k1",
            "note_id": "note-000001",
            "at": NOW.isoformat(),
        }
    ]
    out = io.StringIO()
    print_ledger(world.directory, Output(json=True, stdout=out))
    assert [json.loads(line) for line in out.getvalue().splitlines()] == world.ledger()


def test_credential_never_on_disk_or_returned(world: World) -> None:
    returned = [
        add(world, key="k1"),
        world.case_facts(CRED, "tenant-a", "user-42", "case-123"),
        world.find_note(CRED, "tenant-a", "k1"),
        world.ledger(),
    ]
    with pytest.raises(VersionConflict) as caught:
        add(world, key="k2", version=1)
    assert CRED not in json.dumps(returned)
    assert CRED not in str(caught.value)
    for path in world.directory.iterdir():
        assert CRED.encode() not in path.read_bytes(), path.name


def test_invocations_are_shared_between_instances(world: World) -> None:
    other = World(world.directory)
    add(world, key="k1")
    with pytest.raises(VersionConflict):
        add(other, key="k2", version=1)
    add(other, key="k3", version=2)
    assert world.invocations == other.invocations == 3
    assert len(world.ledger()) == 2
    assert world.case_facts(CRED, "tenant-a", "user-42", "case-123")["version"] == 3


def _conflicting_writes(directory: str, n: int) -> None:
    world = World(directory)
    for i in range(n):
        with contextlib.suppress(VersionConflict):
            world.add_note(CRED, "tenant-a", "user-42", "case-contended", "x", 1, f"k{i}", "i")


def test_processes_share_the_world_without_lost_updates(world: World) -> None:
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=3) as pool:
        list(pool.map(_conflicting_writes, [str(world.directory)] * 3, [20] * 3))
    assert world.invocations == 60
    # Every call moved the contended case's version once: no read-modify-write was lost.
    assert world.case_facts(CRED, "tenant-a", "user-42", "case-contended")["version"] == 61


# -- the adapter's own contract, without a broker -------------------------------------------


def test_adapter_contract_and_reason_codes() -> None:
    from lockgate.contracts.capability import Disclosure, EffectClass
    from lockgate.worlds.casenotes.adapter import CONTRACT, REASONS

    assert REASONS == (
        "argument.note.empty",
        "argument.note.too-long",
        "argument.note.invalid",
        "run.context.missing",
        "order.precondition.missing",
    )
    assert CONTRACT.name == "case.add_note"
    assert CONTRACT.effect_class is EffectClass.WRITE
    assert CONTRACT.context_arguments == ("case_id",)
    assert CONTRACT.argument_schema["required"] == ["note"]
    assert CONTRACT.argument_schema["additionalProperties"] is False
    assert CONTRACT.idempotency is not None and CONTRACT.idempotency.key_field == "intent_key"
    assert CONTRACT.query_by_identity
    assert CONTRACT.disclosure == {
        "argument.note.empty": Disclosure("rejected", "argument.note.empty", "note"),
        "argument.note.too-long": Disclosure("rejected", "argument.note.too-long", "note"),
    }


def test_settings_keep_the_credential_out_of_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    from lockgate.worlds.casenotes.adapter import CaseWorldSettings

    monkeypatch.setenv("LOCKGATE_CASE_WORLD_CREDENTIAL", "s3cret-from-env")
    monkeypatch.setenv("LOCKGATE_CASE_WORLD_DIR", "/tmp/elsewhere")
    settings = CaseWorldSettings()
    assert settings.credential.get_secret_value() == "s3cret-from-env"
    assert str(settings.dir) == "/tmp/elsewhere"
    assert "s3cret-from-env" not in repr(settings)
