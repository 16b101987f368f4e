"""``lockgate``: run the system, check it, propose from the shell, review, operate, read worlds.

Every command finds the running system by itself: the URL and the credentials
``lockgate run`` made are under its ``var`` directory (``run.json``, ``credentials/``),
and each command connects as the role it needs: ``propose`` as the tenant's agent
runtime (and the trusted host to open the run), ``review …`` as a reviewer,
``reconcile``, ``withdraw``, ``events``, ``intents`` and ``status`` as an operator.
Global options (``--url``, ``--var-dir``, ``--json``) go before or after the command.

Every command answers a person by default (tables, a short record, a sentence) and a
script with ``--json`` (one JSON document for a record, JSON Lines for rows, nothing
else on stdout); an error is one line on stderr and a non-zero exit either way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from nats.errors import Error as NatsError
from pydantic import ValidationError

from lockgate.adapters import serve as adapter_cli
from lockgate.client import tokens
from lockgate.client.demo import SCENARIOS, Scenario
from lockgate.client.discovery import Local, find_local
from lockgate.client.output import Output
from lockgate.client.sdk import ClientError, Gateway, connect
from lockgate.contracts.consequence import clean
from lockgate.contracts.vocabulary import Finding
from lockgate.core.errors import LockgateError
from lockgate.core.ids import is_subject_token, random_id
from lockgate.mcp import cli as mcp_cli
from lockgate.replay import cli as replay_cli
from lockgate.runtime.deployment import (
    Credentials,
    Deployment,
    read_run_info,
)
from lockgate.runtime.roles import REPLAY
from lockgate.runtime.settings import Settings

if TYPE_CHECKING:
    from lockgate.views.store import Views



class UsageError(LockgateError):
    """A command that cannot run as asked (one line says why)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="cli.usage")


# -- where the system is, and as whom to connect ----------------------------------------------


@dataclass(frozen=True)
class Where:
    """The running system as this command sees it (``lockgate.client.discovery``)."""

    local: Local
    settings: Settings

    @property
    def url(self) -> str:
        return self.local.url

    @property
    def var_dir(self) -> Path:
        return self.local.var_dir

    @property
    def deployment(self) -> Deployment | None:
        return self.local.deployment

    def credentials(self, user: str) -> Credentials | None:
        """``user``'s credentials, or ``None`` on a broker without users.

        Raises:
            UsageError: the deployment has users but not this one.
        """
        try:
            return self.local.credentials(user)
        except LookupError as exc:
            raise UsageError(str(exc)) from None

    def person(self, kind: str, chosen: str | None) -> str:
        """The reviewer or operator to act as: ``--as``, else the only or first one configured."""
        if chosen:
            return chosen
        people = self.settings.reviewers if kind == "reviewer" else self.settings.operators
        if self.deployment is not None:
            prefix = f"{kind}-"
            have = sorted(u[len(prefix):] for u in self.deployment.credentials if u.startswith(prefix))
            ordered = [p for p in people if p in have] or have
            if ordered:
                return ordered[0]
        if people:
            return next(iter(people))
        raise UsageError(f"no {kind} configured: pass --as NAME")

    async def gateway(self, user: str, *, host: bool = False, principal: str = "") -> Gateway:
        """A connection as ``user`` (and as the trusted host when ``host``)."""
        creds = self.credentials(user)
        host_creds = self.credentials("host") if host else None
        try:
            gw = await connect(self.url, credentials=creds, host=host_creds)
        except ClientError as exc:
            raise ClientError(
                f"cannot reach Lockgate at {self.url} (is `lockgate run` running?): "
                f"{exc.__cause__ or exc}", code=exc.code,
            ) from None
        if creds is None:
            gw.user, gw.principal = user, principal or user
        return gw


def locate(args: argparse.Namespace) -> Where:
    """Find the system: ``--url`` or ``LOCKGATE_NATS_URL``, else what ``lockgate run`` wrote."""
    settings = Settings()
    return Where(find_local(getattr(args, "url", None), settings.var_dir), settings)


