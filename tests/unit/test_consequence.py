"""How a consequence reads: deterministic, from the normalized request, the model's text kept as data."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockgate.contracts.consequence import SHOWN_MAX_CHARS, VALUE_MAX_CHARS, Consequence, render
from lockgate.worlds.casenotes.adapter import CONTRACT

RESOURCE = {"type": "case", "id": "case-123", "tenant": "tenant-a"}


def read(arguments: dict[str, object], consequence: Consequence | None = CONTRACT.consequence):
    return render(consequence, tool="case.add_note", actor="user-42",
                  destination="case-notes:tenant-a/case-123", arguments=arguments, resource=RESOURCE)


def test_the_demo_note_reads_as_what_will_happen_to_what_and_who_sees_it() -> None:
    r = read({"case_id": "case-123", "note": "Customer called back."})
    assert r.action == "Add a note to case case-123, as user-42; it cannot be edited afterwards"
    assert r.visible_to == "everyone with access to case case-123"
    assert r.shown == {"note": "Customer called back."}
    assert r.summary == f"{r.action}; visible to {r.visible_to}"


def test_a_model_value_in_a_sentence_is_quoted_cut_and_stripped() -> None:
    c = Consequence(action="Publish {args.title} in {resource.id}; {args.missing}")
    r = read({"title": "Q3\x1b[2J\u202eevil" + "x" * 200}, c)
    assert r.action.startswith("Publish “Q3 [2J evil")
    assert "\x1b" not in r.action and "\u202e" not in r.action
    assert r.action.endswith("” in case-123; (unknown)")
    assert len(r.action) < VALUE_MAX_CHARS + 40


def test_without_a_declared_consequence_every_argument_is_shown() -> None:
    r = read({"b": 2, "a": "one"}, None)
    assert r.action == "user-42 asks to case.add_note on case-notes:tenant-a/case-123"
    assert r.shown == {"a": "one", "b": "2"}


@given(st.dictionaries(st.sampled_from(["note", "case_id", "x"]), st.text(max_size=3000)))
def test_the_same_request_always_reads_the_same_and_stays_bounded(arguments: dict[str, str]) -> None:
    first, second = read(arguments), read(dict(reversed(list(arguments.items()))))
    assert first == second
    assert all(len(v) <= SHOWN_MAX_CHARS for v in first.shown.values())
    assert not any(ch in "".join(first.shown.values()) for ch in "\x00\x1b\u202e")
