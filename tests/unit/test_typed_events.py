"""Events are built with typed keyword fields: mypy --strict refuses a wrong one where it is built."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.intent.aggregate import EffectIntent, Stamp
from lockgate.testing.intents import T0, History

ROOT = Path(__file__).resolve().parents[2]

#: Each line marked ``# E: <code>`` must fail type checking with that error code (mypy
#: reports a call's unexpected or missing argument on its first line, a mistyped one on
#: the argument's own); every other line must pass.
CALL_SITES = '''
from datetime import UTC, datetime
from uuid import uuid4

from lockgate.contracts.vocabulary import Finding, Resolution
from lockgate.intent.aggregate import EffectIntent, Stamp


def build(intent: EffectIntent, stamp: Stamp) -> None:
    EffectIntent.AttemptSent.next(intent, stamp, attempt_id="a1")
    EffectIntent.AttemptSent.next(intent, stamp, atempt_id="a1")  # E: call-arg
    EffectIntent.AttemptSent.next(intent, stamp)  # E: call-arg
    EffectIntent.AttemptSent.next(intent, stamp, attempt_id=1)  # E: arg-type
    EffectIntent.AttemptSent.next(intent, stamp, "a1")  # E: call-arg
    EffectIntent.AttemptSent.next(intent, attempt_id="a1")  # E: call-arg
    EffectIntent.Reconciled.next(
        intent, stamp, attempt_id="a1", finding=Finding.CONFIRMED, receipt={}, by="ops",
        why="seen", resolution=Resolution.COMPLETED)
    EffectIntent.Reconciled.next(
        intent, stamp, attempt_id="a1", finding="confirmed", receipt={}, by="ops",  # E: arg-type
        why="seen", resolution=Resolution.COMPLETED)
    EffectIntent.ProcessingAbandoned(
        uuid4(), 2, datetime.now(UTC), "e", "run-1", "c", durable="d", trigger="t",
        cause="x", deliveries=1)
    EffectIntent.ProcessingAbandoned(  # E: call-arg
        uuid4(), 2, datetime.now(UTC), "e", "run-1", "c", durable="d", trigger="t",
        cause="x", delivery=1)
'''


def expected_errors(source: str) -> dict[int, str]:
    return {n: m.group(1) for n, line in enumerate(source.splitlines(), 1)
            if (m := re.search(r"# E: ([a-z-]+)", line))}


def test_a_wrong_field_fails_type_checking_where_the_event_is_built(tmp_path: Path) -> None:
    source = tmp_path / "call_sites.py"
    source.write_text(CALL_SITES)
    # In a process of its own: mypy raises the interpreter's recursion limit for good,
    # which would change what other tests in this session can encode.
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--show-error-codes",
         "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
         str(source)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )
    out, err = checked.stdout, checked.stderr
    reported: dict[int, set[str]] = {}
    for line in out.splitlines():
        found = re.match(rf"{re.escape(str(source))}:(\d+): error: .*\[([a-z-]+)\]$", line)
        if found:
            reported.setdefault(int(found.group(1)), set()).add(found.group(2))
    expected = expected_errors(CALL_SITES)
    assert {n: {code} for n, code in expected.items()} == reported, out + err


def test_next_refuses_an_event_that_creates_an_intent() -> None:
    """Its envelope has the aggregate's topic in it: it follows nothing."""
    h = History()
    with pytest.raises(TypeError, match="creates an intent"):
        EffectIntent.CandidateRejected.next(
            h.intent, Stamp(now=T0, event_id="e", causation_id="c"), tenant="t")


def test_next_fills_the_envelope_from_the_state_and_the_stamp() -> None:
    h = History().normalized()
    event = EffectIntent.Withdrawn.next(
        h.intent, Stamp(now=T0, event_id="e9", causation_id="c9", offset=2), by="ops", why="no")
    assert (event.originator_id, event.originator_version, event.timestamp) == (
        h.intent.id, h.intent.version + 2, T0)
    assert (event.event_id, event.correlation_id, event.causation_id) == ("e9", "run-1", "c9")
    assert (event.by, event.why) == ("ops", "no")