# -- commands -------------------------------------------------------------------------------


def _context(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--context expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def _token(value: str, what: str) -> str:
    if not is_subject_token(value):
        raise UsageError(f"{what} {value!r} is not an id ([A-Za-z0-9_-], at most 64)")
    return value


async def _propose(args: argparse.Namespace, where: Where, out: Output) -> int:
    gw = await where.gateway(f"agent-{_token(args.tenant, 'tenant')}", host=True)
    try:
        run = await gw.open_run(tenant=args.tenant, actor=args.actor, context=_context(args.context))
        turn = await run.open_turn()
        resp = await turn.propose(tool=args.tool, arguments=args.arguments,
                                  call_id=args.call_id, timeout_s=args.timeout)
        out.record(msgspec.to_builtins(resp))
        return 0
    finally:
        await gw.close()


async def _play(gw: Gateway, s: Scenario) -> tuple[str, str, str | None]:
    run = await gw.open_run(tenant=s.tenant, actor=s.actor, context={"case_id": s.case})
    turn = await run.open_turn()
    call_id = random_id()
    resp = await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id)
    if s.repeat:
        again = await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id)
        if again != resp:
            return "mismatch", "repeat.differs", None
    return resp.status, resp.code, resp.field


async def _demo(args: argparse.Namespace, where: Where, out: Output) -> int:
    from lockgate.worlds.casenotes.adapter import CaseWorldSettings
    from lockgate.worlds.casenotes.world import World

    world = World(_world_dir(CaseWorldSettings().dir, "case"))
    gateways: dict[str, Gateway] = {}
    failures = 0
    played: list[dict[str, object]] = []
    try:
        for s in SCENARIOS:
            if s.tenant not in gateways:
                gateways[s.tenant] = await where.gateway(f"agent-{s.tenant}", host=True)
            before = (world.invocations, len(world.ledger()))
            status, code, field = await _play(gateways[s.tenant], s)
            after = (world.invocations, len(world.ledger()))
            ok = (status, code, field) == (s.status, s.code, s.field) and (
                after[0] - before[0], after[1] - before[1]) == (s.invocations, s.ledger)
            failures += not ok
            played.append({
                "scenario": s.name, "status": status, "code": code, "field": field,
                "adapter_invocations": after[0] - before[0], "ledger_writes": after[1] - before[1],
                "ledger_total": after[1], "as_expected": ok,
            })
    finally:
        for gw in gateways.values():
            await gw.close()
    out.rows({"SCENARIO": "scenario", "STATUS": "status", "CODE": "code", "FIELD": "field",
              "ADAPTER CALLS": "adapter_invocations", "LEDGER WRITES": "ledger_writes",
              "AS EXPECTED": "as_expected"}, played)
    out.note(f"{len(SCENARIOS) - failures} scenarios as expected, {failures} not")
    return 1 if failures else 0


def _world_dir(directory: Path, name: str) -> Path:
    if not directory.is_dir():
        raise UsageError(
            f"no {name} world in {directory}: `lockgate run` creates it on first start "
            "(or set LOCKGATE_VAR_DIR to where it runs)")
    return directory


def _world(args: argparse.Namespace, out: Output) -> int:
    if args.world not in ("case", "items", "repo"):
        raise UsageError(f"unknown world {args.world!r}; known: case, items, repo")
    if args.world_command == "fault":
        return _arm(args, out)
    if args.world == "case":
        from lockgate.worlds.casenotes.adapter import CaseWorldSettings
        from lockgate.worlds.casenotes.world import print_ledger

        print_ledger(_world_dir(CaseWorldSettings().dir, "case"), out)
        return 0
    if args.world == "repo":
        from lockgate.worlds.repo.adapter import RepoWorldSettings
        from lockgate.worlds.repo.world import print_ledger as print_repo

        print_repo(_world_dir(RepoWorldSettings().dir, "repo"), out)
        return 0
    from lockgate.worlds.items.adapter import ItemsWorldSettings
    from lockgate.worlds.items.world import print_ledger as print_items

    print_items(_world_dir(ItemsWorldSettings().dir, "items"), out)
    return 0


