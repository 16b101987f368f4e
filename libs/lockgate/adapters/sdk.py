"""The adapter SDK, in one import: what an author writes against and the worker that serves it.

``from lockgate.adapters.sdk import Adapter, Completed, Rejected, run_adapter`` is all an
adapter process needs. The parts live in these modules:

- ``lockgate.adapters.api``: the ``Adapter`` base class, ``SendBoundary``, ``Completed``
  and the outcomes an adapter raises (``Rejected``, ``NotSent``, ``Interrupted``); its
  docstring says how to write an adapter;
- ``lockgate.adapters.claims``: the send boundary, claimed by asking the executor, which
  checks the order against the intent's record (``lockgate.executor.claims``);
- ``lockgate.adapters.worker``: the worker that consumes orders, registers and
  heartbeats (``serve``, ``run_adapter``); ``lockgate.adapters.attempts`` runs one order to
  its end (execute, claim the boundary, report, settle);
- ``lockgate.adapters.functions``: ``@capability``, which makes a typed Python function a
  capability contract and the adapter serving it, served by ``lockgate adapter serve
  module:attr``; ``lockgate.adapters.parameters`` says where each argument comes from
  (``Context``, ``IntentKey``), ``lockgate.adapters.shapes`` puts pydantic's answers in the
  contract's terms.

The subjects are built in ``lockgate.contracts.subjects``; the names below that end in
``_subject`` are its builders under the names this module has always had.
"""

from lockgate.adapters.api import (
    DETAIL_MAX_CHARS,
    Adapter,
    AdapterError,
    BoundaryRefused,
    Completed,
    Interrupted,
    NotSent,
    Rejected,
    SendBoundary,
    bounded,
)
from lockgate.adapters.claims import ClaimClient, ClaimUnanswered
from lockgate.adapters.functions import (
    CapabilityFunction,
    Context,
    DeclarationError,
    IntentKey,
    capability,
)
from lockgate.adapters.worker import (
    HEARTBEAT_S,
    RETRY_DELAY_S,
    CapabilityWorker,
    consumer_name,
    invocations,
    queue_group,
    run_adapter,
    serve,
)
from lockgate.contracts.proofs import DEADLINE_MARGIN_S
from lockgate.contracts.subjects import adapter as request_subject
from lockgate.contracts.subjects import interrupt as interrupt_subject
from lockgate.contracts.subjects import order as exec_subject
from lockgate.contracts.subjects import parse_report_subject
from lockgate.contracts.subjects import report as report_subject

__all__ = [
    "DEADLINE_MARGIN_S",
    "DETAIL_MAX_CHARS",
    "HEARTBEAT_S",
    "RETRY_DELAY_S",
    "Adapter",
    "AdapterError",
    "BoundaryRefused",
    "CapabilityFunction",
    "CapabilityWorker",
    "ClaimClient",
    "ClaimUnanswered",
    "Completed",
    "Context",
    "DeclarationError",
    "IntentKey",
    "Interrupted",
    "NotSent",
    "Rejected",
    "SendBoundary",
    "bounded",
    "capability",
    "consumer_name",
    "exec_subject",
    "interrupt_subject",
    "invocations",
    "parse_report_subject",
    "queue_group",
    "report_subject",
    "request_subject",
    "run_adapter",
    "serve",
]
