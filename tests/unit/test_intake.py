"""Intake: raw argument parsing and the decision on a candidate's shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Candidate, Catalogue, RunContext, Tool
from lockgate.contracts.subjects import (
    INVALID_RUN,
    UNROUTABLE_TENANT,
    capability_key,
    parse_propose_subject,
    propose_subject,
)
from lockgate.core.ids import call_digest, candidate_digest, is_subject_token, reused_call_id_intent
from lockgate.intake.domain import Inputs, Read, decide_candidate, read_candidate, reused, same_call
from lockgate.intake.parsing import (
    MAX_ARGUMENTS_DEPTH,
    decode_candidate,
    nesting_within,
    parse_arguments,
)
from lockgate.intent.codec import fold
from lockgate.intent.events import CandidateReceived, CandidateRejected, Event

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


def decide(arguments: str, tool: str = "case.add_note", candidate: dict[str, object] | None = None,
           **over: object) -> Event:
    c = Candidate(run_id="run-1", turn_id="turn-1", call_id="call-1", tool=tool, arguments=arguments,
                  **(candidate or {}))  # type: ignore[arg-type]
    fields: dict[str, object] = dict(
        tenant="tenant-a", candidate=c, raw_size_bytes=len(arguments), run=RUN,
        catalogue_digest="sha256:cat", catalogue=CATALOGUE, contract=CONTRACT,
        max_candidate_bytes=65536, message_id="run-1.call-1",
    )
    fields.update(over)
    return decide_candidate(Inputs(**fields), NOW)  # type: ignore[arg-type]


def rejected(event: object) -> tuple[str, str | None]:
    assert isinstance(event, CandidateRejected), event
    return event.reason, event.field


def test_duplicate_keys_are_found_at_any_depth() -> None:
    assert parse_arguments('{"a": {"b": 1, "b": 2}}').reason == "tool.arguments.duplicate"
    assert parse_arguments('{"note":"a","note":"b"}').reason == "tool.arguments.duplicate"


def test_non_json_constants_and_non_objects_are_malformed() -> None:
    for raw in ("NaN", '{"x": Infinity}', "[1]", '"note"', "{note: 1", "", '{"x": 1e999}',
                '{"x": 9007199254740993}', r'{"note": "\ud800"}', r'{"note": "\udc00x"}'):
        assert parse_arguments(raw).reason == "tool.arguments.malformed", raw
    assert parse_arguments(r'{"note": "\ud83d\ude00"}').value == {"note": "\U0001f600"}


def test_nesting_is_bounded_before_parsing() -> None:
    for raw in ("[" * 100_000, '{"a":' * 10_000 + "1" + "}" * 10_000,
                '{"a": ' + "[" * (MAX_ARGUMENTS_DEPTH + 1) + "]" * (MAX_ARGUMENTS_DEPTH + 1) + "}"):
        assert parse_arguments(raw).reason == "tool.arguments.too-deep"
    ok = '{"a": ' + "[" * (MAX_ARGUMENTS_DEPTH - 1) + "]" * (MAX_ARGUMENTS_DEPTH - 1) + "}"
    assert parse_arguments(ok).value is not None
    # Brackets inside strings do not nest.
    assert parse_arguments(json.dumps({"note": "[" * 10_000})).value == {"note": "[" * 10_000}


@settings(max_examples=200, derandomize=True)
@given(st.recursive(st.none() | st.integers(-9, 9) | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=40),
       st.integers(1, 12))
def test_the_nesting_bound_never_refuses_what_is_within_it(value: object, limit: int) -> None:
    text = json.dumps(value).encode()

    def depth(v: object) -> int:
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        return 0

    if depth(value) <= limit:
        assert nesting_within(text, limit)
    if nesting_within(text, limit):
        assert depth(value) <= 2 * limit


def test_envelopes_of_any_shape_are_read_never_raised() -> None:
    deep = b'{"run_id":"r","turn_id":"t","call_id":"c","tool":"x","arguments":"{}","provider_item":' \
        + b'{"a":' * 10_000 + b"1" + b"}" * 10_001
    for data in (deep, b"\xff\xfe", b'{"run_id":"\\ud800"}', b"", b"[]" * 1000, b"null"):
        decoded = decode_candidate(data)
        assert decoded.candidate is None and decoded.detail, data[:40]


@settings(max_examples=200, derandomize=True)
@given(st.dictionaries(st.text(max_size=8),
                       st.text(max_size=20) | st.integers(-(2**53 - 1), 2**53 - 1), max_size=6))
def test_any_object_with_unique_keys_parses_to_itself(value: dict[str, object]) -> None:
    assert parse_arguments(json.dumps(value)).value == value


@settings(max_examples=200, derandomize=True)
@given(st.text(max_size=200))
def test_parser_never_raises(raw: str) -> None:
    parsed = parse_arguments(raw)
    assert (parsed.value is None) == (parsed.reason is not None)


def test_valid_candidate_is_received_with_parsed_arguments() -> None:
    event = decide('{"note": "hi"}')
    assert isinstance(event, CandidateReceived)
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


def test_unknown_run_and_turn_are_rejected() -> None:
    assert rejected(decide('{"note":"x"}', run=None))[0] == "run.unknown"
    assert rejected(decide('{"note":"x"}', catalogue=None))[0] == "turn.unknown"


def test_a_call_is_judged_against_its_turn_even_when_the_capability_changed_since() -> None:
    """Valid against the schema the turn offered: received at the turn's revision, which
    normalization then finds is no longer current (``capability.changed``)."""
    changed = CapabilityContract(name="case.add_note", description="changed",
                                 argument_schema={"type": "object", "properties": {}})
    event = decide('{"note":"x"}', contract=changed)
    assert isinstance(event, CandidateReceived)
    assert event.contract_revision == CONTRACT.revision != changed.revision
    assert rejected(decide('{"note": 5}', contract=None)) == ("tool.arguments.invalid", "note")


def test_a_tool_that_exists_but_was_not_offered_is_not_offered_not_unknown() -> None:
    withheld = Catalogue(tools=(), revisions={}, withheld={"case.add_note": "not offered in stage 'x'"})
    reason, _ = rejected(decide('{"note":"x"}', catalogue=withheld, known_tool=True))
    assert reason == "tool.not-offered"
    assert rejected(decide('{"note":"x"}', catalogue=withheld))[0] == "tool.unknown"


def test_the_raw_text_is_kept_exactly_and_bounded() -> None:
    text = '{"note": "secret-ish",  "note": "twice"}'
    event = decide(text)
    assert rejected(event)[0] == "tool.arguments.duplicate"
    assert event.raw_arguments == text  # rejections keep it: evaluation evidence
    assert event.raw_size_bytes == len(text) and event.raw_digest.startswith("sha256:")
    big = '{"note": "' + "é" * 20_000 + '"}'
    kept = decide(big, max_candidate_bytes=10**6).raw_arguments
    assert len(kept.encode()) <= 16 * 1024 and big.startswith(kept)


def test_the_evidence_a_runtime_reports_is_kept_bounded() -> None:
    item = {"type": "tool_use", "id": "toolu_1", "name": "case.add_note", "input": {"note": "x"}}
    event = decide('{"note":"x"}', candidate=dict(provider="anthropic.messages", model="m-1",
                                                   provider_item=item))
    assert isinstance(event, CandidateReceived)
    assert (event.provider, event.model, event.provider_item) == ("anthropic.messages", "m-1", item)
    huge = {"blob": "x" * 20_000}
    kept = decide('{"note":"x"}', candidate=dict(provider_item=huge)).provider_item
    assert kept is not None and kept["truncated"] is True and kept["bytes"] > 20_000


@pytest.mark.parametrize("cause", ["stream.truncated", "stream.conflicting-delta", "stream.repeated-field",
                                   "stream.too-large", "stream.cancelled", "provider.unknown-item",
                                   "provider.item-malformed"])
def test_a_call_that_could_not_be_assembled_is_rejected_with_its_cause(cause: str) -> None:
    event = decide('{"note": "hal', candidate=dict(assembly_failure=cause))
    assert rejected(event)[0] == cause
    assert event.raw_arguments == '{"note": "hal'


def test_an_assembly_failure_outside_the_vocabulary_is_a_malformed_candidate() -> None:
    assert rejected(decide("{}", candidate=dict(assembly_failure="made.up")))[0] == "candidate.malformed"
    # ... and one that claims a cause cannot slip a complete call through
    assert rejected(decide('{"note":"x"}', candidate=dict(assembly_failure="")))[0] == "candidate.malformed"


def test_lineage_is_recorded_and_an_unknown_predecessor_refused() -> None:
    event = decide('{"note":"x"}', follows="f" * 32, follows_how="declared")
    assert isinstance(event, CandidateReceived)
    assert (event.follows, event.follows_how) == ("f" * 32, "declared")
    assert rejected(decide('{"note":"x"}', unknown_predecessor=True))[0] == "lineage.unknown-predecessor"


def test_a_candidate_message_is_read_whatever_its_subject_and_bytes() -> None:
    body = json.dumps({"run_id": "run-1", "turn_id": "t", "call_id": "c", "tool": "x",
                       "arguments": "{}"}).encode()
    ok = read_candidate("lg.propose.tenant-a.run-1", body, "m1")
    assert ok.problem is None and ok.candidate.call_id == "c" and ok.tenant == "tenant-a"
    assert ok.candidate_digest == call_digest(call_id="c", tool="x", arguments="{}", assembly_failure=None)
    assert ok.message_digest == candidate_digest(body)
    for subject, tenant in [("lg.propose.tenant-a.run-1.x", "tenant-a"), ("lg.propose.tenant-a", "tenant-a"),
                            ("lg.propose.té.run-1", UNROUTABLE_TENANT), ("lg.propose._x.run-1", UNROUTABLE_TENANT),
                            ("lg.propose.tenant-a._run", "tenant-a")]:
        read = read_candidate(subject, body, "m1")
        assert (read.problem, read.tenant, read.candidate.run_id) == ("candidate.malformed", tenant, INVALID_RUN)
    other_run = read_candidate("lg.propose.tenant-a.run-2", body, "m1")
    assert other_run.problem == "candidate.malformed" and other_run.candidate.run_id == "run-2"
    bad_call = body.replace(b'"call_id": "c"', b'"call_id": "c.1"')
    assert read_candidate("lg.propose.tenant-a.run-1", bad_call, "m1").problem == "candidate.malformed"
    # The stand-in's call id is a token derived from the message, whatever the message id.
    odd = read_candidate("lg.propose.tenant-a.run-1", b"\xff", "id with spaces.and dots\ud800")
    assert odd.problem and is_subject_token(odd.candidate.call_id)


def test_a_tool_name_outside_the_grammar_is_refused_before_any_lookup() -> None:
    for tool in ("case add_note", "case.add_note.", "caśe.add_note", "a" * 5000, "a.b.c.d.e", "Case.x"):
        assert rejected(decide('{"note":"x"}', tool=tool)) == ("tool.name-invalid", None)
    event = decide('{"note":"x"}', tool="a" * 5000)
    assert len(event.tool) == 200  # type: ignore[attr-defined]


def test_other_bytes_under_a_call_id_are_not_the_same_call() -> None:
    def read(**fields: Any) -> Read:
        body = {"run_id": "run-1", "turn_id": "turn-1", "call_id": "call-1", "tool": "case.add_note",
                "arguments": '{"note": "hi"}'} | fields
        return read_candidate("lg.propose.tenant-a.run-1", json.dumps(body).encode(), "m1")

    proposed = read()
    first = decide('{"note": "hi"}', candidate_digest=proposed.candidate_digest)
    intent = fold([first])
    assert intent is not None
    # The same call, resumed in a later turn with its provider item rebuilt.
    later = read(turn_id="turn-9", provider_item={"id": "call-1", "attempt": 2}, model="m")
    assert same_call(intent, later.candidate, later)
    # Another argument text (one space) or another tool under the call id: not the same call.
    for other in (read(arguments='{"note":  "hi"}'), read(tool="case.close")):
        assert not same_call(intent, other.candidate, other)
    # Recorded while the whole message was digested: that digest still identifies it.
    legacy = fold([decide('{"note": "hi"}', candidate_digest=proposed.message_digest)])
    assert legacy is not None and same_call(legacy, proposed.candidate, proposed)
    assert not same_call(legacy, later.candidate, later)

    c = read(arguments='{"note": "other"}').candidate
    inputs = Inputs(tenant="tenant-a", candidate=c, raw_size_bytes=10, run=RUN, catalogue_digest=None,
                    catalogue=None, contract=None, max_candidate_bytes=65536, message_id="m2",
                    candidate_digest="sha256:two", intent_id=reused_call_id_intent(
                        "tenant-a", "run-1", "call-1", "sha256:two"))
    refusal = reused(inputs, intent, NOW)
    assert rejected(refusal) == ("proposal.call-id-reused", None)
    assert refusal.originator_id.hex == inputs.intent_id != intent.intent_id
    assert refusal.call_id == "call-1"  # type: ignore[attr-defined]


def test_subject_builders_refuse_what_is_not_a_token() -> None:
    assert propose_subject("tenant-a", "run-1") == "lg.propose.tenant-a.run-1"
    for bad in ("a.b", "a b", "*", ">", "", "x" * 65):
        with pytest.raises(ValueError):
            propose_subject("tenant-a", bad)
    for bad in ("a b", "*", "a.>", "", "a.", ".a", "A.b", "x" * 129, "a.b.c.d.e"):
        with pytest.raises(ValueError):
            capability_key(bad)
    assert capability_key("case.add_note") == "case.add_note"
    assert parse_propose_subject("lg.propose.tenant-a.run-1") == ("tenant-a", "run-1", True)
