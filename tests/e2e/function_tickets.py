"""Tickets served by ``lockgate adapter serve function_tickets`` in the end-to-end tests.

The "remote system" is a JSON-lines ledger (``TICKETS_LEDGER``): one line per call of a
function, so a test counts invocations across processes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

from pydantic import Field

from lockgate.adapters.sdk import Context, IntentKey, capability


def _ledger() -> Path:
    return Path(os.environ["TICKETS_LEDGER"])


def calls(kind: str | None = None) -> list[dict[str, str]]:
    """Every call recorded so far (of ``kind`` only, when given)."""
    path = _ledger()
    lines = path.read_text().splitlines() if path.exists() else []
    return [c for c in map(json.loads, lines) if kind is None or c["kind"] == kind]


def _record(**call: str) -> None:
    with open(_ledger(), "a") as out:  # one short line per write: appended whole
        out.write(json.dumps(call) + "\n")


@capability("ticket.comment", effect="write", resource=("Ticket", "ticket_id"))
async def comment(ticket_id: Annotated[str, Context()],
                  text: Annotated[str, Field(min_length=1, max_length=200)],
                  key: IntentKey) -> dict[str, str]:
    """Comment on the ticket you are working on."""
    _record(kind="comment", ticket_id=ticket_id, text=text, key=key)
    return {"comment_id": f"c{len(calls('comment'))}"}


@comment.query
def find(key: IntentKey) -> dict[str, str] | None:
    found = [c for c in calls("comment") if c["key"] == key]
    return {"ticket_id": found[0]["ticket_id"]} if found else None


@capability("ticket.close", effect="write", resource=("Ticket", "ticket_id"))
def close(ticket_id: Annotated[str, Context()], reason: str) -> dict[str, str]:
    """Close the ticket you are working on, saying why."""
    _record(kind="close", ticket_id=ticket_id, reason=reason)
    if reason == "crash":
        # The process dies right after the effect, before reporting it: the order is
        # delivered again, to the adapter started after it.
        os._exit(3)
    return {"closed": ticket_id}
