"""The processes' specs: every event produced and consumed, every reaction real, every subject granted."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
import math
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from lockgate.approval.app import create_app as approval_app
from lockgate.approval.handlers import ApprovalHandlers
from lockgate.authz.config import MAX_PAUSE_RECHECKS, PauseConfig
from lockgate.cli import schemas
from lockgate.contracts import channels, subjects
from lockgate.contracts.channels import Channel
from lockgate.eventstore.subjects import NO_ROUTE, event_subject
from lockgate.executor.app import create_app as executor_app
from lockgate.executor.handlers import ExecutorHandlers
from lockgate.intake.app import create_app as intake_app
from lockgate.intake.handlers import IntakeHandlers
from lockgate.intent.aggregate import Event
from lockgate.intent.codec import EVENT_TYPES
from lockgate.intent.events import CandidateReceived, PolicyDecided
from lockgate.normalization.app import create_app as normalization_app
from lockgate.normalization.handlers import NormalizationHandlers
from lockgate.operations import roles, status
from lockgate.operations.roles import adapter_role, service_role
from lockgate.policy.app import create_app as policy_app
from lockgate.policy.handlers import PolicyHandlers
from lockgate.reconciler.app import create_app as reconciler_app
from lockgate.reconciler.handlers import ReconcilerHandlers
from lockgate.runtime import topology
from lockgate.runtime.host import ServiceHost, WiringError
from lockgate.runtime.service import BOUNDS
from lockgate.runtime.settings import MAX_REVIEW_TTL_S, Settings
from lockgate.runtime.settlement import backoff_s
from lockgate.runtime.spec import DELIVERIES, AdapterSpec, Consumer, ServiceSpec, max_deliver_for
from lockgate.runtime.specs import (
    ADAPTERS,
    ENDS_HOLD,
    ENDS_INTENT,
    EXECUTOR,
    EXPIRY_DELIVERIES,
    EXPIRY_RECHECK_S,
    GATE_DELIVERIES,
    INTAKE,
    MODEL_VISIBLE,
    PAUSE_DELIVERIES,
    READ_SIDE_APPENDS,
    RECONCILE_DELIVERIES,
    SERVICES,
    UNCONSUMED,
)
from lockgate.runtime.streams import EVENTS, REPORTS
from lockgate.runtime.topology import LOCK_TTL_S

TENANT, RUN, INTENT, CAPABILITY = "tenant-a", "run-1", "0" * 32, "case.add_note"

#: Each service's handlers (where its reactions live) and its app factory.
PROCESSES: dict[str, tuple[type, Callable[[Settings], ServiceHost[Any]]]] = {
    "intake": (IntakeHandlers, intake_app),
    "normalization": (NormalizationHandlers, normalization_app),
    "policy": (PolicyHandlers, policy_app),
    "approval": (ApprovalHandlers, approval_app),
    "executor": (ExecutorHandlers, executor_app),
    "reconciler": (ReconcilerHandlers, reconciler_app),
}

#: One concrete subject of each channel, built as the code that sends on it builds it.
SAMPLES: dict[Channel, Callable[[str], str]] = {
    channels.RUN_OPEN: lambda _cap: subjects.run_open_subject(TENANT),
    channels.RUN_CLOSE: lambda _cap: subjects.run_close_subject(TENANT),
    channels.LEASE: lambda _cap: subjects.lease_subject(TENANT, RUN),
    channels.TURN: lambda _cap: subjects.turn_subject(TENANT, RUN),
    channels.PROPOSE: lambda _cap: subjects.propose_subject(TENANT, RUN),
    channels.RESPONSE: lambda _cap: subjects.response_subject(TENANT, RUN, INTENT),
    channels.REVIEW_SHOW: lambda _cap: subjects.review(TENANT, INTENT, "show", "alice"),
    channels.REVIEW_DECIDE: lambda _cap: subjects.review(TENANT, INTENT, "decide", "alice"),
    channels.REVIEW_EDIT: lambda _cap: subjects.review(TENANT, INTENT, "edit", "alice"),
    channels.WITHDRAW: lambda _cap: subjects.withdraw(TENANT, RUN, INTENT, "agent-tenant-a"),
    channels.RESOLVE: lambda _cap: subjects.resolve(TENANT, INTENT, "ops"),
    channels.POLICY: lambda _cap: subjects.policy_command("shadow", "ops"),
    channels.EXEC: subjects.order,
    channels.INTERRUPT: subjects.interrupt,
    channels.CLAIM: subjects.claim,
    channels.REPORT: lambda cap: subjects.report(cap, INTENT),
    channels.ADAPTER_DESCRIBE: lambda cap: subjects.adapter(cap, "describe"),
    channels.ADAPTER_NORMALIZE: lambda cap: subjects.adapter(cap, "normalize"),
    channels.ADAPTER_FACTS: lambda cap: subjects.adapter(cap, "facts"),
    channels.ADAPTER_QUERY: lambda cap: subjects.adapter(cap, "query"),
    channels.STATUS: lambda _cap: subjects.status("intake"),
}

EVERY_CHANNEL = [v for v in vars(channels).values() if isinstance(v, Channel)]


def covers(pattern: str, subject: str) -> bool:
    """True when every subject ``subject`` matches (it may hold wildcards) matches ``pattern``."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or s[i] == ">":
            return False
        if token != "*" and token != s[i]:
            return False
    return len(p) == len(s)


