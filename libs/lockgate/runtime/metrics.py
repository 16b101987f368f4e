"""Every process's Prometheus metrics: what is counted, under which labels, and where it is served.

Each Lockgate process serves ``/metrics`` over HTTP on loopback by default, on a port the
kernel picks when the process starts (so replicas on one machine never collide); the
process reports the URL in its status answer, ``lockgate status`` lists it, and
``lockgate run`` writes every process's into ``var/prometheus/targets.json`` for
Prometheus to discover (``deploy/prometheus/prometheus.yml``). A fixed port and another
address are settings (``LOCKGATE_METRICS_PORT``, ``LOCKGATE_METRICS_ADDR``); so is turning
metrics off (``LOCKGATE_METRICS_ENABLED=false``).

Labels are bounded by construction: service and reaction names from the specs, event
types, the vocabularies' members, capability names of the process's own adapters, and a
reason's *class* (``lockgate.contracts.reasons.reason_class``), never a tenant, intent,
run or attempt id, never free text. A test scrapes a running system after proposals
with random ids and finds none of them.

Counting costs microseconds: every label combination's child is bound once (``Bound``),
so an observation is a dict lookup and an increment under the client library's lock.
Nothing here makes a network round trip.

State computed from views (reviews waiting, attempts by state, unknown outcomes open,
projector lag) is exported by the projector process, which defines those gauges itself
(``FROM_VIEWS`` names them, so the dashboard and the alerts can be checked against them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.exposition import start_wsgi_server

from lockgate.contracts.reasons import reason_class
from lockgate.contracts.responses import STATUSES
from lockgate.contracts.vocabulary import AttemptStage
from lockgate.intent.aggregate import Event
from lockgate.intent.events import (
    AttemptAcknowledged,
    AttemptFailedBeforeSend,
    AttemptInterrupted,
    AttemptRejected,
    AttemptSent,
    CandidateReceived,
    CandidateRejected,
    EffectCompleted,
    ExecutionAuthorized,
    OutcomeUnknown,
    PolicyDecided,
    Reconciled,
    ResultObserved,
)
from lockgate.runtime.settings import Settings

log = logging.getLogger("lockgate.metrics")

#: Seconds: a handler that loads, decides and appends takes about a millisecond; a
#: final gate waiting on an adapter's facts or an adapter's execute, up to seconds.
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)

# -- the service kit: every durable and every request of every service -----------------

HANDLER_SECONDS = Histogram(
    "lockgate_handler_seconds",
    "Time from delivery to settlement of one message, or from request to reply, "
    "per service and reaction (the spec's name for the handler).",
    ["service", "reaction"],
    buckets=SECONDS_BUCKETS,
)
DELIVERIES = Counter(
    "lockgate_deliveries_total",
    "Messages a service's durables settled: by settlement (ack, nak, term) and the kit's "
    "outcome (ack, timer, retry, error, abandoned, poison, lost).",
    ["service", "reaction", "settlement", "outcome"],
)
REQUESTS = Counter(
    "lockgate_requests_total",
    "Requests a service answered, by result (answered; unavailable: the handler failed "
    "and the caller was told to ask again).",
    ["service", "reaction", "result"],
)

#: The kit's outcome of a settled delivery, and the verb it ended with.
SETTLEMENT_OF: dict[str, str] = {
    "ack": "ack", "abandoned": "ack",
    "timer": "nak", "retry": "nak", "error": "nak",
    "poison": "term", "lost": "term",
}

# -- what the services record -----------------------------------------------------------

CANDIDATES = Counter(
    "lockgate_candidates_total",
    "Model-facing answers intake published, by status (the model's outcome) and the class "
    "of the internal reason. A candidate that waits for a reviewer is counted once "
    "pending_approval and once more when it ends.",
    ["outcome", "reason_class"],
)
CANDIDATES_RECORDED = Counter(
    "lockgate_candidates_recorded_total",
    "Candidates intake recorded: received, or rejected at the boundary, by reason class.",
    ["result", "reason_class"],
)
DECISIONS = Counter(
    "lockgate_policy_decisions_total",
    "Decisions policy appended (PolicyDecided), by outcome and the class of the first reason.",
    ["outcome", "reason_class"],
)
SHADOW_DECISIONS = Counter(
    "lockgate_shadow_decisions_total",
    "Decisions policy also made under the shadow bundle, by capability, the active and the "
    "shadow outcome (equal: no flip), and the policies that determined the shadow's decision "
    "and not the active one's (\"\" when none).",
    ["capability", "active", "shadow", "policy"],
)
ATTEMPT_TRANSITIONS = Counter(
    "lockgate_attempt_transitions_total",
    "Attempt stage transitions the executor recorded, by the stage reached.",
    ["stage"],
)
RECONCILIATIONS = Counter(
    "lockgate_reconciliations_total",
    "Unknown outcomes reconciled, by what follows (completed, retry, operator, ...).",
    ["resolution"],
)
EVENTS_APPENDED = Counter(
    "lockgate_events_appended_total",
    "Events this process appended to the event store, by type.",
    ["event"],
)

# -- adapters -------------------------------------------------------------------------------

ADAPTER_REQUESTS = Counter(
    "lockgate_adapter_requests_total",
    "Requests an adapter answered (describe, normalize, facts, query), by result "
    "(ok, refused, malformed, error).",
    ["capability", "operation", "result"],
)
ADAPTER_REQUEST_SECONDS = Histogram(
    "lockgate_adapter_request_seconds",
    "Time an adapter took to answer one request.",
    ["capability", "operation"],
    buckets=SECONDS_BUCKETS,
)
ADAPTER_EXECUTIONS = Counter(
    "lockgate_adapter_executions_total",
    "Calls of an adapter's execute, by how they ended (completed, rejected, interrupted, "
    "not_sent, refused, unknown: failed after the send boundary, report_failed).",
    ["capability", "result"],
)
ADAPTER_EXECUTE_SECONDS = Histogram(
    "lockgate_adapter_execute_seconds",
    "Time one call of an adapter's execute took, reports included.",
    ["capability"],
    buckets=SECONDS_BUCKETS,
)
ADAPTER_ORDERS = Counter(
    "lockgate_adapter_orders_total",
    "Execution orders an adapter process settled, by settlement (ack, nak, term).",
    ["capability", "settlement"],
)

# -- the supervisor (``lockgate run``) ------------------------------------------------------

CHILD_RESTARTS = Counter(
    "lockgate_child_restarts_total",
    "Times the supervisor started a child again after it exited or was killed as unwell.",
    ["child"],
)
CHILD_UP = Gauge(
    "lockgate_child_up",
    "1 while a supervised child answers its status and is well, else 0.",
    ["child"],
)

#: Gauges computed from the views, exported by the projector process (its own
#: definitions), with their labels: named here so the dashboard and alerts can be checked.
FROM_VIEWS: dict[str, tuple[str, ...]] = {
    "lockgate_reviews_waiting": (),
    "lockgate_review_oldest_age_seconds": (),
    "lockgate_attempts": ("state",),
    "lockgate_unknown_outcomes_open": (),
    "lockgate_projector_lag_events": (),
    "lockgate_projector_events_total": (),
}

#: Every label a Lockgate metric may carry; each one's values come from a bounded set.
LABELS: frozenset[str] = frozenset({
    "service", "reaction", "settlement", "outcome", "reason_class", "result", "stage",
    "resolution", "event", "capability", "operation", "child", "state", "active", "shadow", "policy",
})


M = TypeVar("M", Counter, Gauge, Histogram)


class Bound(Generic[M]):
    """A labelled metric's children, each made once: later observations skip the label checks.

    Only for labels whose values come from a bounded set (the dict holds one entry per
    combination ever used).
    """

    def __init__(self, metric: M) -> None:
        self._metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        """The child of ``values``."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