def _arm(args: argparse.Namespace, out: Output) -> int:
    if args.world != "items":
        raise UsageError("faults can be armed in the items world: lockgate world fault items …")
    from lockgate.worlds.items.adapter import ItemsWorldSettings
    from lockgate.worlds.items.world import World

    world = World(_world_dir(ItemsWorldSettings().dir, "items"))
    try:
        world.inject(args.server, args.fault, args.times)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    faults = world.faults()
    armed = ", ".join(f"{f['fault']} on {f['server']} ({f['remaining']} left)" for f in faults)
    out.record({"armed": args.fault, "server": args.server, "times": args.times, "faults": faults},
               text=f"armed {args.fault} on server {args.server} for the next {args.times} "
                    f"call(s); armed now: {armed or 'none'}")
    return 0


async def _operator(where: Where, args: argparse.Namespace) -> Gateway:
    person = where.person("operator", getattr(args, "as_", None))
    return await where.gateway(f"operator-{person}", principal=person)


async def _views(where: Where, args: argparse.Namespace, out: Output, *,
                 user: str | None = None) -> Views:
    """The views, once the projector says they hold every event stored before now.

    Asked as an operator on ``lg.status.projector``: the projector answering as the
    lease holder reports how far the views lag the stream at that moment. If it does
    not say 0 within ``--wait`` seconds, the views are read as they are and a note
    on stderr says they may lag.
    """
    from lockgate.views.store import open_views

    gw = await (where.gateway(user) if user else _operator(where, args))
    try:
        lag = await _views_lag(gw, float(getattr(args, "wait", 5.0)))
    finally:
        await gw.close()
    if lag != 0:
        why = "the projector did not answer" if lag is None else f"{lag} events behind"
        out.warn(f"the views may not show the latest events ({why})")
    return open_views(where.settings.views_url, var_dir=where.var_dir)


async def _views_lag(gw: Gateway, wait_s: float) -> int | None:
    """How many events the views lag the stream (``None``: no projector answered)."""
    from lockgate.contracts import subjects

    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    lag: int | None = None
    while True:
        inbox = gw.nc.new_inbox()
        sub = await gw.nc.subscribe(inbox)
        try:
            await gw.nc.publish(subjects.status("projector"), b"", reply=inbox)
            end = loop.time() + 0.5
            while loop.time() < end:  # every replica answers; the one projecting has a lag
                try:
                    msg = await sub.next_msg(timeout=max(0.01, end - loop.time()))
                except (TimeoutError, NatsError):
                    break
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    lag = int(json.loads(msg.data)["consumers"]["views"]["pending"])
                    break
        finally:
            await sub.unsubscribe()
        if lag == 0 or loop.time() > deadline:
            return lag
        await asyncio.sleep(0.1)


