"""Policy and the final gate deciding on the run's history, on in-memory ports.

An assistant's bundle (every capability acts in an ``Account``): a send to someone the
user did not name waits for a reviewer once untrusted content entered the run, and the
run's payments add up to a total a reviewer looks past. Each test stores intents as an
agent's calls would make them, runs the policy and executor handlers as their consumers
would, and reads back the decisions, the orders sent and the history documents.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import pytest

from lockgate.adapters.scaffold import schema_fragment
from lockgate.adapters.sdk import CapabilityFunction, Context, IntentKey, capability
from lockgate.authz.history import Held
from lockgate.authz.source import BundleSource
from lockgate.contracts.messages import Facts, RunContext
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.executor.handlers import AttemptDue, ExecutorHandlers
from lockgate.intent.aggregate import EffectIntent, State
from lockgate.intent.events import AttemptSent, EffectCompleted, ExecutionAuthorized, PolicyDecided
from lockgate.policy.handlers import PolicyHandlers
from lockgate.runtime.context import MemoryPorts
from lockgate.runtime.ports.adapters import FakeAdapters
from lockgate.runtime.ports.history import MemoryHistory, Reading
from lockgate.testing.intents import T0, History
from tests.unit.memory_ports import state_of, store_history

REPO = Path(__file__).resolve().parents[2]
NOW = T0 + timedelta(seconds=2)
KEY = b"k" * 32
TASK = "Pay the rent to bob@example.com and send him the lease."
ACCOUNT = {"type": "account", "id": "acct-1", "tenant": "tenant-a"}


def capabilities() -> list[CapabilityFunction]:
    """A mailbox (its mail comes from outside), sending mail and paying."""

    @capability("mail.read", effect="read", resource=("Account", "account"), outside_results=True,
                data_classes=("mail",))
    def read(account: Annotated[str, Context()]) -> list[str]:
        """Read the inbox."""
        return []

    @capability("mail.send", effect="publish", resource=("Account", "account"),
                destination_arguments=("to",))
    def send(account: Annotated[str, Context()], to: str, body: str, key: IntentKey) -> None:
        """Send a mail."""

    @capability("bank.pay", effect="publish", resource=("Account", "account"),
                destination_arguments=("to",), amount_argument="amount", data_classes=("money",))
    def pay(account: Annotated[str, Context()], to: str, amount: int, key: IntentKey) -> None:
        """Pay someone."""

    return [read, send, pay]


FUNCTIONS = {f.name: f for f in capabilities()}
CONTRACTS = {name: f.contract for name, f in FUNCTIONS.items()}

#: The assistant's policies that read the run's history (what the demo assistant states).
ASSISTANT = """
@id("assistant.acts-for-its-user")
permit (principal, action, resource is Lockgate::Account)
when { principal.roles.contains("assistant") };

@id("assistant.untrusted-reach")
forbid (principal, action in Lockgate::Action::"unattended", resource is Lockgate::Account)
when { context.history.untrusted && !context.untrusted_destinations.isEmpty() };

@id("assistant.spending-review")
forbid (principal, action in Lockgate::Action::"unattended", resource is Lockgate::Account)
when { context.amount > 0 && context.history.run.amount + context.amount > 5000 };

@id("assistant.spending-cap")
forbid (principal, action, resource is Lockgate::Account)
when { context.amount > 0 && context.history.run.amount + context.amount > 50000 };
"""

#: Only sending mail reads the history: reading mail and paying never need it.
SEND_ONLY = """
@id("assistant.acts-for-its-user")
permit (principal, action, resource is Lockgate::Account)
when { principal.roles.contains("assistant") };

