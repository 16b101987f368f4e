"""A decision's recorded history read back: ``HistoryFacts.from_context`` is ``context()``'s
inverse, so a counterfactual decides on the very ``context.history`` the decision read."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.authz.history import (
    CLASSES,
    MAX_TOTAL,
    NO_HISTORY,
    WINDOWS,
    HistoryFacts,
    Window,
)

names = st.frozensets(st.text(min_size=1, max_size=12), max_size=4)
counts = st.fixed_dictionaries({c: st.integers(0, 10_000) for c in CLASSES})
windows = st.builds(Window, counts, st.integers(0, 2 * MAX_TOTAL))
facts = st.builds(
    HistoryFacts, executed=names, refused=names, refused_counts=counts, data_classes_read=names,
    untrusted_from=names, destinations=names, approvals=st.integers(0, 100), run=windows,
    windows=st.dictionaries(st.sampled_from(sorted(WINDOWS)), windows))


@settings(derandomize=True, max_examples=200)
@given(facts)
def test_a_context_read_back_is_the_same_context(history: HistoryFacts) -> None:
    context = history.context()
    assert HistoryFacts.from_context(context).context() == context
    # As the record keeps it: JSON, through the event's codec.
    stored = msgspec.json.decode(msgspec.json.encode(context))
    assert HistoryFacts.from_context(stored).context() == context


def test_what_the_run_did_is_read_back_as_facts() -> None:
    history = HistoryFacts(executed=frozenset({"mail.read"}), untrusted_from=frozenset({"mail.read"}),
                           destinations=frozenset({"bob@example.com"}), approvals=1,
                           run=Window({**dict.fromkeys(CLASSES, 0), "read": 2}, 40))
    back = HistoryFacts.from_context(history.context())
    assert (back.executed, back.untrusted_from, back.destinations, back.approvals) == (
        history.executed, history.untrusted_from, history.destinations, 1)
    assert (back.run.counts["read"], back.run.amount) == (2, 40)


def test_no_recorded_history_reads_as_none() -> None:
    assert HistoryFacts.from_context({}).context() == NO_HISTORY.context()
