"""``python -m bench.policy``: Lockgate's policy decision against a bare Cedar call, by bundle size.

For generated bundles of 10, 100 and 1,000 policies (forbids on facts, permits per
tenant and actor group, unattended permits per tenant; every one with an ``@id``,
validated against a generated schema by ``PolicyBundle.from_text``), two paths are
timed side by side in the same process on the same requests:

- **lockgate**: ``lockgate.authz.evaluate`` on an ``AuthzRequest`` shaped as
  ``lockgate.authz.intents.authz_request`` builds it — the policy service's path, without
  its cache of decisions (every request is evaluated). It
  asks Cedar up to two questions (may it happen at all; may it happen unattended:
  the second only when the first allows) and builds the ``Decision``.
- **cedar**: one bare ``cedarpy.is_authorized`` with the same prebuilt ``PolicySet``
  handle, a prebuilt request and prebuilt entities: the floor under one question.
- **history**: the lockgate path on the same bundle plus history-reading policies (a tenth
  of its size more: untrusted content and destinations, the run's totals, an actor's hour;
  ``context.history``, ``lockgate.authz.history``), each request carrying a run's history
  rendered from ``HistoryFacts`` as the policy service renders it (that rendering is timed
  too). Reading the history's documents from the broker is the pipeline's, not this.

The requests are a fixed, seeded pool drawn from the generated permits: most are
allowed, some need approval (sensitive documents, tenants without an unattended
permit), some are denied by a forbid. The two paths alternate in short slices so drift
on the machine affects both alike. Latency is per call (``perf_counter_ns``);
throughput is calls over the wall time of the slices. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import cedarpy

from bench import machine
from bench.stats import percentile
from lockgate.authz import AuthzRequest, Decision, PolicyBundle, evaluate
from lockgate.authz.engine import NAMESPACE
from lockgate.authz.history import EMPTY_WINDOW, WINDOWS, HistoryFacts, Window

SIZES = (10, 100, 1000)
ACTIONS = ("doc.edit", "doc.comment", "doc.share", "doc.archive")
STATUSES = ("open", "review", "closed", "locked", "expired", "legal-hold")
REGIONS = ("eu", "us", "apac", "latam")

SCHEMA = f"""
namespace {NAMESPACE} {{
  entity Actor = {{ tenant: String, name: String }};
  // A document as a documents adapter would report it, fresh at every decision.
  entity Doc = {{
    exists: Bool,
    tenant: String,
    status: String,
    region: String,
    classification: Long,
    actor_group: String,
    actor_may_write: Bool,
    writes_suspended: Bool,
    sensitive: Bool,
    version: Long,
  }};
  action {", ".join(f'"{a}", "{a}::unattended"' for a in ACTIONS)} appliesTo {{
    principal: [Actor],
    resource: [Doc],
    context: {{ effect_class: String, digest: String }},
  }};
}}
"""


@dataclass(frozen=True)
class Generated:
    """A generated bundle's text and the tenant/group/action triples its permits allow."""

    text: str
    permits: list[tuple[str, str, str]]
    unattended: set[tuple[str, str]]
    forbids: int


