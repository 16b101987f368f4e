"""Generate ``schemas/``: JSON Schemas of every event and wire message, an AsyncAPI document,
and the console's OpenAPI document (its HTTP API, from its routes).

The files are derived from the code and committed; a test fails when they drift.
Regenerate with ``python -m lockgate.cli.schemas``. The AsyncAPI channels, who sends
and receives on each, and which process appends and is handed each event are read off
the processes' specs (``lockgate.runtime.specs``): a channel no spec uses is not listed.

A build tool that documents the contracts rather than a part of them, it sits with the
command line, the one layer that may read everything it documents: the wire messages and
channels, the aggregate's events and their address, the specs and the console's routes.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from lockgate.console.openapi import document
from lockgate.contracts import messages
from lockgate.contracts.channels import Channel
from lockgate.eventstore.subjects import ADDRESS as EVENT_ADDRESS
from lockgate.intent.codec import EVENT_TYPES
from lockgate.runtime import specs
from lockgate.runtime.spec import EVERY_PROCESS_ANSWERS

SCHEMAS_DIR = Path(__file__).resolve().parents[3] / "schemas"

#: Who publishes every adapter's subjects: the adapter SDK, in each adapter process.
ADAPTERS = "adapters"


@dataclass
class _Use:
    sent_by: list[str] = field(default_factory=list)
    received_by: list[str] = field(default_factory=list)


def _add(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)


def channel_uses() -> dict[Channel, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Every channel a spec names: (who sends on it, who receives it), in spec order."""
    uses: dict[Channel, _Use] = {}

    def use(channel: Channel) -> _Use:
        return uses.setdefault(
            channel, _Use(sent_by=list(channel.sent_by), received_by=list(channel.received_by)))

    for spec in specs.SERVICES:
        for consumer in spec.consumes:
            if consumer.channel is not None:
                _add(use(consumer.channel).received_by, spec.name)
        for answer in spec.answers:
            _add(use(answer.channel).received_by, spec.name)
        for channel in (*spec.asks, *spec.publishes):
            _add(use(channel).sent_by, spec.name)
    for adapter in specs.ADAPTERS:
        for channel in (*adapter.answers, *adapter.consumes):
            _add(use(channel).received_by, ADAPTERS)
        for channel in (*adapter.asks, *adapter.publishes):
            _add(use(channel).sent_by, ADAPTERS)
    for channel in EVERY_PROCESS_ANSWERS:
        _add(use(channel).received_by, "every process")
    return {c: (tuple(u.sent_by), tuple(u.received_by)) for c, u in uses.items()}


def _wire() -> dict[str, type[Any]]:
    """The wire messages: every struct of ``messages`` and every type a channel carries."""
    wire: dict[str, type[Any]] = {
        name: cls
        for name, cls in vars(messages).items()
        if isinstance(cls, type) and issubclass(cls, msgspec.Struct) and cls.__module__ == messages.__name__
    }
    for channel in channel_uses():
        for cls in (channel.message, *channel.replies):
            if cls is not None:
                wire[cls.__name__] = cls
    return wire


WIRE: dict[str, type[Any]] = _wire()


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def _ref(cls: type[Any]) -> dict[str, str]:
    return {"$ref": f"./messages/{cls.__name__}.json"}


def _channel(channel: Channel, sent_by: tuple[str, ...], received_by: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "address": channel.address,
        "description": (f"{channel.description} Sent by: {', '.join(sent_by) or 'nobody'}. "
                        f"Received by: {', '.join(received_by) or 'nobody'}."),
    }
    if channel.message is not None:
        out["messages"] = {channel.message.__name__: _ref(channel.message)}
    if channel.replies:
        out["x-replies"] = {cls.__name__: _ref(cls) for cls in channel.replies}
    return out


def _event_flow() -> Iterator[tuple[str, dict[str, Any]]]:
    """For each event: which services append it, and which durables (and reactions) are handed it."""
    for name, cls in sorted(EVENT_TYPES.items()):
        flow: dict[str, Any] = {
            "appended_by": [s.name for s in specs.SERVICES if cls in s.may_append],
            "handed_to": [f"{s.name}: {c.name} ({c.reaction})"
                          for s in specs.SERVICES for c in s.consumes if cls in c.events],
        }
        if cls in specs.UNCONSUMED:
            flow["unconsumed"] = specs.UNCONSUMED[cls]
        yield name, flow


def _cleaned(value: Any) -> Any:
    """``value`` with every ``description`` cleaned as ``inspect.cleandoc`` cleans a docstring,
    and no ``default`` of an empty object or array.

    msgspec releases differ in whether they dedent the docstrings they copy into a schema
    and whether they state a default made by a factory (0.23 says ``{}``, 0.22 nothing);
    cleaned here, the files are the same whichever one generated them.
    """
    if isinstance(value, dict):
        return {k: inspect.cleandoc(v) if k == "description" and isinstance(v, str) else _cleaned(v)
                for k, v in value.items() if not (k == "default" and v in ({}, []))}
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    return value


def _schema(cls: type[Any]) -> dict[str, Any]:
    schema: dict[str, Any] = _cleaned(msgspec.json.schema(cls))
    return schema


def generate() -> dict[str, str]:
    """Every schema file, by path relative to ``schemas/``."""
    files: dict[str, str] = {}
    for name, cls in sorted(EVENT_TYPES.items()):
        schema = _schema(cls)
        schema["x-lockgate-class-version"] = cls.version
        files[f"events/{name}.json"] = _pretty(schema)
    for name, cls in sorted(WIRE.items()):
        files[f"messages/{name}.json"] = _pretty(_schema(cls))
    asyncapi = {
        "asyncapi": "3.0.0",
        "info": {"title": "Lockgate", "version": "1",
                 "description": "Subjects Lockgate's services, agent runtimes and adapters use."},
        "channels": {
            channel.address.replace(".", "_").replace("{", "").replace("}", ""):
                _channel(channel, sent_by, received_by)
            for channel, (sent_by, received_by) in channel_uses().items()
        },
        "components": {
            "x-events": {
                "address": EVENT_ADDRESS,
                "messages": {n: {"$ref": f"./events/{n}.json"} for n in sorted(EVENT_TYPES)},
                "x-flow": dict(_event_flow()),
            }
        },
    }
    files["asyncapi.json"] = _pretty(asyncapi)
    files["openapi.json"] = document()  # the HTTP edge, generated from its routes
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