def permitted(grants: Iterable[str], subject: str) -> bool:
    """True when one of ``grants`` (a role's allow-list) covers ``subject``."""
    return any(covers(g, subject) for g in grants)


def named(spec: ServiceSpec | AdapterSpec) -> str:
    return spec.name


def evt(name: str) -> str:
    return event_subject(TENANT, INTENT, 3, name)


# -- events: produced, consumed, named by class ------------------------------------------


def test_every_event_type_has_a_producer() -> None:
    produced = {event for spec in SERVICES for event in spec.may_append}
    produced |= {event for events in READ_SIDE_APPENDS.values() for event in events}
    assert {name for name, cls in EVENT_TYPES.items() if cls not in produced} == set()


def test_every_event_type_is_consumed_or_says_why_not() -> None:
    consumed = {event for spec in SERVICES for c in spec.consumes for event in c.events}
    for name, cls in EVENT_TYPES.items():
        assert (cls in consumed) != (cls in UNCONSUMED), (
            f"{name}: no durable is handed it and UNCONSUMED gives no reason" if cls not in consumed
            else f"{name}: consumed, yet UNCONSUMED says why it is not")
    assert all(reason.strip() for reason in UNCONSUMED.values())


def test_specs_name_event_classes_not_strings() -> None:
    named_anywhere = [
        *MODEL_VISIBLE, *ENDS_HOLD, *ENDS_INTENT, *UNCONSUMED,
        *(e for spec in SERVICES for e in spec.appends),
        *(e for spec in SERVICES for c in spec.consumes for e in c.events),
    ]
    for event in named_anywhere:
        assert isinstance(event, type), f"{event!r} is not a class"
        assert EVENT_TYPES.get(event.__name__) is event, f"{event!r} is not an event of the codec"


def every_route(cls: type[Event]) -> tuple[str, ...]:
    """Every route an event of ``cls`` can be stored on (its vocabulary's values)."""
    if not cls.routed_by:
        return (NO_ROUTE,)
    vocabulary = typing.get_type_hints(cls)[cls.routed_by]
    return tuple(member.value for member in vocabulary)


def test_a_durables_filters_match_exactly_its_events_on_their_routes() -> None:
    for spec in SERVICES:
        for c in spec.consumes:
            if c.stream != EVENTS:
                continue
            matched = {
                (n, r) for n, cls in EVENT_TYPES.items() for r in every_route(cls)
                if any(covers(f, event_subject(TENANT, INTENT, 3, n, r)) for f in c.filters)
            }
            assert matched == {(e.__name__, r) for e in c.events
                               for r in c.routes_of(e) or every_route(e)}, c.name
            # Events stored before subjects carried a route: by type, as they were filtered.
            legacy = {n for n in EVENT_TYPES
                      if any(covers(f, f"lg.evt.{TENANT}.{INTENT}.3.{n}") for f in c.filters)}
            assert legacy == {e.__name__ for e in c.events}, c.name


def test_a_decision_reaches_only_the_consumers_that_act_on_its_outcome() -> None:
    handed = {
        outcome: {c.name for spec in SERVICES for c in spec.consumes if any(
            covers(f, event_subject(TENANT, INTENT, 3, "PolicyDecided", outcome)) for f in c.filters)}
        for outcome in every_route(PolicyDecided)
    }
    assert handed == {
        "allow": {"executor-gate"},
        "require_approval": {"approval"},
        "deny": {"intake-responses", "policy-budgets"},
        "pause": {"intake-responses", "policy-pauses"},
    }


