"""``lockgate review list | show | approve | deny | edit``: a reviewer's queue and decisions."""

from __future__ import annotations

import argparse

import msgspec

from lockgate.cli.group import CommandGroup, Subparsers, UsageError, add_as, command
from lockgate.cli.where import Where, on_system, subject_id, views
from lockgate.client.output import Output
from lockgate.contracts.consequence import clean


def _register(sub: Subparsers) -> None:
    rv = command(sub, "review", "list, show, approve or deny reviews, as a reviewer")
    rv_sub = rv.add_subparsers(dest="review_command", required=True)
    listed = command(rv_sub, "list", "the reviews waiting, oldest first (from the views)")
    listed.add_argument("--tenant", default=None)
    listed.add_argument("--limit", type=int, default=100)
    listed.add_argument("--wait", type=float, default=5.0,
                        help="seconds to wait for the views to catch up")
    add_as(listed, "reviewer")
    for verb, text in (("show", "print the open review of a candidate: what will happen first"),
                       ("approve", "approve the consequence under review"),
                       ("deny", "refuse it")):
        r = command(rv_sub, verb, text)
        r.add_argument("intent")
        r.add_argument("--tenant", required=True)
        r.add_argument("--why", default="", help="recorded with the decision")
        r.add_argument("--digest", default=None, help="approve only if the review is of this digest")
        add_as(r, "reviewer")
    edit = command(rv_sub, "edit", "propose narrower arguments instead: a new candidate, "
                                   "every gate again; the original does not run")
    edit.add_argument("intent")
    edit.add_argument("--tenant", required=True)
    edit.add_argument("--arguments", required=True, help="the raw argument text, as a model would write it")
    edit.add_argument("--why", default="", help="recorded with the edit")
    edit.add_argument("--digest", default=None, help="edit only if the review is of this digest")
    add_as(edit, "reviewer")


async def _review(args: argparse.Namespace, where: Where, out: Output) -> int:
    from lockgate.client import tables

    person = where.person("reviewer", args.as_)
    user = f"reviewer-{person}"
    if args.review_command == "list":
        seen = await views(where, args, out, user=user)
        try:
            scope = where.settings.reviewers.get(person) or ()
            rows = [r for r in seen.reviews(tenant=args.tenant, status="waiting", limit=args.limit)
                    if not scope or r.tenant in scope]
        finally:
            seen.close()
        out.rows(tables.REVIEW_QUEUE, [msgspec.to_builtins(row) for row in rows],
                 empty="no review waits")
        return 0
    tenant, intent = subject_id(args.tenant, "tenant"), subject_id(args.intent, "intent")
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


REVIEW = CommandGroup("review", _register, on_system(_review))