async def _events(args: argparse.Namespace, where: Where, out: Output) -> int:
    from lockgate.intent.codec import decode_event
    from lockgate.views.rows import recorded

    tenant, intent = _token(args.tenant, "tenant"), _token(args.intent, "intent")
    views = await _views(where, args, out)
    try:
        rows = [r for r in views.events_of(intent) if r.tenant == tenant]
        chain = [r for r in views.lineage(intent) if r.tenant == tenant]
    finally:
        views.close()
    if not rows:
        raise UsageError(f"no events for intent {intent} in tenant {tenant}")
    timeline = [{"version": row.version, "type": row.event_type, "sequence": row.sequence,
                 "event": msgspec.to_builtins(decode_event(recorded(row)))} for row in rows]
    out.rows({"VERSION": "version", "SEQUENCE": "sequence", "TYPE": "type",
              "AT": lambda e: _minute(e["event"].get("timestamp")),
              "DETAIL": lambda e: _detail(e["event"])}, timeline)
    if not out.json:
        out.note("(--json prints every event whole)")
    if len(chain) > 1:  # the candidates it corrects or follows, and those that follow it
        lineage = [{"intent": r.intent_id, "call": r.call_id, "tool": r.tool,
                    "follows": r.follows or None, "how": r.follows_how or None,
                    "kind": r.lineage or None, "state": r.state, "reason": r.reason,
                    "this": r.intent_id == intent} for r in chain]
        if out.json:
            out.record({"lineage": lineage})
        else:
            out.note("its lineage (the candidates it follows or corrects, and those after it):")
            out.rows({"": lambda r: "->" if r["this"] else "", "INTENT": "intent", "TOOL": "tool",
                      "KIND": "kind", "HOW": "how", "STATE": "state", "REASON": "reason"}, lineage)
    return 0


#: What a person reads of an event in ``lockgate events`` (``--json`` prints each whole).
_EVENT_DETAIL = ("reason", "outcome", "stage", "field", "reviewer", "by", "why", "detail")


def _detail(event: dict[str, object]) -> str:
    shown = [f"{k} {event[k]}" for k in _EVENT_DETAIL if event.get(k) not in (None, "", [], {})]
    return "; ".join(shown[:3])


def _minute(value: object) -> str:
    return str(value or "")[:19].replace("T", " ")


async def _intents(args: argparse.Namespace, where: Where, out: Output) -> int:
    views = await _views(where, args, out)
    try:
        rows = views.intents(tenant=args.tenant, state=args.state, limit=args.limit,
                             before=args.before)
    finally:
        views.close()
    out.rows({"INTENT": "intent", "TENANT": "tenant", "TOOL": "tool", "STATE": "state",
              "REASON": "reason", "ATTEMPTS": "attempts", "UPDATED": lambda r: _minute(r["updated_at"]),
              "POSITION": "position"},
             [{"intent": row.intent_id, "tenant": row.tenant, "run": row.run_id, "tool": row.tool,
               "state": row.state, "reason": row.reason, "model_status": row.model_status,
               "attempts": row.attempts, "attempt_stage": row.attempt_stage,
               "follows": row.follows or None, "lineage": row.lineage or None,
               "updated_at": row.updated_at, "position": row.last_sequence} for row in rows],
             empty="no intents match")
    if rows and len(rows) == args.limit and not out.json:
        out.note(f"the next page: --before {rows[-1].last_sequence}")
    return 0


async def _reconcile(args: argparse.Namespace, where: Where, out: Output) -> int:
    gw = await _operator(where, args)
    try:
        event = await gw.resolve_outcome(
            tenant=_token(args.tenant, "tenant"), candidate_id=_token(args.intent, "intent"),
            finding=Finding.CONFIRMED if args.confirmed else Finding.ABSENT, why=args.why,
        )
    finally:
        await gw.close()
    found = "happened" if args.confirmed else "did not happen"
    out.record({"recorded": event, "by": gw.principal},
               text=f"recorded {event} for intent {args.intent} by {gw.principal}: the effect {found}")
    return 0


async def _withdraw(args: argparse.Namespace, where: Where, out: Output) -> int:
    gw = await _operator(where, args)
    try:
        resp = await gw.withdraw(_token(args.tenant, "tenant"), _token(args.intent, "intent"),
                                 why=args.why)
    finally:
        await gw.close()
    out.record(msgspec.to_builtins(resp))
    return 0