# -- reactions: each one exists, and each app binds exactly its spec ---------------------


def test_every_service_has_its_handlers_and_app_named_here() -> None:
    assert set(PROCESSES) == {spec.name for spec in SERVICES}


@pytest.mark.parametrize("spec", SERVICES, ids=named)
def test_every_reaction_is_a_coroutine_of_the_services_handlers(spec: ServiceSpec) -> None:
    handlers, _ = PROCESSES[spec.name]
    for reaction in [c.reaction for c in spec.consumes] + [a.reaction for a in spec.answers]:
        method = getattr(handlers, reaction, None)
        assert method is not None, f"{handlers.__name__} has no reaction {reaction!r}"
        assert inspect.iscoroutinefunction(method), f"{handlers.__name__}.{reaction} is not async"


def bound(host: ServiceHost[Any]) -> tuple[dict[str, tuple[str, tuple[str, ...], int, int]], set[str]]:
    """What a host binds: its durables (stream, filters, pending, workers), its request subjects.

    Read off the host's bindings: wiring only, nothing connects. The status answer is the
    host's own, for every service.
    """
    host.check()
    durables = {b.durable.name: (b.durable.stream, b.durable.filters, b.durable.max_ack_pending,
                                 b.workers) for b in host.bindings}
    core = {a.subject for a in host.answering} | {subjects.status(host.spec.status_name)}
    return durables, core


@pytest.mark.parametrize("spec", SERVICES, ids=named)
def test_each_app_binds_exactly_what_its_spec_declares(spec: ServiceSpec) -> None:
    _, create_app = PROCESSES[spec.name]
    durables, core = bound(create_app(Settings()))
    assert durables == {c.name: (c.stream, c.filters, c.max_ack_pending, c.workers)
                        for c in spec.consumes}
    answered = {s for a in spec.answers for s in a.channel.subjects}
    assert core == answered | {subjects.status(spec.status_name)}


async def entry(_: object) -> None:
    return None


async def reply(_: object) -> bytes:
    return b""


async def give_up(_: object, __: object) -> None:
    return None


def intake_host(url: str = "nats://127.0.0.1:1") -> ServiceHost[Any]:
    """Intake's host over a broker nobody listens on: a host that tried to connect would hang."""
    return ServiceHost(Settings(nats_url=url, metrics_enabled=False), INTAKE, lambda ports: ports,
                       logging.getLogger("test"))


async def test_a_host_with_a_reaction_left_unbound_refuses_to_start_before_connecting() -> None:
    host = intake_host()
    host.durable(INTAKE.candidate, entry, abandon=give_up)
    host.durable(INTAKE.respond, entry)
    host.durable(INTAKE.lease, entry, abandon=give_up)
    host.answer(INTAKE.open_run, reply)
    host.answer(INTAKE.close_run, reply)
    with pytest.raises(WiringError, match="open_turn") as refused:
        await asyncio.wait_for(host.start(), 5)
    assert refused.value.code == "service.unbound"
    with pytest.raises(RuntimeError):
        host.ports  # noqa: B018 - never connected, so never built


def test_a_host_refuses_a_reaction_bound_twice_or_not_in_its_spec() -> None:
    host = intake_host()
    host.durable(INTAKE.respond, entry)
    with pytest.raises(WiringError, match="respond") as twice:
        host.durable(INTAKE.respond, entry)
    assert twice.value.code == "service.bound-twice"
    host.answer(INTAKE.open_turn, reply)
    with pytest.raises(WiringError, match="open_turn"):
        host.answer(INTAKE.open_turn, reply)
    with pytest.raises(WiringError, match="ready") as stranger:
        host.durable(EXECUTOR.ready, entry)
    assert stranger.value.code == "service.not-in-spec"
    with pytest.raises(WiringError, match="claim"):
        host.answer(EXECUTOR.claim, reply)


def test_a_candidates_consumer_must_say_what_giving_up_records() -> None:
    with pytest.raises(WiringError, match="intake"):
        intake_host().durable(INTAKE.candidate, entry)


def test_a_spec_names_each_reaction_after_its_field() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Misnamed(ServiceSpec):
        gate: Consumer

    with pytest.raises(ValueError, match="ready"):
        Misnamed("x", gate=EXECUTOR.ready)


