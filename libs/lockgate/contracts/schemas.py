"""Generate ``schemas/``: JSON Schemas of every event and wire message, and an AsyncAPI document.

The files are derived from the code and committed; a test fails when they drift.
Regenerate with ``python -m lockgate.contracts.schemas``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from lockgate.contracts import messages
from lockgate.contracts.responses import ModelResponse
from lockgate.intent.codec import EVENT_TYPES

SCHEMAS_DIR = Path(__file__).resolve().parents[3] / "schemas"

WIRE: dict[str, type[Any]] = {
    name: cls
    for name, cls in vars(messages).items()
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct) and cls.__module__ == messages.__name__
}
WIRE["ModelResponse"] = ModelResponse

#: Subject → (who publishes, message name, description): the AsyncAPI channels.
CHANNELS: dict[str, tuple[str, str, str]] = {
    "lg.run.{tenant}.open": ("trusted host", "OpenRun", "Open a run with authoritative context (reply RunOpened)."),
    "lg.turn.{tenant}.{run}": ("agent runtime", "OpenTurn", "Open a turn; the reply is the catalogue snapshot (TurnOpened)."),
    "lg.propose.{tenant}.{run}": ("agent runtime", "Candidate", "One tool call exactly as the model emitted it (stream LG_CANDIDATES)."),
    "lg.response.{tenant}.{run}.{candidate}": ("intake", "ModelResponse", "What the model sees (stream LG_RESPONSES)."),
    "lg.review.{tenant}.{intent}.show.{reviewer}": ("reviewer", "ReviewView", "Show the open review (reply ReviewView; the request body is empty)."),
    "lg.review.{tenant}.{intent}.decide.{reviewer}": ("reviewer", "DecideReview", "A reviewer's decision, recorded under the authenticated reviewer (reply Recorded or Refusal)."),
    "lg.withdraw.{tenant}.{run}.{intent}.{user}": ("agent runtime, operator", "Withdraw", "Stop a candidate by its state (reply ModelResponse)."),
    "lg.reconcile.{tenant}.{intent}.resolve.{operator}": ("operator", "ResolveOutcome", "Settle an unknown outcome, recorded under the authenticated operator (reply Recorded or Refusal)."),
    "lg.exec.{capability}": ("executor", "ExecutionOrder", "An authorized attempt (stream LG_EXEC)."),
    "lg.record.{capability}": ("adapter", "RecordRequest", "The events of one intent of this capability, to check an order against (reply IntentRecord, answered by the executor)."),
    "lg.report.{capability}.{intent}": ("adapter", "AttemptReport", "An attempt transition (stream LG_REPORTS)."),
    "lg.adapter.{capability}.describe": ("services", "Describe", "The adapter's contract (reply)."),
    "lg.adapter.{capability}.normalize": ("normalization", "NormalizeRequest", "Canonicalise arguments (reply NormalizeResult)."),
    "lg.adapter.{capability}.facts": ("policy, executor", "FactsRequest", "Fresh facts about a resource (reply Facts)."),
    "lg.adapter.{capability}.query": ("reconciler", "QueryRequest", "Did the effect with this identity happen? (reply QueryResult)."),
}


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def generate() -> dict[str, str]:
    """Every schema file, by path relative to ``schemas/``."""
    files: dict[str, str] = {}
    for name, cls in sorted(EVENT_TYPES.items()):
        schema = msgspec.json.schema(cls)
        schema["x-lockgate-class-version"] = cls.class_version
        files[f"events/{name}.json"] = _pretty(schema)
    for name, cls in sorted(WIRE.items()):
        files[f"messages/{name}.json"] = _pretty(msgspec.json.schema(cls))
    asyncapi = {
        "asyncapi": "3.0.0",
        "info": {"title": "Lockgate", "version": "1",
                 "description": "Subjects Lockgate's services, agent runtimes and adapters use."},
        "channels": {
            subject.replace(".", "_").replace("{", "").replace("}", ""): {
                "address": subject,
                "description": f"{description} Published by: {who}.",
                "messages": {message: {"$ref": f"./messages/{message}.json"}},
            }
            for subject, (who, message, description) in CHANNELS.items()
        },
        "components": {
            "x-events": {
                "address": "lg.evt.{tenant}.{intent}.{version}.{EventType}",
                "messages": {n: {"$ref": f"./events/{n}.json"} for n in sorted(EVENT_TYPES)},
            }
        },
    }
    files["asyncapi.json"] = _pretty(asyncapi)
    return files


def main() -> int:
    """Write the generated files into ``schemas/`` (removing stale ones)."""
    files = generate()
    for old in SCHEMAS_DIR.rglob("*.json"):
        if str(old.relative_to(SCHEMAS_DIR)) not in files:
            old.unlink()
    for rel, text in files.items():
        path = SCHEMAS_DIR / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(files)} files to {SCHEMAS_DIR}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