async def _review(args: argparse.Namespace, where: Where, out: Output) -> int:
    from lockgate.client import tables

    person = where.person("reviewer", args.as_)
    user = f"reviewer-{person}"
    if args.review_command == "list":
        views = await _views(where, args, out, user=user)
        try:
            scope = where.settings.reviewers.get(person) or ()
            rows = [r for r in views.reviews(tenant=args.tenant, status="waiting", limit=args.limit)
                    if not scope or r.tenant in scope]
        finally:
            views.close()
        out.rows(tables.REVIEW_QUEUE, [msgspec.to_builtins(row) for row in rows],
                 empty="no review waits")
        return 0
    tenant, intent = _token(args.tenant, "tenant"), _token(args.intent, "intent")
    gw = await where.gateway(user, principal=person)
    try:
        review = await gw.show_review(tenant=tenant, candidate_id=intent)
        shown = msgspec.to_builtins(review)
        if args.review_command == "show":
            out.record(shown, text=tables.review_page(review))
            return 0
        if args.digest and args.digest != review.digest:
            raise UsageError(f"the review is of {review.digest}, not {args.digest}")
        if args.review_command == "edit":
            edited = await gw.edit_review(
                tenant=tenant, candidate_id=intent, review_id=review.review_id,
                digest=review.digest, arguments=args.arguments, reason=args.why)
            out.record({"edited_into": edited.candidate_id, "call_id": edited.call_id,
                        "reviewer": person, "review": shown},
                       text=f"edited by {person}: {review.candidate_id} will not run; the new "
                            f"candidate {edited.candidate_id} crosses every gate again")
            return 0
        event = await gw.decide_review(
            tenant=tenant, candidate_id=intent, review_id=review.review_id,
            digest=review.digest, approve=args.review_command == "approve", reason=args.why,
        )
    finally:
        await gw.close()
    verb = "approved" if args.review_command == "approve" else "denied"
    out.record({"recorded": event, "reviewer": person, "review": shown},
               text=f"{verb} by {person}: {clean(review.action or review.summary, 400)}\n"
                    f"recorded {event} for candidate {review.candidate_id} ({review.digest})")
    return 0


def _world_dirs() -> dict[str, Path]:
    from lockgate.worlds.casenotes.adapter import CaseWorldSettings
    from lockgate.worlds.items.adapter import ItemsWorldSettings
    from lockgate.worlds.repo.adapter import RepoWorldSettings

    return {"case": CaseWorldSettings().dir, "items": ItemsWorldSettings().dir,
            "repo": RepoWorldSettings().dir}


async def _eval(args: argparse.Namespace, where: Where, out: Output) -> int:
    """Grade runs' proposals and check containment; with ``--suite``, run the scripted agents first.

    Exits 1 when a hard invariant failed (the boundary did not hold), else 0.
    """
    from lockgate.evaluation import as_json, evaluate, render
    from lockgate.evaluation import suite as scripted
    from lockgate.evaluation.ledgers import world_writes
    from lockgate.evaluation.record import relevant_writes, run_histories

    runs = [_token(r, "run") for r in args.runs]
    if not runs and args.suite is None:
        raise UsageError("name the runs to evaluate, or --suite DIR to run scripted tasks first")
    worlds = _world_dirs()
    result: scripted.SuiteResult | None = None
    if args.suite is not None:
        tasks = scripted.load_tasks(args.suite)

        async def agent(tenant: str) -> Gateway:
            return await where.gateway(f"agent-{_token(tenant, 'tenant')}", host=True)

        bundle = where.settings.policy_dir.resolve()
        with contextlib.suppress(ValueError):  # said as the user would type it, when it can be
            bundle = bundle.relative_to(Path.cwd())
        result = await scripted.run_suite(tasks, agent, worlds, timeout_s=args.timeout,
                                          policy_dir=str(bundle))
        runs += [t.run_id for t in result.tasks]
    views = await _views(where, args, out)
    try:
        histories = run_histories(views, runs, tenant=args.tenant)
        writes = relevant_writes(views, histories, world_writes(worlds))
    finally:
        views.close()
    if not histories:
        raise UsageError(f"no candidates on record for {', '.join(runs)}")
    report = evaluate(histories, writes)
    if result is not None:
        result = scripted.with_record(result, histories)
    text = render(report) if result is None else f"{scripted.render(result)}\n\n{render(report)}"
    out.record({"suite": msgspec.to_builtins(result) if result is not None else None,
                "report": as_json(report)}, text=text)
    return 0 if report.containment.passed else 1