def test_a_spec_refuses_a_consumer_without_events_and_a_reaction_bound_twice() -> None:
    received = CandidateReceived
    ok = Consumer("a", "same", (received,))
    with pytest.raises(ValueError):
        Consumer("b", "react")  # on the events stream, handed nothing
    with pytest.raises(ValueError):
        Consumer("c", "react", (received,), stream=REPORTS)
    with pytest.raises(TypeError):
        Consumer("d", "react", ("CandidateReceived",))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ServiceSpec("x", consumes=(ok, Consumer("e", "same", ok.events)), appends=())


# -- derived tables ---------------------------------------------------------------------


def test_the_topology_is_the_specs_consumers() -> None:
    names = [c.name for spec in SERVICES for c in spec.consumes]
    assert len(names) == len(set(names)), "a durable name used by two services"
    assert {d.name: (d.stream, d.filters, d.max_ack_pending, d.timers) for d in topology.DURABLES} == {
        c.name: (c.stream, c.filters, c.max_ack_pending, c.timers)
        for spec in SERVICES for c in spec.consumes}


def test_what_make_run_supervises_is_every_spec_and_each_module_runs() -> None:
    assert status.SERVICES == tuple(roles.SERVICES) == tuple(spec.name for spec in SERVICES)
    assert [name for name, _ in status.CHILDREN] == [
        *(s.status_name for s in SERVICES), roles.PROJECTOR, roles.ARCHIVER, roles.CONSOLE,
        *(a.status_name for a in ADAPTERS)]
    for _, module in status.CHILDREN:
        assert importlib.util.find_spec(f"{module}.__main__") is not None, module
    assert {a.name: a.capabilities for a in ADAPTERS} == roles.DEMO_ADAPTERS


def test_every_channel_is_used_by_a_spec_and_listed_in_asyncapi() -> None:
    used = schemas.channel_uses()
    assert [c.address for c in EVERY_CHANNEL if c not in used] == []
    listed = {c["address"] for c in _asyncapi()["channels"].values()}
    assert listed == {c.address for c in EVERY_CHANNEL}
    for channel, (sent_by, received_by) in used.items():
        assert sent_by and received_by, f"{channel.address}: nobody sends or nobody receives"


def _asyncapi() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schemas.generate()["asyncapi.json"])
    return loaded


@pytest.mark.parametrize("channel", EVERY_CHANNEL, ids=lambda c: c.address)
def test_a_channels_wildcards_match_the_subjects_its_senders_build(channel: Channel) -> None:
    assert channel in SAMPLES, f"{channel.address}: add a sample subject"
    assert permitted(channel.subjects, SAMPLES[channel](CAPABILITY))


# -- roles: every subject a process uses is granted ----------------------------------------