_candidates = Bound(CANDIDATES)
_recorded = Bound(CANDIDATES_RECORDED)
_decisions = Bound(DECISIONS)
_transitions = Bound(ATTEMPT_TRANSITIONS)
_shadowed = Bound(SHADOW_DECISIONS)
_reconciliations = Bound(RECONCILIATIONS)
_appended = Bound(EVENTS_APPENDED)

_STATUSES = frozenset(STATUSES)


def answered(status: str, reason: str | None) -> None:
    """Intake published a model-facing answer with ``status`` for an intent whose reason is ``reason``.

    An executed candidate is counted without a reason: one its attempts met on the way
    (a failure before sending, retried) is not why it ended.
    """
    known = status if status in _STATUSES else "other"
    _candidates(known, "none" if known == "executed" else reason_class(reason)).inc()


#: The stage an attempt reaches with each event (the executor appends them).
STAGE_OF: dict[type[Event], AttemptStage] = {
    ExecutionAuthorized: AttemptStage.AUTHORIZED,
    AttemptSent: AttemptStage.SENT,
    AttemptAcknowledged: AttemptStage.ACKNOWLEDGED,
    ResultObserved: AttemptStage.OBSERVED,
    EffectCompleted: AttemptStage.COMPLETED,
    AttemptRejected: AttemptStage.REJECTED,
    AttemptInterrupted: AttemptStage.INTERRUPTED,
    AttemptFailedBeforeSend: AttemptStage.FAILED_BEFORE_SEND,
    OutcomeUnknown: AttemptStage.UNKNOWN,
}


