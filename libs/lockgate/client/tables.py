"""What the CLI prints for people: tables, the review queue's columns and a review's page.

Text a model or an adapter wrote (a note, a title) is untrusted: it is printed with
control and direction-override characters replaced, so it cannot move the cursor,
clear the screen or reorder what surrounds it, and it is labelled as the model's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lockgate.contracts.consequence import clean
from lockgate.contracts.messages import ReviewView


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, widest: int = 60) -> str:
    """Columns padded to their widest cell (cut at ``widest``), a header and a rule."""
    cells = [[clean(str(c), widest) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


#: The review queue's columns, over a review row's fields (``lockgate.views.rows.ReviewRow``).
REVIEW_QUEUE: Mapping[str, str | Callable[[Mapping[str, Any]], object]] = {
    "CANDIDATE": "intent_id", "TENANT": "tenant", "TOOL": "tool",
    "WHAT WILL HAPPEN": lambda r: r.get("action") or r.get("summary"),
    "REQUESTED": lambda r: _minute(str(r.get("requested_at") or "")),
    "EXPIRES": lambda r: _minute(str(r.get("expires_at") or "")),
}


def review_page(view: ReviewView) -> str:
    """One review as a reviewer reads it: the consequence first, the technical detail after."""
    lines = [
        f"What will happen   {clean(view.action or view.summary, 400)}",
    ]
    if view.visible_to:
        lines.append(f"Who will see it    {clean(view.visible_to, 400)}")
    if view.shown:
        lines.append("Written by the model (untrusted text, shown as written):")
        for name, text in view.shown.items():
            body = clean(text, 2000).replace("\n", "\n      ")
            lines.append(f"  {name}: {body}")
    for title, items in (("It rests on", view.preconditions), ("If it goes wrong", view.recovery)):
        if items:
            lines.append(f"{title}:")
            lines += [f"  - {clean(i, 400)}" for i in items]
    lines += [
        "",
        f"candidate  {view.candidate_id}  (tenant {view.tenant}, asked by {view.actor})",
        f"tool       {view.tool} on {view.destination}",
        f"review     {view.review_id}, {view.state}, expires {view.expires_at.isoformat()}",
        f"digest     {view.digest}",
        f"revisions  policy {view.policy_revision or '?'}, contract {view.contract_revision or '?'}",
    ]
    return "\n".join(lines)


def _minute(iso_time: str) -> str:
    return iso_time[:16].replace("T", " ")