@pytest.mark.parametrize("spec", SERVICES, ids=named)
def test_a_service_role_grants_every_subject_its_spec_uses(spec: ServiceSpec) -> None:
    role = service_role(spec.name)
    for c in spec.consumes:
        for api in (f"$JS.API.CONSUMER.INFO.{c.stream}.{c.name}",
                    f"$JS.API.CONSUMER.MSG.NEXT.{c.stream}.{c.name}",
                    f"$JS.ACK.{c.stream}.{c.name}.1.1.7.7.1700000000000000000.0"):
            assert permitted(role.publish, api), api
    for event in spec.may_append:
        assert permitted(role.publish, evt(event.__name__)), event.__name__
    for answer in spec.answers:
        for wildcard in answer.channel.subjects:
            assert permitted(role.subscribe, wildcard), wildcard
    assert permitted(role.subscribe, subjects.status(spec.status_name))
    for channel in (*spec.asks, *spec.publishes):
        sample = (subjects.withdraw(TENANT, RUN, INTENT, spec.name) if channel is channels.WITHDRAW
                  else SAMPLES[channel](CAPABILITY))
        assert permitted(role.publish, sample), channel.address
    if channels.WITHDRAW in spec.asks:  # as itself, never as an agent runtime or an operator
        assert not permitted(role.publish, SAMPLES[channels.WITHDRAW](CAPABILITY))
        assert not permitted(role.publish, subjects.withdraw(TENANT, RUN, INTENT, "operator-ops"))
    for bucket in spec.reads:
        assert permitted(role.publish, f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.k"), bucket
    for bucket in spec.writes:
        assert permitted(role.publish, f"$KV.{bucket}.k"), bucket


@pytest.mark.parametrize("spec", SERVICES, ids=named)
def test_a_service_role_grants_nothing_its_spec_does_not_name(spec: ServiceSpec) -> None:
    role = service_role(spec.name)
    for name, cls in EVENT_TYPES.items():
        assert permitted(role.publish, evt(name)) == (cls in spec.may_append), name
    theirs = [c for other in SERVICES if other is not spec for c in other.consumes]
    for c in theirs:
        assert not permitted(role.publish, f"$JS.API.CONSUMER.MSG.NEXT.{c.stream}.{c.name}"), c.name
    for bucket in {b for other in SERVICES for b in other.writes} - set(spec.writes):
        assert not permitted(role.publish, f"$KV.{bucket}.k"), bucket
    answered = {a.channel for a in spec.answers}
    for channel in EVERY_CHANNEL:
        if channel not in answered and channel is not channels.STATUS:
            assert not permitted(role.subscribe, SAMPLES[channel](CAPABILITY)), channel.address


@pytest.mark.parametrize("adapter", ADAPTERS, ids=named)
def test_an_adapter_role_grants_what_the_sdk_does_for_its_own_capabilities(
    adapter: AdapterSpec,
) -> None:
    role = adapter_role(adapter.capabilities, adapter.name)
    assert permitted(role.subscribe, subjects.status(adapter.status_name))
    others = {c for a in ADAPTERS for c in a.capabilities} - set(adapter.capabilities)
    for capability, mine in [*((c, True) for c in adapter.capabilities),
                             *((c, False) for c in others)]:
        for channel in (*adapter.answers, *adapter.consumes):
            subject = SAMPLES[channel](capability)
            if channel is channels.EXEC:  # consumed through its own durable, created by the SDK
                granted = any(i.local.startswith(f"{roles.IMPORTED_JS_API}.CONSUMER.CREATE.")
                              and i.local.endswith("." + subject) for i in role.imports)
            else:
                granted = permitted(role.subscribe, subject)
            assert granted == mine, (capability, channel.address)
        for channel in (*adapter.publishes, *adapter.asks):
            assert permitted(role.publish, SAMPLES[channel](capability)) == mine, (
                capability, channel.address)



def test_each_timer_consumers_bound_covers_its_longest_legitimate_wait() -> None:
    """A timer is a delivery to the server: each timer consumer's bound must outlast its
    longest wait (the arithmetic in ``runtime.specs``), with room for a few failures."""
    room = BOUNDS.permanent_failures
    assert MAX_PAUSE_RECHECKS + 1 + room <= PAUSE_DELIVERIES
    assert math.ceil(MAX_REVIEW_TTL_S / EXPIRY_RECHECK_S) + 1 + room <= EXPIRY_DELIVERIES
    # A day of asking an adapter, a minute apart at most, before an operator decides.
    asking = sum(backoff_s(n, base_s=1.0, cap_s=60.0) for n in range(1, RECONCILE_DELIVERIES - room))
    assert asking >= 24 * 3600
    # Waiting out a dead holder's lock at the gate's 0.25 s, four times over.
    assert 4 * LOCK_TTL_S / 0.25 + room <= GATE_DELIVERIES
    timers = {c.name: c.deliveries for s in SERVICES for c in s.consumes if c.timers}
    assert timers == {"policy-pauses": PAUSE_DELIVERIES, "approval-expiry": EXPIRY_DELIVERIES,
                      "executor-gate": GATE_DELIVERIES, "reconciler": RECONCILE_DELIVERIES}
    assert {c.deliveries for s in SERVICES for c in s.consumes if not c.timers} == {DELIVERIES}
    assert all(0 < d.max_deliver == max_deliver_for(
        next(c for s in SERVICES for c in s.consumes if c.name == d.name).deliveries)
        for d in topology.DURABLES)


def test_a_configuration_longer_than_its_timer_may_wait_is_refused() -> None:
    assert PauseConfig(recheck_s=2, timeout_s=1800).timeout_s == 1800
    with pytest.raises(ValueError, match="rechecks"):
        PauseConfig(recheck_s=0.1, timeout_s=3600)
    with pytest.raises(ValueError, match="review_ttl_s"):
        Settings(review_ttl_s=MAX_REVIEW_TTL_S + 1)