def appended(events: Iterable[Event]) -> None:
    """Count events this process appended: by type, and what each says that is counted."""
    for event in events:
        kind = type(event)
        _appended(kind.__name__).inc()
        stage = STAGE_OF.get(kind)
        if stage is not None:
            _transitions(stage.value).inc()
        elif isinstance(event, PolicyDecided):
            _decisions(event.outcome.value, reason_class(event.reasons[0] if event.reasons else None)).inc()
        elif isinstance(event, CandidateReceived):
            _recorded("received", "none").inc()
        elif isinstance(event, CandidateRejected):
            _recorded("rejected", reason_class(event.reason)).inc()
        elif isinstance(event, Reconciled):
            _reconciliations(event.resolution.value).inc()


def shadowed(capability: str, events: Iterable[Event]) -> None:
    """Count the shadow bundle's decisions among ``events`` (policy appended them for an
    intent of ``capability``)."""
    for event in events:
        if isinstance(event, PolicyDecided) and event.shadow is not None:
            own = set(event.determining)
            policy = ",".join(p for p in event.shadow.determining if p not in own)
            _shadowed(capability, event.outcome.value, event.shadow.outcome.value, policy).inc()


class Reaction:
    """The instruments of one reaction of one service, bound when it is wired.

    Every outcome's counter exists from the start (at zero), so a rate over it is
    defined before the first message that ends that way.
    """

    def __init__(self, service: str, reaction: str) -> None:
        self._seconds = HANDLER_SECONDS.labels(service, reaction)
        self._settled = {
            outcome: DELIVERIES.labels(service, reaction, verb, outcome)
            for outcome, verb in SETTLEMENT_OF.items()
        }
        self._service, self._reaction = service, reaction
        self._requests: dict[bool, Counter] = {}

    def settled(self, outcome: str, seconds: float) -> None:
        """A delivery was settled with the kit's ``outcome`` after ``seconds``."""
        self._seconds.observe(seconds)
        counter = self._settled.get(outcome)
        if counter is None:  # an outcome the table does not know yet: counted all the same
            counter = self._settled[outcome] = DELIVERIES.labels(
                self._service, self._reaction, "other", outcome)
        counter.inc()

    def replied(self, *, failed: bool, seconds: float) -> None:
        """A request was answered after ``seconds`` (``failed``: with ``service.unavailable``)."""
        self._seconds.observe(seconds)
        counter = self._requests.get(failed)
        if counter is None:
            counter = self._requests[failed] = REQUESTS.labels(
                self._service, self._reaction, "unavailable" if failed else "answered")
        counter.inc()


