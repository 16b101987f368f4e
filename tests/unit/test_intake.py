"""Intake: raw argument parsing and the decision on a candidate's shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Candidate, Catalogue, RunContext, Tool
from lockgate.intake.domain import Inputs, decide_candidate
from lockgate.intake.parsing import parse_arguments
from lockgate.intent.aggregate import EffectIntent

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONTRACT = CapabilityContract(
    name="case.add_note",
    description="Add a note.",
    argument_schema={
        "type": "object",
        "properties": {"note": {"type": "string"}},
        "required": ["note"],
        "additionalProperties": False,
    },
    context_arguments=("case_id",),
    max_argument_bytes=4096,
)
RUN = RunContext(run_id="run-1", tenant="tenant-a", actor="user-42", context={"case_id": "case-123"},
                 delegation=None, stage="default", opened_at=NOW)
CATALOGUE = Catalogue(tools=(Tool(CONTRACT.name, CONTRACT.description, CONTRACT.argument_schema),),
                      revisions={CONTRACT.name: CONTRACT.revision})


def decide(arguments: str, tool: str = "case.add_note", **over: object) -> EffectIntent.Event:
    c = Candidate(run_id="run-1", turn_id="turn-1", call_id="call-1", tool=tool, arguments=arguments)
    fields: dict[str, object] = dict(
        tenant="tenant-a", candidate=c, raw_size_bytes=len(arguments), run=RUN,
        catalogue_digest="sha256:cat", catalogue=CATALOGUE, contract=CONTRACT,
        max_candidate_bytes=65536, message_id="run-1.call-1",
    )
    fields.update(over)
    return decide_candidate(Inputs(**fields), NOW)  # type: ignore[arg-type]


def rejected(event: object) -> tuple[str, str | None]:
    assert isinstance(event, EffectIntent.CandidateRejected), event
    return event.reason, event.field


def test_duplicate_keys_are_found_at_any_depth() -> None:
    assert parse_arguments('{"a": {"b": 1, "b": 2}}').reason == "tool.arguments.duplicate"
    assert parse_arguments('{"note":"a","note":"b"}').reason == "tool.arguments.duplicate"


def test_non_json_constants_and_non_objects_are_malformed() -> None:
    for raw in ("NaN", '{"x": Infinity}', "[1]", '"note"', "{note: 1", "", "[" * 100_000):
        assert parse_arguments(raw).reason == "tool.arguments.malformed", raw


@settings(max_examples=200, derandomize=True)
@given(st.dictionaries(st.text(max_size=8), st.text(max_size=20) | st.integers(), max_size=6))
def test_any_object_with_unique_keys_parses_to_itself(value: dict[str, object]) -> None:
    assert parse_arguments(json.dumps(value)).value == value


@settings(max_examples=200, derandomize=True)
@given(st.text(max_size=200))
def test_parser_never_raises(raw: str) -> None:
    parsed = parse_arguments(raw)
    assert (parsed.value is None) == (parsed.reason is not None)


def test_valid_candidate_is_received_with_parsed_arguments() -> None:
    event = decide('{"note": "hi"}')
    assert isinstance(event, EffectIntent.CandidateReceived)
    assert event.arguments == {"note": "hi"}
    assert event.contract_revision == CONTRACT.revision
    assert event.actor == "user-42"  # from the run, never from the candidate


def test_the_same_candidate_decides_the_same_event_id() -> None:
    assert decide('{"note": "hi"}').event_id == decide('{"note": "hi"}').event_id


def test_reasons_for_bad_shapes() -> None:
    assert rejected(decide("{}")) == ("tool.arguments.missing-required", "note")
    assert rejected(decide('{"Note": "x"}')) == ("tool.arguments.missing-required", "note")
    assert rejected(decide('{"note": "x", "caseId": "c"}')) == ("tool.arguments.unexpected", "caseId")
    assert rejected(decide('{"note": 5}')) == ("tool.arguments.invalid", "note")
    assert rejected(decide('{"note": "a", "note": "b"}'))[0] == "tool.arguments.duplicate"
    assert rejected(decide('{"x": 1}', tool="case.export_all_notes"))[0] == "tool.unknown"


def test_size_limit_is_checked_before_parsing() -> None:
    big = '{"note": "' + "x" * 5000 + '"}'
    assert rejected(decide(big))[0] == "tool.arguments.too-large"
    assert rejected(decide('{"note":"x"}', raw_size_bytes=10**6))[0] == "tool.arguments.too-large"


def test_unknown_run_turn_and_changed_contract_are_rejected() -> None:
    assert rejected(decide('{"note":"x"}', run=None))[0] == "run.unknown"
    assert rejected(decide('{"note":"x"}', catalogue=None))[0] == "turn.unknown"
    changed = CapabilityContract(name="case.add_note", description="changed",
                                 argument_schema=CONTRACT.argument_schema)
    assert rejected(decide('{"note":"x"}', contract=changed))[0] == "tool.changed-since-turn"


def test_raw_bytes_are_kept_as_digest_and_size_not_text() -> None:
    event = decide('{"note": "secret-ish"}')
    assert event.raw_size_bytes == len('{"note": "secret-ish"}')
    assert event.raw_digest.startswith("sha256:")
