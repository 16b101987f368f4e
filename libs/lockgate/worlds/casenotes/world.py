"""A simulated case system: tenants, cases, actors, notes, and a ledger of every write.

The world lives in a directory so several processes (an adapter worker, a test, the
CLI) can share it: ``state.json`` holds everything and is the commit point,
``ledger.jsonl`` mirrors its ledger one JSON object per line. Both are replaced
atomically (write a temporary file, then rename) while an ``fcntl`` lock on
``.lock`` is held.

Demo seed (``World.seed``):

=================  =========  ==========================================================
case               tenant     state
=================  =========  ==========================================================
``case-123``       tenant-a   open
``case-closed``    tenant-a   closed
``case-frozen``    tenant-a   open, writes suspended
``case-contended`` tenant-a   open; its version moves before every write, as if a
                              concurrent writer always got there first, so every
                              conditional write to it is a version conflict
``case-sensitive`` tenant-a   open, sensitive: notes wait for a reviewer's approval
``case-load-NN``   tenant-a   open (``NN`` = 00..63), for load tests and benchmarks,
                              so concurrent notes need not contend for one version
``case-999``       tenant-b   open
=================  =========  ==========================================================

There is no ``case-404``. Actors: ``user-42`` (tenant-a, may add notes), ``user-13``
(tenant-a, may not), ``user-77`` (tenant-b, may). Every call presents the world's
credential (demo value ``DEMO_CREDENTIAL``); only its SHA-256 is stored, and neither
appears in the ledger or in anything returned.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from lockgate.core.canonical import digest_bytes
from lockgate.core.errors import LockgateError

DEMO_CREDENTIAL = "case-world-demo-secret-7f3a"
#: Open cases ``case-load-00`` .. for load tests, one per concurrent writer.
LOAD_CASES = 64

STATE_FILE = "state.json"
LEDGER_FILE = "ledger.jsonl"
LOCK_FILE = ".lock"

Clock = Callable[[], datetime]


class CaseWorldError(LockgateError):
    """Root of the case world's refusals; ``reason`` is the stable code."""

    reason = "case.error"

    def __init__(self, message: str) -> None:
        super().__init__(message, code=self.reason)


class InvalidCredential(CaseWorldError):
    """The caller did not present the world's credential."""

    reason = "case.credential-invalid"


class CaseNotFound(CaseWorldError):
    """No case has this id."""

    reason = "case.not-found"


class TenantMismatch(CaseWorldError):
    """The case belongs to another tenant."""

    reason = "case.tenant-mismatch"


class CaseClosed(CaseWorldError):
    """The case is closed; it takes no more notes."""

    reason = "case.closed"


class WritesSuspended(CaseWorldError):
    """Writes to the case are suspended."""

    reason = "case.writes-suspended"


class NotAuthorized(CaseWorldError):
    """The actor may not add notes to this case."""

    reason = "case.note.not-authorized"


class VersionConflict(CaseWorldError):
    """The case's version is not the one the write was conditional on."""

    reason = "case.version-conflict"


#: Every reason code the world can raise, for the test that lists them.
REASONS: tuple[str, ...] = tuple(
    cls.reason
    for cls in (
        InvalidCredential,
        CaseNotFound,
        TenantMismatch,
        CaseClosed,
        WritesSuspended,
        NotAuthorized,
        VersionConflict,
    )
)


def _demo_state(credential: str) -> dict[str, Any]:
    def case(tenant: str, status: str = "open", **flags: bool) -> dict[str, Any]:
        return {
            "tenant": tenant,
            "status": status,
            "writes_suspended": flags.get("writes_suspended", False),
            "contended": flags.get("contended", False),
            "sensitive": flags.get("sensitive", False),
            "version": 1,
        }

    return {
        "credential_sha256": _hash(credential),
        "cases": {
            "case-123": case("tenant-a"),
            "case-closed": case("tenant-a", "closed"),
            "case-frozen": case("tenant-a", writes_suspended=True),
            "case-contended": case("tenant-a", contended=True),
            "case-sensitive": case("tenant-a", sensitive=True),
            **{f"case-load-{n:02d}": case("tenant-a") for n in range(LOAD_CASES)},
            "case-999": case("tenant-b"),
        },
        "actors": {
            "user-42": {"tenant": "tenant-a", "may_add_note": True},
            "user-13": {"tenant": "tenant-a", "may_add_note": False},
            "user-77": {"tenant": "tenant-b", "may_add_note": True},
        },
        "notes": {},
        "keys": {},
        "ledger": [],
        "invocations": 0,
    }