class Adapter:
    """The instruments of one capability an adapter process serves."""

    def __init__(self, capability: str) -> None:
        self._capability = capability
        self._requests = Bound(ADAPTER_REQUESTS)
        self._request_seconds = Bound(ADAPTER_REQUEST_SECONDS)
        self._executions = Bound(ADAPTER_EXECUTIONS)
        self._execute_seconds = ADAPTER_EXECUTE_SECONDS.labels(capability)
        self._orders = Bound(ADAPTER_ORDERS)

    def request(self, operation: str, result: str, seconds: float) -> None:
        """An adapter request (``operation``, one of the SDK's verbs) was answered."""
        self._requests(self._capability, operation, result).inc()
        self._request_seconds(self._capability, operation).observe(seconds)

    def executed(self, result: str, seconds: float) -> None:
        """A call of execute ended with ``result``."""
        self._executions(self._capability, result).inc()
        self._execute_seconds.observe(seconds)

    def order(self, settlement: str) -> None:
        """An execution order was settled."""
        self._orders(self._capability, settlement).inc()


# -- the endpoint ---------------------------------------------------------------------------


@dataclass
class Endpoint:
    """A process's ``/metrics``, served over HTTP from a daemon thread."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        """Where it is scraped: ``http://127.0.0.1:<port>/metrics``."""
        host, port = self.server.server_address[:2]
        host = str(host)
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def stop(self) -> None:
        """Stop serving and free the port."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=2.0)


def start_endpoint(
    settings: Settings, *, port: int | None = None, registry: CollectorRegistry = REGISTRY,
) -> Endpoint | None:
    """Serve ``/metrics`` as ``settings`` say: on loopback, on a free port unless one is set.

    A port that cannot be bound (a fixed one another process holds) is logged and the
    process goes on without metrics: its work matters more than its numbers, and its
    status answer then names no URL.

    Args:
        settings: ``metrics_enabled``, ``metrics_addr``, ``metrics_port``.
        port: this port instead of ``settings.metrics_port`` (0: any free one).
        registry: what to expose.

    Returns:
        The endpoint, or ``None`` when metrics are off or the port could not be bound.
    """
    if not settings.metrics_enabled:
        return None
    # Each counter and histogram would expose a ``_created`` series beside it, doubling
    # what every scrape reads; no dashboard or alert here uses them.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    chosen = settings.metrics_port if port is None else port
    try:
        server, thread = start_wsgi_server(chosen, addr=settings.metrics_addr, registry=registry)
    except OSError as exc:
        log.error("no metrics endpoint: cannot listen on %s:%s (%s)", settings.metrics_addr, chosen, exc)
        return None
    return Endpoint(server, thread)


def url_of(endpoint: Endpoint | None) -> str:
    """The endpoint's URL, or ``""`` without one (what a status answer carries)."""
    return endpoint.url if endpoint is not None else ""


def exposed_names(registry: CollectorRegistry = REGISTRY) -> frozenset[str]:
    """Every sample name ``registry`` can expose, whether or not it has been observed yet.

    A counter exposes ``<name>_total`` (and ``_created``), a histogram ``_bucket``,
    ``_count`` and ``_sum``; a labelled metric exposes nothing before its first child, so
    the names are derived from each family's type, not from the samples.
    """
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("_count", "_sum", "_created", ""),
        "gauge": ("",),
        "info": ("_info",),
        "stateset": ("",),
        "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    }
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return frozenset(names)