@id("assistant.untrusted-send")
forbid (principal, action == Lockgate::Action::"mail.send::unattended", resource is Lockgate::Account)
when { context.history.untrusted && !context.untrusted_destinations.isEmpty() };
"""


def bundle(tmp_path: Path, policies: str) -> BundleSource:
    """Lockgate's schema, an ``Account`` and the capabilities' actions, and ``policies``."""
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "lockgate.cedarschema").write_text(
        (REPO / "deploy" / "policies" / "lockgate.cedarschema").read_text())
    (directory / "account.cedarschema").write_text("namespace Lockgate {\n  entity Account;\n}\n")
    (directory / "assistant.cedarschema").write_text(
        schema_fragment(list(FUNCTIONS.values()), "tests", declared=("Account",)))
    (directory / "assistant.cedar").write_text(policies)
    return BundleSource(directory)


@pytest.fixture
async def ports() -> MemoryPorts:
    """The three capabilities registered, their account's facts answered, the run opened
    by its trusted host for the assistant with the user's task."""
    made = MemoryPorts.create(*CONTRACTS.values(),
                              adapters=FakeAdapters(facts_answer=Facts(facts={}, revision="1")))
    run = RunContext(run_id="run-1", tenant="tenant-a", actor="user-42", context={"task": TASK},
                     delegation=None, stage="default", opened_at=T0, roles=("assistant",))
    await made.runs.open(run)
    return made


def call(tool: str, call_id: str, **arguments: Any) -> History:
    """An agent's call of ``tool`` in the run, normalized by its adapter."""
    contract = CONTRACTS[tool]
    normalized = {"account": "acct-1", **arguments}
    h = History(call_id=call_id, tool=tool, arguments=arguments, contract_revision=contract.revision)
    return h.normalized(arguments=normalized, resource=ACCOUNT, destination=f"{tool}:acct-1",
                        effect_class=contract.effect_class, contract_revision=contract.revision,
                        facts={})


async def decided(ports: MemoryPorts, bundles: BundleSource, h: History) -> EffectIntent:
    """``h`` stored and decided by policy: the intent as it is now."""
    await PolicyHandlers(ports, bundles, lambda: NOW).normalized(await store_history(ports, h), deliveries=1)
    h.events[:] = await ports.intents.events("tenant-a", h.intent_id)
    return await state_of(ports, h)


async def gated(ports: MemoryPorts, bundles: BundleSource, h: History) -> EffectIntent:
    """The final gate run on ``h``'s allowing decision (as its durable hands it)."""
    stored = await ports.store.load("tenant-a", h.intent_id)
    trigger = next(e for e in stored.events if e.event_type == "PolicyDecided")
    with contextlib.suppress(AttemptDue):  # an authorized attempt's trigger becomes its timer
        await ExecutorHandlers(ports, bundles, lambda: NOW, report_key=KEY).ready(trigger, 1)
    h.events[:] = await ports.intents.events("tenant-a", h.intent_id)
    return await state_of(ports, h)


async def read_mail(ports: MemoryPorts, bundles: BundleSource, call_id: str = "read-1") -> None:
    """The run reads its inbox: allowed, and authorized by the gate (its order sent)."""
    h = call("mail.read", call_id)
    assert (await decided(ports, bundles, h)).state is State.ALLOWED
    assert (await gated(ports, bundles, h)).state is State.AUTHORIZED


def decision_of(h: History) -> PolicyDecided:
    """``h``'s decision as stored (``decided`` reads the events back)."""
    return next(e for e in h.events if isinstance(e, PolicyDecided))


def waits_for_review(intent: EffectIntent) -> bool:
    """Policy sent the intent to a reviewer (the approval service opens the review)."""
    return intent.state is State.NORMALIZED and intent.decision is DecisionOutcome.REQUIRE_APPROVAL


def sent_to(ports: MemoryPorts, tool: str) -> list[str]:
    return [o.arguments.get("to", "") for o in ports.orders.sent if o.capability == tool]


