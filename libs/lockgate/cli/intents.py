"""``lockgate intents`` and ``lockgate events``: intents from the views, and one intent's timeline.

Both read the views as an operator, once the projector has caught up (``where.views``).
"""

from __future__ import annotations

import argparse

import msgspec

from lockgate.cli.group import CommandGroup, Subparsers, UsageError, add_as, command
from lockgate.cli.where import Where, on_system, subject_id, views
from lockgate.client.output import Output

#: What a person reads of an event in ``lockgate events`` (``--json`` prints each whole).
_EVENT_DETAIL = ("reason", "outcome", "stage", "field", "reviewer", "by", "why", "detail")


def _register_intents(sub: Subparsers) -> None:
    it = command(sub, "intents", "list intents from the views, newest change first")
    it.add_argument("--state", default=None, help="only intents in this state (unknown, needs_operator, …)")
    it.add_argument("--tenant", default=None)
    it.add_argument("--limit", type=int, default=100, help="at most this many (up to 1000)")
    it.add_argument("--before", type=int, default=None, metavar="POSITION",
                    help="the page after the last row's position")
    it.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the views to catch up")
    add_as(it, "operator")


def _register_events(sub: Subparsers) -> None:
    ev = command(sub, "events", "print an intent's events (its timeline in the views)")
    ev.add_argument("intent")
    ev.add_argument("--tenant", required=True)
    ev.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the views to catch up")
    add_as(ev, "operator")


async def _intents(args: argparse.Namespace, where: Where, out: Output) -> int:
    seen = await views(where, args, out)
    try:
        rows = seen.intents(tenant=args.tenant, state=args.state, limit=args.limit,
                            before=args.before)
    finally:
        seen.close()
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


async def _events(args: argparse.Namespace, where: Where, out: Output) -> int:
    from lockgate.intent.codec import decode_event
    from lockgate.views.rows import recorded

    tenant, intent = subject_id(args.tenant, "tenant"), subject_id(args.intent, "intent")
    seen = await views(where, args, out)
    try:
        rows = [r for r in seen.events_of(intent) if r.tenant == tenant]
        chain = [r for r in seen.lineage(intent) if r.tenant == tenant]
    finally:
        seen.close()
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


def _detail(event: dict[str, object]) -> str:
    shown = [f"{k} {event[k]}" for k in _EVENT_DETAIL if event.get(k) not in (None, "", [], {})]
    return "; ".join(shown[:3])


def _minute(value: object) -> str:
    return str(value or "")[:19].replace("T", " ")


INTENTS = CommandGroup("intents", _register_intents, on_system(_intents))
EVENTS = CommandGroup("events", _register_events, on_system(_events))