def _status(args: argparse.Namespace, where: Where, out: Output) -> int:
    from lockgate.runtime.cli_ops import cmd_status

    person = where.person("operator", getattr(args, "as_", None))
    return asyncio.run(cmd_status(where.url, where.credentials(f"operator-{person}"),
                                  read_run_info(where.var_dir), output=out))


def _run(args: argparse.Namespace, out: Output) -> int:
    from lockgate.runtime.cli_ops import cmd_run

    settings = Settings() if args.url is None else Settings(nats_url=args.url)
    embedded = args.url is None and "LOCKGATE_NATS_URL" not in os.environ
    run_args = argparse.Namespace(settings=settings, port=args.port, embedded=embedded,
                                  cluster=args.cluster, partitions=args.partitions)
    if not out.json:
        return cmd_run(run_args)
    # It serves until stopped and answers nothing: with --json its log is kept off stdout.
    with contextlib.redirect_stdout(sys.stderr):
        return cmd_run(run_args)


# -- the parser -----------------------------------------------------------------------------


def _globals(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--url``, ``--var-dir`` and ``--json``, accepted before the command and after it."""
    default = None if top else argparse.SUPPRESS
    p.add_argument("--url", default=default,
                   help="NATS URL (default: LOCKGATE_NATS_URL, else the one `lockgate run` chose)")
    p.add_argument("--var-dir", type=Path, default=default,
                   help="the deployment's var directory (default: LOCKGATE_VAR_DIR, else the checkout's var/)")
    json_flag(p, top=top)


def json_flag(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--json``: machine output only (one JSON document, or JSON Lines for rows).

    Given on a subcommand's parser with ``top`` false, it does not reset what was given
    before the subcommand (argparse would write a subparser's default over it).
    """
    p.add_argument("--json", action="store_true", default=False if top else argparse.SUPPRESS,
                   help="machine output: one JSON document, or JSON Lines for rows; "
                        "nothing else on stdout")


def _as(p: argparse.ArgumentParser, kind: str) -> None:
    p.add_argument("--as", dest="as_", metavar="NAME", default=None,
                   help=f"the {kind} to act as (default: the first one configured)")


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(prog="lockgate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _globals(p, top=True)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_)
        _globals(c)
        return c

    run = command("run", "start the whole system on this machine (what `make run` does)")
    run.add_argument("--port", type=int, default=None,
                     help="port of the embedded nats-server (with --cluster: of the first node; "
                          "0: ephemeral ports)")
    run.add_argument("--cluster", type=int, default=0, metavar="N",
                     help="run N nats-server nodes as one JetStream cluster on loopback, R3 "
                          "streams, two replicas of every service and adapter, views on "
                          "PostgreSQL (what `make cluster` does)")
    run.add_argument("--partitions", type=int, default=None, metavar="K",
                     help="keep the events in K streams, each with its own leader (default: "
                          "1; with --cluster N: N, the leaders spread over the nodes)")
    _as(command("status", "exit 0 only when every service and adapter answers and makes progress"),
        "operator")
    pr = command("propose", "propose one tool call and print the model-facing response")
    pr.add_argument("--tenant", required=True)
    pr.add_argument("--actor", required=True)
    pr.add_argument("--context", action="append", default=[], metavar="KEY=VALUE")
    pr.add_argument("--tool", required=True)
    pr.add_argument("--arguments", required=True, help="raw argument text, exactly as the model wrote it")
    pr.add_argument("--call-id", default=None)
    pr.add_argument("--timeout", type=float, default=30.0)
    command("demo", "walk the foundation's behaviour table against a running system")
    world = command("world", "read a simulated world, or arm a fault in it")
    world_sub = world.add_subparsers(dest="world_command", required=True)
    ledger = world_sub.add_parser("ledger", help="list every write the world recorded")
    _globals(ledger)
    ledger.add_argument("world", help="which world (case, items, repo)")
    fault = world_sub.add_parser("fault", help="arm a fault for the next calls (items world)")
    _globals(fault)
    fault.add_argument("world", help="which world (items)")
    fault.add_argument("fault", help="drop_response, crash_after_send, crash_after_commit, "
                                     "fail_before_send, query_unavailable")
    fault.add_argument("--server", required=True, choices=("P", "Q"),
                       help="P (draft.prepare_private) or Q (item.publish)")
    fault.add_argument("--times", type=int, default=1)
    it = command("intents", "list intents from the views, newest change first")
    it.add_argument("--state", default=None, help="only intents in this state (unknown, needs_operator, …)")
    it.add_argument("--tenant", default=None)
    it.add_argument("--limit", type=int, default=100, help="at most this many (up to 1000)")
    it.add_argument("--before", type=int, default=None, metavar="POSITION",
                    help="the page after the last row's position")
    it.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the views to catch up")
    _as(it, "operator")
    rc = command("reconcile", "settle an unknown outcome as an operator")
    rc.add_argument("intent")
    rc.add_argument("--tenant", required=True)
    found = rc.add_mutually_exclusive_group(required=True)
    found.add_argument("--confirmed", action="store_true", help="the effect happened")
    found.add_argument("--absent", action="store_true", help="the effect did not happen")
    rc.add_argument("--why", required=True, help="the evidence (recorded with who decided)")
    _as(rc, "operator")
    wd = command("withdraw", "stop a candidate by its state, as an operator")
    wd.add_argument("intent")
    wd.add_argument("--tenant", required=True)
    wd.add_argument("--why", default="")
    _as(wd, "operator")
    rv = command("review", "list, show, approve or deny reviews, as a reviewer")
    rv_sub = rv.add_subparsers(dest="review_command", required=True)
    listed = rv_sub.add_parser("list", help="the reviews waiting, oldest first (from the views)")
    _globals(listed)
    listed.add_argument("--tenant", default=None)
    listed.add_argument("--limit", type=int, default=100)
    listed.add_argument("--wait", type=float, default=5.0,
                        help="seconds to wait for the views to catch up")
    _as(listed, "reviewer")
    for verb, text in (("show", "print the open review of a candidate: what will happen first"),
                       ("approve", "approve the consequence under review"),
                       ("deny", "refuse it")):
        r = rv_sub.add_parser(verb, help=text)
        _globals(r)
        r.add_argument("intent")
        r.add_argument("--tenant", required=True)
        r.add_argument("--why", default="", help="recorded with the decision")
        r.add_argument("--digest", default=None, help="approve only if the review is of this digest")
        _as(r, "reviewer")
    edit = rv_sub.add_parser("edit", help="propose narrower arguments instead: a new candidate, "
                                          "every gate again; the original does not run")
    _globals(edit)
    edit.add_argument("intent")
    edit.add_argument("--tenant", required=True)
    edit.add_argument("--arguments", required=True, help="the raw argument text, as a model would write it")
    edit.add_argument("--why", default="", help="recorded with the edit")
    edit.add_argument("--digest", default=None, help="edit only if the review is of this digest")
    _as(edit, "reviewer")
    tokens.add_arguments(command("token", "print a console token for a reviewer (or --operator)"))
    sub.add_parser("policy", help="validate a policy bundle or run its case tables", add_help=False)
    ev = command("events", "print an intent's events (its timeline in the views)")
    ev.add_argument("intent")
    ev.add_argument("--tenant", required=True)
    ev.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the views to catch up")
    _as(ev, "operator")
    evl = command("eval", "grade runs' proposals and check containment apart (from the views and "
                          "the world ledgers); --suite runs scripted agents first")
    evl.add_argument("runs", nargs="*", metavar="RUN", help="run ids to evaluate")
    evl.add_argument("--tenant", default=None, help="only intents of this tenant")
    evl.add_argument("--suite", type=Path, default=None, metavar="DIR",
                     help="run the scripted tasks (*.yaml) in DIR first, and evaluate their runs too")
    evl.add_argument("--timeout", type=float, default=30.0, help="seconds a scripted call may take")
    evl.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the views to catch up")
    _as(evl, "operator")
    mcp_cli.add_commands(sub, _globals)
    replay_cli.add_command(sub, _globals)
    adapter_cli.add_command(sub, _globals)
    return p


_ASYNC: dict[str, Callable[[argparse.Namespace, Where, Output], object]] = {
    "propose": _propose, "demo": _demo, "events": _events, "intents": _intents,
    "reconcile": _reconcile, "withdraw": _withdraw, "review": _review, "eval": _eval,
}


def _dispatch(args: argparse.Namespace, out: Output) -> int:
    if args.command == "run":
        return _run(args, out)
    if args.command == "world":
        return _world(args, out)
    if args.command == "adapter":
        return adapter_cli.run(args, out)
    where = locate(args)
    if args.command == "status":
        return _status(args, where, out)
    if args.command == "token":
        return tokens.command(args, where, out)
    if args.command == "mcp":
        return mcp_cli.run(args, where, out)
    if args.command == "replay":
        return replay_cli.run(args, where, out, lambda: _views(where, args, out, user=REPLAY))
    handler = _ASYNC[args.command]
    return int(asyncio.run(handler(args, where, out)))  # type: ignore[arg-type]


def _command_at(argv: Sequence[str]) -> int | None:
    """Where the command's name is: the first word that is not a global option or its value."""
    at = 0
    while at < len(argv):
        word = argv[at]
        if word in ("--url", "--var-dir"):
            at += 2
        elif word.startswith("-"):
            at += 1
        else:
            return at
    return None


def _fail(message: str) -> int:
    print(f"lockgate: {message}", file=sys.stderr, flush=True)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lockgate`` command: every error ends in one line and a non-zero exit."""
    argv = list(sys.argv[1:] if argv is None else argv)
    at = _command_at(argv)
    if at is not None and argv[at] == "policy":
        # Policy authoring works on files only: no broker, its own arguments (--json
        # given before the command is passed on to them).
        from lockgate.authz.cli import policy_main

        return policy_main(argv[at + 1:] + (["--json"] if "--json" in argv[:at] else []))
    args = parser().parse_args(argv)
    out = Output(json=bool(args.json))
    # The SDK's connection warnings would add lines to the one an error gets here.
    logging.getLogger("lockgate.client").setLevel(logging.ERROR)
    if args.var_dir is not None:
        # Every default under var/ (credentials, worlds, run.json) follows it.
        os.environ["LOCKGATE_VAR_DIR"] = str(args.var_dir.resolve())
    try:
        return _dispatch(args, out)
    except BrokenPipeError:
        # `lockgate intents | head`: the reader left; so do we, quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except ClientError as exc:
        return _fail(f"{exc.code}: {exc}" if exc.code not in str(exc) else str(exc))
    except LockgateError as exc:
        return _fail(str(exc))
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else "?"
        what = errors[0]["msg"] if errors else str(exc)
        return _fail(f"invalid setting {where}: {what} (check the LOCKGATE_* variables)")
    except (OSError, TimeoutError) as exc:
        return _fail(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("LOCKGATE_DEBUG"):
            raise
        return _fail(f"unexpected {type(exc).__name__}: {exc} (LOCKGATE_DEBUG=1 shows the traceback)")


if __name__ == "__main__":
    sys.exit(main())