async def test_a_send_the_user_did_not_ask_for_waits_for_a_reviewer_once_mail_was_read(
    ports: MemoryPorts, tmp_path: Path,
) -> None:
    bundles = bundle(tmp_path, ASSISTANT)
    before = await decided(ports, bundles, call("mail.send", "send-1", to="mallory@example.com", body="x"))
    assert before.state is State.ALLOWED  # nothing from outside in the run yet
    await read_mail(ports, bundles)
    after = call("mail.send", "send-2", to="mallory@example.com", body="x")
    assert waits_for_review(await decided(ports, bundles, after))
    assert "assistant.untrusted-reach" in decision_of(after).determining
    named = await decided(ports, bundles, call("mail.send", "send-3", to="Bob@Example.com", body="x"))
    assert named.state is State.ALLOWED  # the task names bob@example.com


async def test_an_address_inside_a_named_one_is_not_named(ports: MemoryPorts, tmp_path: Path) -> None:
    bundles = bundle(tmp_path, ASSISTANT)
    await read_mail(ports, bundles)
    tail = await decided(ports, bundles, call("mail.send", "send-1", to="b@example.com", body="x"))
    assert waits_for_review(tail)  # "b@example.com" is a tail of bob@example.com


class Racing(MemoryHistory):
    """A history whose first admission waits while ``meanwhile`` runs (another replica
    deciding another call of the run at the same moment)."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Callable[[], Awaitable[object]] | None = None

    async def admit(self, reading: Reading, intent_id: str, held: Held) -> list[str]:
        other, self.meanwhile = self.meanwhile, None
        if other is not None:
            await other()
        return await super().admit(reading, intent_id, held)


async def test_two_payments_decided_at_once_see_each_other(ports: MemoryPorts, tmp_path: Path) -> None:
    bundles = bundle(tmp_path, ASSISTANT)
    history = Racing()
    ports = dataclasses.replace(ports, history=history)
    first = call("bank.pay", "pay-1", to="bob@example.com", amount=3000)
    second = call("bank.pay", "pay-2", to="bob@example.com", amount=3000)
    history.meanwhile = lambda: decided(ports, bundles, second)
    racing = await decided(ports, bundles, first)
    assert (await state_of(ports, second)).state is State.ALLOWED  # decided first, on 0 spent
    # The first read 0 spent too, found the history moved, and decided again on 3000 held.
    assert waits_for_review(racing)
    assert "assistant.spending-review" in decision_of(first).determining
    seen = await ports.history.read("tenant-a", "run-1", "user-42", "x", NOW, windows=False)
    assert seen.facts.run.amount == 6000  # both held: a reviewer's payment counts while it waits


async def test_the_gate_judges_the_history_as_of_its_moment(ports: MemoryPorts, tmp_path: Path) -> None:
    bundles = bundle(tmp_path, ASSISTANT)
    send = call("mail.send", "send-1", to="mallory@example.com", body="x")
    assert (await decided(ports, bundles, send)).state is State.ALLOWED
    await read_mail(ports, bundles)  # in parallel: the mail is let in before the send's gate
    refused = await gated(ports, bundles, send)
    assert refused.state is State.REFUSED and refused.reason == "policy.approval-required"
    assert sent_to(ports, "mail.send") == []


async def test_a_payment_completed_between_policy_and_gate_counts_at_the_gate(
    ports: MemoryPorts, tmp_path: Path,
) -> None:
    bundles = bundle(tmp_path, ASSISTANT)
    pay = call("bank.pay", "pay-1", to="bob@example.com", amount=3000)
    assert (await decided(ports, bundles, pay)).state is State.ALLOWED
    # Another replica's payment of the run, admitted and completed after pay-1's decision
    # but before its gate (an effect that needed no hold of pay-1's decision to be made).
    other = await ports.history.read("tenant-a", "run-1", "user-42", "elsewhere", NOW, windows=False)
    keys = await ports.history.admit(other, "elsewhere", Held("bank.pay", "publish", 2500))
    await ports.history.end("tenant-a", "run-1", keys, "elsewhere", "bank.pay", "publish", "executed")
    refused = await gated(ports, bundles, pay)
    assert refused.state is State.REFUSED and refused.reason == "policy.approval-required"
    assert sent_to(ports, "bank.pay") == []


async def test_a_completed_payment_is_executed_in_the_history(ports: MemoryPorts, tmp_path: Path) -> None:
    bundles = bundle(tmp_path, ASSISTANT)
    h = call("bank.pay", "pay-1", to="bob@example.com", amount=3000)
    assert (await decided(ports, bundles, h)).state is State.ALLOWED
    assert (await gated(ports, bundles, h)).state is State.AUTHORIZED
    authorized = next(e for e in h.events if isinstance(e, ExecutionAuthorized))
    h.add(AttemptSent, attempt_id=authorized.attempt_id)
    h.add(EffectCompleted, attempt_id=authorized.attempt_id, receipt={}, result={}, provenance={})
    handlers = PolicyHandlers(ports, bundles, lambda: NOW)
    for _ in range(2):  # the end handed again
        await handlers.settled(await store_history(ports, h))
    seen = await ports.history.read("tenant-a", "run-1", "user-42", "x", NOW, windows=False)
    history = seen.facts.context()
    assert history["executed"] == ["bank.pay"] and history["run"]["publish"] == 1
    assert history["run"]["amount"] == 3000 and history["destinations"] == ["bob@example.com"]
    assert history["refused"] == []


async def test_a_denied_payment_is_refused_in_the_history(ports: MemoryPorts, tmp_path: Path) -> None:
    bundles = bundle(tmp_path, ASSISTANT)
    h = call("bank.pay", "pay-1", to="bob@example.com", amount=60000)
    denied = await decided(ports, bundles, h)
    assert denied.state is State.DENIED and "assistant.spending-cap" in decision_of(h).determining
    decision = next(e for e in (await ports.store.load("tenant-a", h.intent_id)).events
                    if e.event_type == "PolicyDecided")
    await PolicyHandlers(ports, bundles, lambda: NOW).settled(decision)
    seen = await ports.history.read("tenant-a", "run-1", "user-42", "x", NOW, windows=False)
    history = seen.facts.context()
    assert history["refused"] == ["bank.pay"] and history["refused_count"]["publish"] == 1
    assert history["run"]["amount"] == 0 and history["executed"] == []


async def test_a_capability_no_history_policy_applies_to_never_touches_the_history(
    ports: MemoryPorts, tmp_path: Path,
) -> None:
    """Not even a write with data classes: what it sends is not what the run learns, and
    a write on every effect of the other worlds would cost each of them a round trip."""
    bundles = bundle(tmp_path, SEND_ONLY)
    h = call("bank.pay", "pay-1", to="mallory@example.com", amount=60000)
    assert (await decided(ports, bundles, h)).state is State.ALLOWED
    assert (await gated(ports, bundles, h)).state is State.AUTHORIZED
    authorized = next(e for e in h.events if isinstance(e, ExecutionAuthorized))
    h.add(AttemptSent, attempt_id=authorized.attempt_id)
    h.add(EffectCompleted, attempt_id=authorized.attempt_id, receipt={}, result={}, provenance={})
    await PolicyHandlers(ports, bundles, lambda: NOW).settled(await store_history(ports, h))
    assert (await state_of(ports, h)).state is State.COMPLETED
    assert ports.history.documents == {}


async def test_outside_content_counts_for_a_policy_on_another_capability(
    ports: MemoryPorts, tmp_path: Path,
) -> None:
    """Only sending reads the history, yet the mail read (which no history policy decides)
    is what makes the run untrusted: the gate notes it whatever policy decides the read."""
    bundles = bundle(tmp_path, SEND_ONLY)
    await read_mail(ports, bundles)
    send = await decided(ports, bundles, call("mail.send", "send-1", to="mallory@example.com", body="x"))
    assert waits_for_review(send)
    named = await decided(ports, bundles, call("mail.send", "send-2", to="bob@example.com", body="x"))
    assert named.state is State.ALLOWED