def _hash(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


class World:
    """One case world on disk; every method takes the lock and re-reads the state."""

    def __init__(self, directory: Path | str, *, clock: Clock = _now) -> None:
        self.directory = Path(directory)
        self._clock = clock

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def seed(
        cls, directory: Path | str, *, credential: str = DEMO_CREDENTIAL, clock: Clock = _now
    ) -> World:
        """Write the demo seed into ``directory`` (replacing any state there) and open it."""
        world = cls(directory, clock=clock)
        world.directory.mkdir(parents=True, exist_ok=True)
        with world._locked():
            world._commit(_demo_state(credential))
        return world

    @classmethod
    def open_or_seed(
        cls, directory: Path | str, *, credential: str = DEMO_CREDENTIAL, clock: Clock = _now
    ) -> World:
        """Open the world in ``directory``, seeding it first when it has no state."""
        world = cls(directory, clock=clock)
        world.directory.mkdir(parents=True, exist_ok=True)
        with world._locked():
            if not (world.directory / STATE_FILE).exists():
                world._commit(_demo_state(credential))
        return world

    # -- operations --------------------------------------------------------------------

    def case_facts(self, credential: str, tenant: str, actor: str, case_id: str) -> dict[str, Any]:
        """Return what is true of the case now, as seen by ``actor`` of ``tenant``.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._locked():
            state = self._read()
            self._authenticate(state, credential)
            case = state["cases"].get(case_id)
            if case is None:
                return {
                    "exists": False,
                    "tenant": "",
                    "status": "",
                    "writes_suspended": False,
                    "version": 0,
                    "actor_may_add_note": False,
                    "sensitive": False,
                }
            return {
                "exists": True,
                "tenant": case["tenant"],
                "status": case["status"],
                "writes_suspended": case["writes_suspended"],
                "version": case["version"],
                "actor_may_add_note": _may_add_note(state, tenant, actor, case),
                "sensitive": bool(case.get("sensitive", False)),
            }

    def add_note(
        self,
        credential: str,
        tenant: str,
        actor: str,
        case_id: str,
        note: str,
        expected_version: int,
        idempotency_key: str,
        intent_id: str,
    ) -> dict[str, str]:
        """Add ``note`` to the case if its version is still ``expected_version``.

        A repeated ``idempotency_key`` (per tenant) returns the original note's receipt
        and writes nothing.

        Returns:
            The receipt: ``note_id``, ``case_id``, ``version`` (after the write), as strings.

        Raises:
            InvalidCredential, CaseNotFound, TenantMismatch, NotAuthorized, CaseClosed,
            WritesSuspended, VersionConflict: nothing was written.
        """
        with self._locked():
            state = self._read()
            # Every call counts, failed ones too: tests count how often the world was reached.
            state["invocations"] += 1
            try:
                receipt = self._add_note(
                    state, credential, tenant, actor, case_id, note, expected_version,
                    idempotency_key, intent_id,
                )
            finally:
                self._commit(state)
            return receipt

    def _add_note(
        self,
        state: dict[str, Any],
        credential: str,
        tenant: str,
        actor: str,
        case_id: str,
        note: str,
        expected_version: int,
        idempotency_key: str,
        intent_id: str,
    ) -> dict[str, str]:
        self._authenticate(state, credential)
        existing = state["keys"].get(_key(tenant, idempotency_key))
        if existing is not None:
            return _receipt(state["notes"][existing])
        case = state["cases"].get(case_id)
        if case is None:
            raise CaseNotFound(f"no case {case_id!r}")
        if case["tenant"] != tenant:
            raise TenantMismatch(f"case {case_id!r} is not in tenant {tenant!r}")
        if not _may_add_note(state, tenant, actor, case):
            raise NotAuthorized(f"{actor!r} may not add notes to {case_id!r}")
        if case["status"] != "open":
            raise CaseClosed(f"case {case_id!r} is {case['status']}")
        if case["writes_suspended"]:
            raise WritesSuspended(f"writes to case {case_id!r} are suspended")
        if case["contended"]:
            case["version"] += 1  # the concurrent writer that always wins
        if case["version"] != expected_version:
            raise VersionConflict(
                f"case {case_id!r} is at version {case['version']}, not {expected_version}"
            )
        case["version"] += 1
        note_id = f"note-{len(state['notes']) + 1:06d}"
        record = {
            "note_id": note_id,
            "case_id": case_id,
            "tenant": tenant,
            "version": case["version"],
            "text": note,
        }
        state["notes"][note_id] = record
        state["keys"][_key(tenant, idempotency_key)] = note_id
        state["ledger"].append(
            {
                "case_id": case_id,
                "tenant": tenant,
                "actor": actor,
                "note_digest": digest_bytes(note.encode()),
                "intent_id": intent_id,
                "idempotency_key": idempotency_key,
                "note_id": note_id,
                "at": self._clock().isoformat(),
            }
        )
        return _receipt(record)

    def find_note(self, credential: str, tenant: str, idempotency_key: str) -> dict[str, str] | None:
        """Return the receipt of the note written with this key, or None.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._locked():
            state = self._read()
            self._authenticate(state, credential)
            note_id = state["keys"].get(_key(tenant, idempotency_key))
            return None if note_id is None else _receipt(state["notes"][note_id])

    # -- inspection (tests, CLI) -------------------------------------------------------

    def ledger(self) -> list[dict[str, str]]:
        """Return every write the world accepted, oldest first."""
        with self._locked():
            return list(self._read()["ledger"])

    @property
    def invocations(self) -> int:
        """How many times ``add_note`` was called, by any process, failed calls included."""
        with self._locked():
            return int(self._read()["invocations"])

    def notes(self, case_id: str) -> list[str]:
        """Return the texts of the notes on a case, oldest first."""
        with self._locked():
            notes = self._read()["notes"].values()
            return [n["text"] for n in notes if n["case_id"] == case_id]

    # -- storage -----------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.directory / LOCK_FILE, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        path = self.directory / STATE_FILE
        try:
            state: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no case world in {self.directory} (seed it first)") from None
        return state

    def _commit(self, state: dict[str, Any]) -> None:
        _replace(self.directory / STATE_FILE, json.dumps(state, sort_keys=True, indent=1))
        lines = "".join(json.dumps(entry, sort_keys=True) + "\n" for entry in state["ledger"])
        _replace(self.directory / LEDGER_FILE, lines)

    @staticmethod
    def _authenticate(state: dict[str, Any], credential: str) -> None:
        if not hmac.compare_digest(_hash(credential), state["credential_sha256"]):
            raise InvalidCredential("the case world refused the credential")


def _may_add_note(state: dict[str, Any], tenant: str, actor: str, case: dict[str, Any]) -> bool:
    who = state["actors"].get(actor)
    return bool(
        who is not None
        and who["tenant"] == tenant == case["tenant"]
        and who["may_add_note"]
    )


def _key(tenant: str, idempotency_key: str) -> str:
    return f"{tenant}/{idempotency_key}"


def _receipt(note: dict[str, Any]) -> dict[str, str]:
    return {"note_id": note["note_id"], "case_id": note["case_id"], "version": str(note["version"])}


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: readers see the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def print_ledger(directory: Path | str, out: TextIO | None = None) -> None:
    """Print each ledger entry of the world in ``directory`` as one JSON line."""
    stream = out if out is not None else sys.stdout
    for entry in World(directory).ledger():
        stream.write(json.dumps(entry, sort_keys=True) + "\n")
