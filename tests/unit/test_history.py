"""The run's history as policy facts (``lockgate.authz.history``): the pure documents and
their changes, what one effect is (destinations, amounts, untrusted destinations), where a
bundle reads the history, and a case table's stated history.

Every change may be told again (a redelivered admission, authorization or end): each test
that tells one twice checks that the facts a policy reads count it once.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import cedarpy
import pytest

from lockgate.authz.cases import CaseError, load_cases, stated_history
from lockgate.authz.engine import HistoryScope, PolicyBundle, merge_schema_fragments
from lockgate.authz.history import (
    EXECUTED,
    MAX_AMOUNT,
    MAX_NAMES,
    MAX_TOTAL,
    NO_HISTORY,
    NOTHING,
    REFUSED,
    Authorized,
    Held,
    HistoryFacts,
    RunRecord,
    Tally,
    amount_of,
    authorize_in_run,
    destinations_of,
    end_in_run,
    hold,
    settle,
    untrusted,
)
from lockgate.runtime.ports.history import run_key, window_key

REPO = Path(__file__).resolve().parents[2]
SEND = Held("mail.send", "publish")
PAY = Held("bank.pay", "publish", amount=700)


def admitted(record: RunRecord, intent_id: str, held: Held) -> RunRecord:
    """``record`` with ``intent_id`` held, as the port admits it."""
    return RunRecord(**{**{f: getattr(record, f) for f in record.__struct_fields__},
                        "tally": hold(record.tally, intent_id, held)})


def authorized(intent_id: str = "i1", *, capability: str = "mail.read", effect_class: str = "read",
               outside: bool = True, data_classes: tuple[str, ...] = ("mail",),
               destinations: tuple[str, ...] = (), approved: bool = False) -> Authorized:
    return Authorized(intent_id, capability, effect_class, outside, data_classes, destinations, approved)


# -- held, settled, ended ------------------------------------------------------------------


def test_a_hold_told_twice_holds_once() -> None:
    tally = hold(hold(Tally(), "i1", PAY), "i1", PAY)
    assert list(tally.held) == ["i1"]
    assert HistoryFacts.of(RunRecord(tally=tally)).context()["run"]["amount"] == 700


def test_an_end_told_twice_counts_once_and_a_late_hold_does_not_come_back() -> None:
    tally = settle(settle(hold(Tally(), "i1", PAY), "i1", EXECUTED), "i1", EXECUTED)
    assert tally.counts["publish"] == 1 and tally.amount == 700 and tally.held == {}
    again = hold(tally, "i1", PAY)  # the admission redelivered after its end
    assert again.held == {} and HistoryFacts.of(RunRecord(tally=again)).run.amount == 700


@pytest.mark.parametrize(("ended", "executed", "refused"), [
    (EXECUTED, ["mail.send"], []), (NOTHING, [], []), (REFUSED, [], ["mail.send"]),
])
def test_an_end_executed_nothing_or_refused(ended: str, executed: list[str], refused: list[str]) -> None:
    record = admitted(RunRecord(), "i1", SEND)
    for _ in range(2):  # redelivered
        record = end_in_run(record, "i1", "mail.send", "publish", ended)
    history = HistoryFacts.of(record).context()
    assert history["executed"] == executed and history["refused"] == refused
    assert history["run"]["publish"] == (1 if ended == EXECUTED else 0)
    assert history["refused_count"]["publish"] == (1 if ended == REFUSED else 0)
    assert record.tally.held == {}


def test_a_decision_does_not_see_its_own_hold_but_sees_the_others() -> None:
    record = admitted(admitted(RunRecord(), "mine", PAY), "theirs", Held("bank.pay", "publish", 300))
    facts = HistoryFacts.of(record, exclude="mine")
    assert facts.run.amount == 300 and facts.run.counts["publish"] == 1
    assert HistoryFacts.of(record, exclude="theirs").run.amount == 700
    assert HistoryFacts.of(record).run.amount == 1000


def test_windows_are_read_as_given_and_empty_when_not() -> None:
    hour = settle(hold(Tally(), "i0", SEND), "i0", EXECUTED)
    hour = hold(hour, "mine", SEND)
    history = HistoryFacts.of(None, {"actor_hour": hour}, exclude="mine").context()
    assert history["actor_hour"]["publish"] == 1 and history["actor_hour"]["effects"] == 1
    assert history["actor_day"] == history["tenant_day"] == NO_HISTORY.context()["run"]
    assert history["run"]["effects"] == 0


def test_window_keys_change_with_the_clock_hour_and_day_and_keep_keys_clean() -> None:
    at = datetime(2026, 1, 1, 10, 59, 59, tzinfo=UTC)
    later = datetime(2026, 1, 1, 11, 0, 0, tzinfo=UTC)
    assert window_key("actor_hour", "t", "a", at) != window_key("actor_hour", "t", "a", later)
    assert window_key("actor_day", "t", "a", at) == window_key("actor_day", "t", "a", later)
    assert window_key("actor_hour", "t", "a", at) != window_key("actor_hour", "t", "b", at)
    assert window_key("tenant_hour", "t", "a", at) == window_key("tenant_hour", "t", "b", at)
    # A run id or actor with a subject's wildcards or separators stays one token of the key.
    assert run_key("t", "r.>*") == "history.t.run.r___"
    assert window_key("actor_hour", "t", "a.b", at).count(".") == 4


def test_a_total_past_cedars_integers_reads_as_the_largest_one() -> None:
    tally = Tally(amount=2**70)
    assert HistoryFacts.of(RunRecord(tally=tally)).context()["run"]["amount"] == MAX_TOTAL
    assert MAX_TOTAL + MAX_AMOUNT < 2**63  # a policy's sum of both stays a Cedar Long


# -- authorized ------------------------------------------------------------------------------


def test_an_outside_read_marks_the_run_untrusted_and_adds_its_data_classes_once() -> None:
    record = RunRecord()
    for _ in range(2):
        record = authorize_in_run(record, authorized("i1"))
    history = HistoryFacts.of(record).context()
    assert history["untrusted"] is True and history["untrusted_from"] == ["mail.read"]
    assert history["data_classes_read"] == ["mail"] and history["destinations"] == []


def test_a_read_from_inside_leaves_the_run_trusted() -> None:
    record = authorize_in_run(RunRecord(), authorized(outside=False))
    assert HistoryFacts.of(record).context()["untrusted"] is False


def test_a_write_adds_its_destinations_not_data_classes_and_an_approval_counts_once() -> None:
    send = authorized("i2", capability="mail.send", effect_class="publish", outside=False,
                      destinations=("bob@example.com",), approved=True)
    record = authorize_in_run(authorize_in_run(RunRecord(), send), send)
    history = HistoryFacts.of(record).context()
    assert history["destinations"] == ["bob@example.com"] and history["data_classes_read"] == []
    assert history["approvals"] == 1


def test_the_sets_keep_their_first_names_only() -> None:
    record = RunRecord()
    for n in range(MAX_NAMES + 10):
        record = authorize_in_run(record, authorized(f"i{n}", capability=f"read.{n}",
                                                     data_classes=(f"class-{n}",)))
        record = end_in_run(record, f"i{n}", f"read.{n}", "read", REFUSED)
    assert len(record.untrusted_from) == len(record.data_classes_read) == MAX_NAMES
    assert len(record.refused_capabilities) == MAX_NAMES and "read.0" in record.untrusted_from
    assert len(record.authorized) <= MAX_NAMES and len(record.tally.settled) <= MAX_NAMES
    assert record.refused["read"] == MAX_NAMES + 10  # counts are not bounded, only names


# -- what one effect is ----------------------------------------------------------------------


def test_destinations_are_texts_or_lists_of_texts_once_each() -> None:
    arguments = {"to": ["bob@example.com", "", None, "bob@example.com"], "cc": "eve@example.com"}
    assert destinations_of(arguments, ("to", "cc", "absent")) == ("bob@example.com", "eve@example.com")


@pytest.mark.parametrize(("value", "amount"), [
    (None, 0), (700, 700), ("700", 700), (12.01, 13), ("12.5", 13), (0, 0),
    (-500, 0), ("-500", 0), (-1e300, 0),                        # never lowers the total
    (True, MAX_AMOUNT), (False, MAX_AMOUNT), ("5,000", MAX_AMOUNT), ("lots", MAX_AMOUNT),
    (math.nan, MAX_AMOUNT), ("NaN", MAX_AMOUNT), (math.inf, MAX_AMOUNT), ("-inf", MAX_AMOUNT),
    ("1e400", MAX_AMOUNT), (10**30, MAX_AMOUNT), ({"value": 1}, MAX_AMOUNT), ([700], MAX_AMOUNT),
])
def test_a_hostile_amount_never_counts_for_less_than_it_may_be(value: object, amount: int) -> None:
    assert amount_of({"amount": value}, "amount") == amount


def test_no_amount_argument_is_no_amount() -> None:
    assert amount_of({"amount": 700}, None) == 0 and amount_of({}, "amount") == 0


def test_a_negative_amount_does_not_make_room_under_a_total() -> None:
    tally = hold(hold(Tally(), "i1", PAY), "i2", Held("bank.pay", "publish",
                                                     amount_of({"amount": -10_000}, "amount")))
    assert HistoryFacts.of(RunRecord(tally=tally)).run.amount == 700


TASK = 'Pay the rent to alice@example.com and tell "Bob" <bob@example.com>; IBAN DE89 3704 0044.'


@pytest.mark.parametrize(("destination", "named"), [
    ("alice@example.com", True), ("ALICE@Example.COM", True), ("bob@example.com", True),
    ("DE89 3704 0044", True), ("de89  3704", True),
    ("e@example.com", False), ("example.com", False), ("ice@example.com", False),
    ("DE89 37", False), ("3704 0044 99", False), ("mallory@example.com", False), ("   ", False),
])
def test_a_destination_is_trusted_only_when_the_context_names_it_whole(destination: str, named: bool) -> None:
    assert untrusted([destination], [TASK, ""]) == (() if named else (destination,))


def test_destinations_without_a_trusted_context_are_all_untrusted() -> None:
    assert untrusted(["bob@example.com", "x"], []) == ("bob@example.com", "x")


# -- where a bundle reads the history ----------------------------------------------------------

FRAGMENT = """
namespace Lockgate {
  entity Account;
  action "mail.send" appliesTo { principal: [Actor], resource: [Account], context: Context, };
  action "mail.send::unattended" in ["unattended"] appliesTo {
    principal: [Actor], resource: [Account], context: Context, };
  action "mail.read" appliesTo { principal: [Actor], resource: [Account], context: Context, };
  action "mail.read::unattended" in ["unattended"] appliesTo {
    principal: [Actor], resource: [Account], context: Context, };
}
"""


def bundle(policies: str) -> PolicyBundle:
    schema = (REPO / "deploy" / "policies" / "lockgate.cedarschema").read_text()
    return PolicyBundle.from_text(policies, merge_schema_fragments([schema, FRAGMENT]))


def scopes(policies: str) -> tuple[HistoryScope, ...]:
    return HistoryScope.of(json.loads(cedarpy.policies_to_json_str(policies)))


def test_a_bundle_without_history_policies_reads_none() -> None:
    b = bundle('@id("small") permit (principal, action, resource) when { context.amount < 10 };\n'
               "// context.history.untrusted is only a comment here\n")
    assert not b.uses_history and b.history_for("mail.send", "Account") == (False, False)


SEND_ONLY = ('@id("send") permit (principal, action == Lockgate::Action::"mail.send",'
             " resource is Lockgate::Account) when { !context.history.untrusted };\n"
             '@id("rest") permit (principal, action, resource is Lockgate::Account);\n')


def test_the_history_is_read_only_where_a_policy_that_reads_it_applies() -> None:
    b = bundle(SEND_ONLY)
    assert b.uses_history
    assert b.history_for("mail.send", "Account") == (True, False)
    assert b.history_for("mail.read", "Account") == (False, False)
    assert b.history_for("mail.send", "Case") == (False, False)
    (scope,) = scopes(SEND_ONLY)
    assert scope == HistoryScope(frozenset({"mail.send"}), "Account", windows=False)


def test_a_policy_on_the_unattended_group_applies_to_every_capability_and_a_window_is_noticed() -> None:
    policies = ('@id("hourly") forbid (principal, action in Lockgate::Action::"unattended", resource)'
                " when { context.history.actor_hour.publish >= 30 };\n"
                '@id("all") permit (principal, action, resource);\n')
    b = bundle(policies)
    (scope,) = scopes(policies)
    assert scope.windows and scope.resource_type is None
    assert b.history_for("mail.read", "Account") == (True, True)
    assert b.history_for("anything.else", "Case") == (True, True)


def test_a_policy_on_a_list_of_actions_applies_to_each() -> None:
    b = bundle('@id("both") forbid (principal, action in [Lockgate::Action::"mail.send::unattended",'
               ' Lockgate::Action::"mail.read"], resource) when { context.history.run.amount > 5 };\n'
               '@id("all") permit (principal, action, resource);\n')
    assert b.history_for("mail.send", "Account") == (True, False)
    assert b.history_for("mail.read", "Account") == (True, False)
    assert b.history_for("mail.other", "Account") == (False, False)


# -- a case table's history ------------------------------------------------------------------


def fail(message: str) -> CaseError:
    return CaseError(Path("cases.yaml"), message, 0)


def test_a_stated_history_fills_in_what_follows() -> None:
    history = stated_history({"untrusted_from": ["mail.read"], "run": {"publish": 2, "amount": 700}}, fail)
    assert history["untrusted"] is True and history["run"]["effects"] == 2
    assert history["run"]["amount"] == 700 and history["actor_hour"]["effects"] == 0


@pytest.mark.parametrize("given", [
    {"untrusted_form": ["mail.read"]},          # a misspelt key
    {"run": {"publishes": 2}},                  # a class that is not one
    {"run": 3},                                 # a window that is not a mapping
    {"run": {"publish": "two"}},                # a count that is not a number
    {"run": {"amount": True}},
    {"executed": "mail.send"},                  # a set given as one text
    {"untrusted": "yes"},
    {"approvals": [1]},
    {"executed_count": {"publish": 1.5}},
    ["untrusted_from"],
])
def test_a_stated_history_that_is_not_one_is_refused(given: object) -> None:
    with pytest.raises(CaseError) as refused:
        stated_history(given, fail)
    assert refused.value.code == "policy.cases-invalid"


def test_a_case_table_refuses_a_misstated_history_with_its_row(tmp_path: Path) -> None:
    table = tmp_path / "history.cases.yaml"
    table.write_text("cases:\n  - name: spent\n    principal: {actor: user-42, tenant: tenant-a}\n    capability: mail.send\n"
                     "    resource: {type: Account, id: acct, facts: {}}\n    history: {run: {amount: lots}}\n"
                     "    expect: allow\n")
    with pytest.raises(CaseError) as refused:
        load_cases(table)
    assert refused.value.index == 0 and "history.run" in refused.value.detail