def generate(size: int, seed: int = 7) -> Generated:
    """``size`` policies: ~20 % forbids on facts, ~70 % permits, ~10 % unattended permits."""
    rng = random.Random(seed)
    tenants = [f"tenant-{i}" for i in range(max(1, size // 25))]
    fixed = [
        ('doc.not-found', "unless { resource.exists }"),
        ('doc.tenant-mismatch', "when { resource.exists && resource.tenant != principal.tenant }"),
        ('doc.closed', 'when { resource.status == "closed" }'),
        ('doc.writes-suspended', "when { resource.writes_suspended }"),
        ('doc.not-authorized', "unless { resource.actor_may_write }"),
    ]
    n_forbid = max(len(fixed), size // 5)
    n_unattended = max(1, size // 10)
    n_permit = size - n_forbid - n_unattended
    out: list[str] = []
    for pid, cond in fixed:
        out.append(f'@id("{pid}")\nforbid (principal, action, resource is {NAMESPACE}::Doc)\n{cond};')
    for i in range(n_forbid - len(fixed)):
        kind = i % 3
        if kind == 0:  # a status some tenant blocks
            cond = (f'when {{ resource.tenant == "{rng.choice(tenants)}" && '
                    f'resource.status == "{rng.choice(STATUSES[3:])}" }}')
        elif kind == 1:  # data residency: classified documents stay out of some regions
            cond = (f'when {{ resource.region == "{rng.choice(REGIONS)}" && '
                    f"resource.classification > {rng.randint(3, 5)} }}")
        else:  # one action frozen for one group of one tenant
            cond = (f'when {{ action == {NAMESPACE}::Action::"{rng.choice(ACTIONS)}" && '
                    f'principal.tenant == "{rng.choice(tenants)}" && '
                    f'resource.actor_group == "frozen-{i}" }}')
        out.append(f'@id("doc.blocked-{i}")\n'
                   f"forbid (principal, action, resource is {NAMESPACE}::Doc)\n{cond};")
    permits: list[tuple[str, str, str]] = []
    for i in range(n_permit):
        tenant, action = tenants[i % len(tenants)], ACTIONS[(i // len(tenants)) % len(ACTIONS)]
        group = f"group-{i}"
        permits.append((tenant, group, action))
        out.append(
            f'@id("doc.permit-{i}")\n'
            f'permit (principal, action == {NAMESPACE}::Action::"{action}", '
            f"resource is {NAMESPACE}::Doc)\n"
            f'when {{ principal.tenant == "{tenant}" && resource.tenant == principal.tenant && '
            f'resource.actor_group == "{group}" && resource.classification <= {rng.randint(2, 5)} }};'
        )
    unattended: set[tuple[str, str]] = set()
    for i in range(n_unattended):
        tenant, action = tenants[i % len(tenants)], ACTIONS[(i // len(tenants)) % len(ACTIONS)]
        unattended.add((tenant, action))
        out.append(
            f'@id("doc.unattended-{i}")\n'
            f'permit (principal, action == {NAMESPACE}::Action::"{action}::unattended", '
            f"resource is {NAMESPACE}::Doc)\n"
            f'when {{ principal.tenant == "{tenant}" }}\n'
            "unless { resource.sensitive || resource.classification > 2 };"
        )
    return Generated("\n\n".join(out) + "\n", permits, unattended, n_forbid)


#: The history's types, as the demo bundle's schema declares them (kept in step by reading it).
_HISTORY_TYPES = re.findall(r"  type (?:Classes|Window|History) = \{.*?\};",
                            (Path(__file__).resolve().parents[1] / "deploy" / "policies"
                             / "lockgate.cedarschema").read_text(), re.DOTALL)
HISTORY_SCHEMA = SCHEMA.replace(
    "context: { effect_class: String, digest: String },",
    "context: { effect_class: String, digest: String, destinations: Set<String>,\n"
    "               untrusted_destinations: Set<String>, amount: Long, history: History },",
).replace("  action ", "\n".join(_HISTORY_TYPES) + "\n  action ", 1)


def history_policies(size: int, seed: int = 13) -> str:
    """A tenth of ``size`` more policies that read the run's history."""
    rng = random.Random(seed)
    out = []
    for i in range(max(3, size // 10)):
        action = ACTIONS[i % len(ACTIONS)]
        kind = i % 3
        if kind == 0:
            cond = "context.history.untrusted && !context.untrusted_destinations.isEmpty()"
        elif kind == 1:
            cond = f"context.history.run.amount + context.amount > {rng.randint(1000, 5000)}"
        else:
            cond = f"context.history.actor_hour.publish >= {rng.randint(10, 40)}"
        out.append(f'@id("doc.history-{i}")\nforbid (principal, action == {NAMESPACE}::Action::'
                   f'"{action}::unattended", resource is {NAMESPACE}::Doc)\nwhen {{ {cond} }};')
    return "\n\n".join(out) + "\n"


def histories(count: int = 64, seed: int = 17) -> list[HistoryFacts]:
    """A seeded pool of runs' histories: some untrusted, running totals, busy hours."""
    rng = random.Random(seed)
    pool = []
    for _ in range(count):
        run = Window({"read": rng.randint(0, 20), "publish": rng.randint(0, 5)}, rng.randint(0, 4000))
        pool.append(HistoryFacts(
            executed=frozenset({"doc.edit", "doc.comment"}),
            untrusted_from=frozenset({"mail.read"} if rng.random() < 0.3 else ()),
            destinations=frozenset(f"user-{rng.randint(0, 9)}@example.com" for _ in range(3)),
            approvals=rng.randint(0, 2), run=run,
            windows={name: Window({"publish": rng.randint(0, 40)}, 0) if "hour" in name
                     else EMPTY_WINDOW for name in WINDOWS},
        ))
    return pool


def with_history(req: AuthzRequest, facts: HistoryFacts,
                 reads: frozenset[str] | None = None) -> AuthzRequest:
    """``req`` with the history context the policy service adds (rendered now, as it is
    there: only the attributes the bundle's policies read, ``reads``)."""
    return AuthzRequest(
        tenant=req.tenant, actor=req.actor, capability=req.capability,
        resource_type=req.resource_type, resource_id=req.resource_id,
        resource_facts=req.resource_facts,
        context={**req.context, "destinations": ["user-1@example.com"],
                 "untrusted_destinations": [], "amount": 100, "history": facts.context(reads)},
    )


def requests(gen: Generated, count: int = 256, seed: int = 11) -> list[AuthzRequest]:
    """A seeded pool: requests that a permit matches, ~10 % sensitive, ~10 % closed."""
    rng = random.Random(seed)
    pool = []
    for i in range(count):
        tenant, group, action = rng.choice(gen.permits)
        facts: dict[str, Any] = {
            "exists": True, "tenant": tenant,
            "status": "closed" if rng.random() < 0.1 else rng.choice(STATUSES[:2]),
            "region": rng.choice(REGIONS), "classification": rng.randint(0, 2),
            "actor_group": group, "actor_may_write": True, "writes_suspended": False,
            "sensitive": rng.random() < 0.1, "version": rng.randint(0, 50),
        }
        # As lockgate.authz.intents.authz_request builds it from an intent and its facts.
        pool.append(AuthzRequest(
            tenant=tenant, actor=f"user-{i % 97}", capability=action, resource_type="Doc",
            resource_id=f"doc-{i}", resource_facts=facts,
            context={"effect_class": "write", "digest": f"sha256:{i:064x}"},
        ))
    return pool


def _history_call(bundle: PolicyBundle, req: AuthzRequest, facts: HistoryFacts) -> Callable[[], Decision]:
    """One decision with the run's history rendered into the request, as policy makes it."""
    return lambda: evaluate(bundle, with_history(req, facts, bundle.history_reads))


def bare_call(bundle: PolicyBundle, req: AuthzRequest) -> Callable[[], Any]:
    """One ``cedarpy.is_authorized`` on the bundle's PolicySet, everything prebuilt."""
    principal = {"type": f"{NAMESPACE}::Actor", "id": f"{req.tenant}/{req.actor}"}
    resource = {"type": f"{NAMESPACE}::{req.resource_type}", "id": req.resource_id}
    request = {"principal": principal, "resource": resource, "context": req.context,
               "action": {"type": f"{NAMESPACE}::Action", "id": req.capability}}
    entities = [
        {"uid": principal, "attrs": {"tenant": req.tenant, "name": req.actor}, "parents": []},
        {"uid": resource, "attrs": req.resource_facts, "parents": []},
    ]
    policies = bundle.policies
    return lambda: cedarpy.is_authorized(request, policies, entities)


@dataclass
class Timing:
    """Per-call latencies and the wall time they were taken in."""

    latencies_ns: list[int] = field(default_factory=list)
    wall_ns: int = 0

    @property
    def per_s(self) -> float:
        """Calls per second of wall time."""
        return len(self.latencies_ns) / (self.wall_ns / 1e9) if self.wall_ns else math.nan

    def us(self, q: float) -> float:
        """A latency percentile, in microseconds."""
        return percentile(sorted(self.latencies_ns), q) / 1000.0


def timed(calls: Sequence[Callable[[], Any]], start: int, n: int, into: Timing) -> int:
    """Run ``n`` calls from the pool (cycling) and record each one's latency."""
    clock = time.perf_counter_ns
    lat = into.latencies_ns
    size = len(calls)
    began = clock()
    for i in range(start, start + n):
        call = calls[i % size]
        t0 = clock()
        call()
        lat.append(clock() - t0)
    into.wall_ns += clock() - began
    return start + n


@dataclass
class SizeResult:
    """One bundle size: how it was built and how both paths did."""

    size: int
    forbids: int
    load_ms: float
    outcomes: Counter[str]
    questions_per_decision: float
    lockgate: Timing
    cedar: Timing
    history: Timing


def measure(size: int, seconds: float, slice_n: int = 200) -> SizeResult:
    """Build a ``size``-policy bundle and time both paths, alternating, for ~``seconds``."""
    gen = generate(size)
    t0 = time.perf_counter()
    # Uncached: the pool repeats its requests, and every evaluation is what is timed here
    # (the policy service keeps decisions by what the policies read: PolicyBundle.decisions).
    bundle = PolicyBundle.from_text(gen.text, SCHEMA, cache_decisions=0)
    load_ms = (time.perf_counter() - t0) * 1000
    if len(bundle.order) != size:
        raise RuntimeError(f"generated {len(bundle.order)} policies, wanted {size}")
    pool = requests(gen)
    decisions = [evaluate(bundle, r) for r in pool]
    outcomes = Counter(str(d.outcome) for d in decisions)
    errors = [e for d in decisions for e in d.errors]
    if errors:
        raise RuntimeError(f"generated requests fail to evaluate: {errors[:3]}")
    questions = sum(2 if d.outcome != "deny" else 1 for d in decisions) / len(decisions)
    lockgate_calls = [(lambda r=r: evaluate(bundle, r)) for r in pool]
    cedar_calls = [bare_call(bundle, r) for r in pool]
    with_runs = PolicyBundle.from_text(gen.text + "\n" + history_policies(size), HISTORY_SCHEMA,
                                       cache_decisions=0)
    runs = histories()
    history_calls = [_history_call(with_runs, r, runs[k % len(runs)]) for k, r in enumerate(pool)]
    if any(c().errors for c in history_calls):
        raise RuntimeError("requests with a history fail to evaluate")
    lg, cd, hi = Timing(), Timing(), Timing()
    # Warm every path (allocator, caches), then alternate slices until the time is spent.
    for calls in (lockgate_calls, cedar_calls, history_calls):
        timed(calls, 0, min(slice_n, len(pool)), Timing())
    deadline = time.perf_counter() + seconds
    i = j = k = 0
    while time.perf_counter() < deadline or not lg.latencies_ns:
        i = timed(lockgate_calls, i, slice_n, lg)
        j = timed(cedar_calls, j, slice_n, cd)
        k = timed(history_calls, k, slice_n, hi)
    return SizeResult(size, gen.forbids, load_ms, outcomes, questions, lg, cd, hi)


def summary(results: list[SizeResult]) -> dict[str, Any]:
    """The final JSON line."""

    def num(x: float, digits: int) -> float | None:
        return None if math.isnan(x) else round(x, digits)

    return {"policies": {str(r.size): {
        "lockgate_per_s": num(r.lockgate.per_s, 1),
        "lockgate_p50_us": num(r.lockgate.us(0.5), 1),
        "lockgate_p99_us": num(r.lockgate.us(0.99), 1),
        "history_per_s": num(r.history.per_s, 1),
        "history_p50_us": num(r.history.us(0.5), 1),
        "history_p99_us": num(r.history.us(0.99), 1),
        "cedar_per_s": num(r.cedar.per_s, 1),
        "cedar_p50_us": num(r.cedar.us(0.5), 1),
        "cedar_p99_us": num(r.cedar.us(0.99), 1),
        "questions_per_decision": round(r.questions_per_decision, 2),
        "load_ms": round(r.load_ms, 1),
    } for r in results}}


HEADER = ["policies", "load ms", "path", "calls", "per s", "p50 us", "p99 us", "max us"]


def table(results: list[SizeResult]) -> str:
    """Both paths per bundle size, as an aligned text table."""
    rows = [HEADER]
    for r in results:
        for name, t in (("lockgate", r.lockgate), ("history", r.history), ("cedar", r.cedar)):
            rows.append([str(r.size), f"{r.load_ms:.1f}" if name == "lockgate" else "", name,
                         str(len(t.latencies_ns)), f"{t.per_s:,.0f}", f"{t.us(0.5):.1f}",
                         f"{t.us(0.99):.1f}", f"{t.us(1.0):.0f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.rjust(w) if i != 2 else c.ljust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run(quick: bool, *, sizes: Sequence[int] = SIZES, seconds: float | None = None,
        out: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure every size, print the machine and the table, return the JSON summary.

    Args:
        quick: about 1.5 s per size instead of about 15 s.
        sizes: bundle sizes to generate (at least 10 policies each).
        seconds: time per size, overriding ``quick``.
        out: where the lines go.

    Returns:
        ``{"policies": {"10": {"lockgate_per_s": …, …}, …}}``
    """
    per_size_s = seconds if seconds is not None else (1.5 if quick else 15.0)
    out("machine")
    facts = {"nproc": str(machine.nproc()), "cpu": machine.cpu_model(),
             "python": f"{platform.python_version()} ({platform.python_implementation()})",
             "cedarpy": metadata.version("cedarpy"), "lockgate": machine.checkout()}
    for key, value in facts.items():
        out(f"  {key:<9} {value}")
    out(f"plan: sizes {list(sizes)}, ~{per_size_s:g} s per size, both paths alternating")
    results = []
    for size in sizes:
        print(f"[bench.policy] {size} policies", file=sys.stderr, flush=True)
        results.append(measure(size, per_size_s))
    out("")
    out(table(results))
    out("")
    for r in results:
        mix = ", ".join(f"{k} {v}" for k, v in sorted(r.outcomes.items()))
        ratio = r.lockgate.per_s / r.cedar.per_s if r.cedar.per_s else math.nan
        # Mean time per decision over mean time per bare question, per question asked.
        per_question = 1 / (ratio * r.questions_per_decision) if ratio else math.nan
        out(f"{r.size:>5} policies ({r.forbids} forbids): request pool {mix}; "
            f"{r.questions_per_decision:.2f} Cedar questions per Lockgate decision; "
            f"Lockgate decides at {ratio:.2f}x the bare single-call rate, "
            f"{per_question:.2f}x a bare call per question asked")
    figures = summary(results)
    out(json.dumps(figures))
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.policy``."""
    p = argparse.ArgumentParser(prog="python -m bench.policy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="about 1.5 s per size (~10 s in all)")
    p.add_argument("--seconds", type=float, default=None, help="time per size (default 15)")
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), metavar="N")
    args = p.parse_args(argv)
    if any(s < 10 for s in args.sizes):
        p.error("--sizes: at least 10 policies")
    # Collections still run (they are part of the real cost); start each run clean.
    gc.collect()
    run(args.quick, sizes=args.sizes, seconds=args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
