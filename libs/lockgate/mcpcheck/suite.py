"""The conformance suite: probe an MCP server for what matters when an effect must happen once.

The suite speaks to the server with the official client SDK, in the handshake era
(``initialize``): it is what deployed servers speak, and there a cancel is an explicit
``notifications/cancelled``. It opens two sessions: the first plans (lists the tools) and
runs the effect probes, the second is the rotation (a new session; a new process for a
stdio target) and calls, at call time, whatever was planned but is gone.

Each probe creates effects under keys of its own, fresh per run, and looks them up with the
probe's query tool: "did it happen" is always the server's own answer, read back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types as types
import msgspec
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from lockgate.core.canonical import digest
from lockgate.mcpcheck.probe import Probe
from lockgate.mcpcheck.report import (
    Finding,
    Property,
    Report,
    Verdict,
    bounded,
    make_finding,
)

#: The name the suite calls when no planned tool disappeared: no server should offer it.
UNLISTED_TOOL = "mcpcheck_unlisted_tool"


class StdioTarget(msgspec.Struct, frozen=True, kw_only=True):
    """A server the suite starts itself and speaks to over stdin/stdout (one per session)."""

    command: tuple[str, ...]
    env: dict[str, str] | None = None


class HttpTarget(msgspec.Struct, frozen=True, kw_only=True):
    """A running server's streamable-HTTP endpoint."""

    url: str


Target = StdioTarget | HttpTarget


def describe(target: Target) -> str:
    """A target in one line, for the report."""
    if isinstance(target, HttpTarget):
        return target.url
    return bounded(" ".join(target.command), 200)


@dataclass
class _Call:
    """One tool call as the suite saw it."""

    ok: bool = False
    error: str = ""
    structured: dict[str, Any] = field(default_factory=dict)
    cancelled: bool = False
    elapsed_s: float = 0.0

    def describe(self) -> str:
        if self.cancelled:
            return f"cancelled by the suite after {self.elapsed_s:.2f} s"
        if not self.ok:
            return f"error after {self.elapsed_s:.2f} s: {self.error}"
        return f"answered in {self.elapsed_s:.2f} s: {msgspec.json.encode(self.structured).decode()}"


@dataclass
class _Lookup:
    """A query by key: whether it answered, and what it found."""

    answered: bool
    found: bool = False
    count: int | None = None
    error: str = ""


@dataclass
class _Notices:
    """What the server told a session unasked."""

    list_changed: int = 0


@dataclass
class _Session:
    client: Client
    notices: _Notices


def _client(target: Target, timeout_s: float, notices: _Notices) -> Client:
    server: StdioServerParameters | str
    if isinstance(target, HttpTarget):
        server = target.url
    else:
        server = StdioServerParameters(command=target.command[0], args=list(target.command[1:]),
                                       env=target.env)

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            notices.list_changed += 1

    # cache=None: a conformance probe must see every answer the server gives, never a cached one.
    return Client(server, mode="legacy", read_timeout_seconds=timeout_s, cache=None,
                  message_handler=on_message)


@asynccontextmanager
async def _session(target: Target, timeout_s: float) -> AsyncIterator[_Session]:
    # No deadline around connecting: the client's task group must be entered and left in the
    # same cancel scope. The handshake is a request, so read_timeout_seconds bounds it.
    notices = _Notices()
    async with _client(target, timeout_s, notices) as client:
        yield _Session(client, notices)


async def _call(
    client: Client, name: str, arguments: Mapping[str, Any], *, cancel_after_s: float | None = None
) -> _Call:
    started = time.monotonic()
    outcome = _Call()
    try:
        if cancel_after_s is None:
            result = await client.call_tool(name, dict(arguments))
        else:
            with anyio.move_on_after(cancel_after_s) as scope:
                result = await client.call_tool(name, dict(arguments))
            if scope.cancelled_caught:
                outcome.cancelled = True
                outcome.elapsed_s = time.monotonic() - started
                return outcome
    except MCPError as exc:
        outcome.error = f"MCP error {exc.code}: {exc.message}"
    except Exception as exc:  # a probe reports what it met; it never ends the suite
        outcome.error = f"{type(exc).__name__}: {exc}"
    else:
        structured = result.structured_content if isinstance(result.structured_content, dict) else {}
        text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
        outcome.structured = dict(structured)
        outcome.ok = not result.is_error
        if result.is_error:
            outcome.error = f"tool error: {text or structured}"
    outcome.elapsed_s = time.monotonic() - started
    return outcome


class _Probing:
    """One run of the suite: the probe, the keys it made, what it learned on the way."""

    def __init__(self, probe: Probe, timeout_s: float) -> None:
        self.probe = probe
        self.timeout_s = timeout_s
        self.run_id = uuid.uuid4().hex[:12]
        self._keys = 0

    def key(self) -> str:
        self._keys += 1
        return f"mcpcheck-{self.run_id}-{self._keys}"

    def create_args(self, key: str, *, changed: bool = False) -> dict[str, Any]:
        args = dict(self.probe.arguments)
        if changed:
            args.update(self.probe.changed_arguments)
        args[self.probe.key_argument] = key
        return args

    def effect_id(self, call: _Call) -> str | None:
        value = call.structured.get(self.probe.id_field)
        return None if value is None else str(value)

    async def lookup(self, client: Client, key: str) -> _Lookup:
        if not self.probe.query_tool:
            return _Lookup(answered=False, error="the probe names no query tool")
        call = await _call(client, self.probe.query_tool, {self.probe.query_key_argument: key})
        if not call.ok:
            return _Lookup(answered=False, error=call.error)
        found = bool(call.structured.get(self.probe.found_field, False))
        count_value = call.structured.get(self.probe.count_field) if self.probe.count_field else None
        count = int(count_value) if isinstance(count_value, int) else None
        return _Lookup(answered=True, found=found or bool(count), count=count)

    async def wait_visible(self, client: Client, key: str) -> tuple[_Lookup, float]:
        """Poll the query until it finds ``key`` or the probe's visibility window ends."""
        started = time.monotonic()
        deadline = started + self.probe.visibility_wait_s
        while True:
            seen = await self.lookup(client, key)
            if not seen.answered or seen.found or time.monotonic() >= deadline:
                return seen, time.monotonic() - started
            await anyio.sleep(0.1)


def _annotations(tool: types.Tool | None) -> types.ToolAnnotations:
    return tool.annotations if tool is not None and tool.annotations else types.ToolAnnotations()


def _fingerprint(tool: types.Tool) -> str:
    return digest(tool.model_dump(mode="json", by_alias=True, exclude_none=True))


def _tool_changes(before: Mapping[str, types.Tool], after: Mapping[str, types.Tool]) -> list[str]:
    changes = [f"tool added: {n}" for n in sorted(set(after) - set(before))]
    changes += [f"tool removed: {n}" for n in sorted(set(before) - set(after))]
    for name in sorted(set(before) & set(after)):
        old, new = before[name], after[name]
        if old.description != new.description:
            changes.append(f"{name}: description changed to {new.description!r}")
        if old.annotations != new.annotations:
            changes.append(f"{name}: annotations changed to "
                           f"{_annotations(new).model_dump(by_alias=True, exclude_none=True)}")
        if old.input_schema != new.input_schema:
            changes.append(f"{name}: input schema changed to "
                           f"{msgspec.json.encode(new.input_schema).decode()}")
        same_parts = (old.description, old.annotations, old.input_schema) == (
            new.description, new.annotations, new.input_schema)
        if same_parts and _fingerprint(old) != _fingerprint(new):
            changes.append(f"{name}: listing changed (title, output schema or metadata)")
    return changes


async def _tools(client: Client) -> dict[str, types.Tool]:
    listing = await client.list_tools()
    return {t.name: t for t in listing.tools}


async def run_suite(target: Target, probe: Probe, *, timeout_s: float = 10.0) -> Report:
    """Run every probe against ``target`` and report each property's verdict with evidence.

    Args:
        target: the server: a stdio command (started per session) or a streamable-HTTP URL.
        probe: how to create an effect under a key and look it up.
        timeout_s: the bound on each request (and twice it on connecting).

    Returns:
        The report: one finding per ``Property``, in declaration order.

    Raises:
        MCPError, OSError, TimeoutError: the suite could not connect at all.
    """
    started_at = datetime.now(UTC).isoformat()
    started = time.monotonic()
    run = _Probing(probe, timeout_s)
    findings: dict[Property, Finding] = {}
    async with _session(target, timeout_s) as first:
        client = first.client
        info = client.server_info
        identity = (info.name, info.version) if info is not None else ("", "")
        protocol = client.protocol_version
        plan = await _tools(client)
        create_tool = plan.get(probe.create_tool)
        if create_tool is None:
            return _not_offered(target, probe, identity, protocol, started_at, started, plan)
        hints = _annotations(create_tool)
        duplicate, first_key, effect_seen = await _duplicate_calls(run, client, hints)
        findings[Property.DUPLICATE_CALLS] = duplicate
        findings[Property.CANCEL_AFTER_COMMIT] = await _cancel_after_commit(run, client)
        findings[Property.CHANGED_ARGUMENTS] = await _changed_arguments(run, client)
        findings[Property.DELAYED_VISIBILITY] = await _delayed_visibility(run, client)
        findings[Property.CONFLICTING_ANNOTATIONS] = _conflicting_annotations(
            hints, duplicate, effect_seen)
        in_session = await _tools(client)
        list_changed = first.notices.list_changed
    async with _session(target, timeout_s) as second:
        findings[Property.SESSION_ROTATION] = await _session_rotation(
            run, second.client, identity, plan, in_session, first_key, list_changed)
        findings[Property.REMOVED_METHOD] = await _removed_method(run, second.client, plan)
    return Report(target=describe(target), probe=probe.name, server_name=identity[0],
                  server_version=identity[1], protocol_version=protocol, started_at=started_at,
                  duration_s=round(time.monotonic() - started, 3),
                  findings=tuple(findings[p] for p in Property))


def _not_offered(
    target: Target, probe: Probe, identity: tuple[str, str], protocol: str, started_at: str,
    started: float, plan: Mapping[str, types.Tool],
) -> Report:
    offered = ", ".join(sorted(plan)) or "none"
    evidence = [f"the server does not offer {probe.create_tool!r} (it offers: {offered})"]
    findings = tuple(make_finding(p, Verdict.UNKNOWN, "probe.not-offered", evidence,
                                  documented=False) for p in Property)
    return Report(target=describe(target), probe=probe.name, server_name=identity[0],
                  server_version=identity[1], protocol_version=protocol, started_at=started_at,
                  duration_s=round(time.monotonic() - started, 3), findings=findings)


async def _duplicate_calls(
    run: _Probing, client: Client, hints: types.ToolAnnotations
) -> tuple[Finding, str, bool]:
    """The same call twice: one effect or two? Returns the finding, the key, whether any effect was seen."""
    prop = Property.DUPLICATE_CALLS
    documented = hints.idempotent_hint is True
    claim = ["the tool claims idempotentHint: true"] if documented else []
    key = run.key()
    args = run.create_args(key)
    one = await _call(client, run.probe.create_tool, args)
    two = await _call(client, run.probe.create_tool, args)
    evidence = [*claim, f"first call: {one.describe()}", f"second call: {two.describe()}"]
    seen = await run.lookup(client, key)
    effect_seen = seen.found or one.ok
    if seen.answered:
        evidence.append(f"{run.probe.query_tool}({key}): found={seen.found} count={seen.count}")
    if not (one.ok and two.ok):
        verdict = Verdict.DOCUMENTED if documented else Verdict.UNKNOWN
        return (make_finding(prop, verdict, "duplicate.inconclusive", evidence,
                             documented=documented), key, effect_seen)
    ids = {run.effect_id(one), run.effect_id(two)} - {None}
    two_effects = len(ids) == 2 or (seen.count is not None and seen.count >= 2)
    one_effect = len(ids) == 1 and (seen.count is None or seen.count == 1)
    if two_effects:
        outcome, verdict = "duplicate.two-effects", Verdict.VIOLATED
        evidence.append(f"two effects under one key: {', '.join(sorted(i for i in ids if i))}")
    elif one_effect:
        outcome, verdict = "duplicate.one-effect", Verdict.OBSERVED
        evidence.append(f"one effect: both calls answered {next(iter(ids))}")
    else:
        outcome = "duplicate.inconclusive"
        verdict = Verdict.DOCUMENTED if documented else Verdict.UNKNOWN
        evidence.append(f"the answers name no {run.probe.id_field!r} and the query counts nothing")
    return make_finding(prop, verdict, outcome, evidence, documented=documented), key, effect_seen


async def _cancel_after_commit(run: _Probing, client: Client) -> Finding:
    """Cancel a sent call after ``cancel_after_s``: did its effect happen?"""
    prop = Property.CANCEL_AFTER_COMMIT
    key = run.key()
    call = await _call(client, run.probe.create_tool, run.create_args(key),
                       cancel_after_s=run.probe.cancel_after_s)
    evidence = [f"call under {key}: {call.describe()}"]
    if not call.cancelled:
        evidence.append(f"the server answered within {run.probe.cancel_after_s} s: "
                        "nothing was left to cancel")
        return make_finding(prop, Verdict.UNKNOWN, "cancel.answered-first", evidence,
                            documented=False)
    seen, waited = await run.wait_visible(client, key)
    if not seen.answered:
        evidence.append(f"the query did not answer: {seen.error}")
        return make_finding(prop, Verdict.UNKNOWN, "cancel.inconclusive", evidence,
                            documented=False)
    if seen.found:
        evidence.append(f"{run.probe.query_tool}({key}) found it after {waited:.2f} s: "
                        "the effect happened although the call was cancelled")
        return make_finding(prop, Verdict.VIOLATED, "cancel.effect-happened", evidence,
                            documented=False)
    evidence.append(f"{run.probe.query_tool}({key}) found nothing within "
                    f"{run.probe.visibility_wait_s} s")
    return make_finding(prop, Verdict.OBSERVED, "cancel.no-effect", evidence, documented=False)


async def _changed_arguments(run: _Probing, client: Client) -> Finding:
    """Different arguments under one key: refused, ignored or applied?"""
    prop = Property.CHANGED_ARGUMENTS
    key = run.key()
    one = await _call(client, run.probe.create_tool, run.create_args(key))
    two = await _call(client, run.probe.create_tool, run.create_args(key, changed=True))
    changed = ", ".join(sorted(run.probe.changed_arguments)) or "nothing (the probe changes none)"
    evidence = [f"changed: {changed}", f"first call: {one.describe()}",
                f"second call: {two.describe()}"]
    if not one.ok or not run.probe.changed_arguments:
        return make_finding(prop, Verdict.UNKNOWN, "changed.inconclusive", evidence,
                            documented=False)
    seen = await run.lookup(client, key)
    if seen.answered:
        evidence.append(f"{run.probe.query_tool}({key}): found={seen.found} count={seen.count}")
    if not two.ok:
        if seen.count is not None and seen.count > 1:
            evidence.append("refused, yet the key now names more than one effect")
            return make_finding(prop, Verdict.VIOLATED, "changed.applied", evidence,
                                documented=False)
        return make_finding(prop, Verdict.OBSERVED, "changed.refused", evidence, documented=False)
    first_id, second_id = run.effect_id(one), run.effect_id(two)
    if first_id is not None and first_id == second_id:
        evidence.append(f"the changed call answered the first effect {first_id}: "
                        "its new arguments were silently ignored")
        return make_finding(prop, Verdict.VIOLATED, "changed.ignored", evidence, documented=False)
    evidence.append(f"the changed call made another effect ({second_id})")
    return make_finding(prop, Verdict.VIOLATED, "changed.applied", evidence, documented=False)


async def _delayed_visibility(run: _Probing, client: Client) -> Finding:
    """Is an effect visible to the query as soon as its call answered?"""
    prop = Property.DELAYED_VISIBILITY
    key = run.key()
    call = await _call(client, run.probe.create_tool, run.create_args(key))
    evidence = [f"call under {key}: {call.describe()}"]
    if not call.ok:
        return make_finding(prop, Verdict.UNKNOWN, "visibility.inconclusive", evidence,
                            documented=False)
    at_once = await run.lookup(client, key)
    if not at_once.answered:
        evidence.append(f"the query did not answer: {at_once.error}")
        return make_finding(prop, Verdict.UNKNOWN, "visibility.inconclusive", evidence,
                            documented=False)
    if at_once.found:
        evidence.append(f"{run.probe.query_tool}({key}) found it at once")
        return make_finding(prop, Verdict.OBSERVED, "visibility.immediate", evidence,
                            documented=False)
    evidence.append(f"{run.probe.query_tool}({key}) right after the answer: not found")
    later, waited = await run.wait_visible(client, key)
    if later.found:
        evidence.append(f"found after {waited:.2f} s: an absent answer does not mean no effect")
        return make_finding(prop, Verdict.VIOLATED, "visibility.delayed", evidence,
                            documented=False)
    evidence.append(f"still not found after {waited:.2f} s: delayed longer than the window, "
                    "or never made")
    return make_finding(prop, Verdict.UNKNOWN, "visibility.never-seen", evidence,
                        documented=False)


def _conflicting_annotations(
    hints: types.ToolAnnotations, duplicate: Finding, effect_seen: bool
) -> Finding:
    """Does the creating tool behave as its ``readOnlyHint`` / ``idempotentHint`` claim?"""
    prop = Property.CONFLICTING_ANNOTATIONS
    claims = {k: v for k, v in hints.model_dump(by_alias=True, exclude_none=True).items()
              if k.endswith("Hint")}
    evidence = [f"the tool claims {claims}" if claims else "the tool claims no hints"]
    read_only, idempotent = hints.read_only_hint is True, hints.idempotent_hint is True
    if not (read_only or idempotent):
        return make_finding(prop, Verdict.UNKNOWN, "annotations.no-claim", evidence,
                            documented=False)
    conflicts: list[str] = []
    if read_only and effect_seen:
        conflicts.append("readOnlyHint: true, yet a call made an effect the query finds")
    if idempotent and duplicate.outcome == "duplicate.two-effects":
        conflicts.append("idempotentHint: true, yet the same call twice made two effects")
    if conflicts:
        return make_finding(prop, Verdict.VIOLATED, "annotations.conflict",
                            [*evidence, *conflicts], documented=True)
    tested = (read_only and not effect_seen) or (
        idempotent and duplicate.outcome == "duplicate.one-effect")
    if not tested:
        return make_finding(prop, Verdict.DOCUMENTED, "annotations.inconclusive", evidence,
                            documented=True)
    return make_finding(prop, Verdict.OBSERVED, "annotations.consistent",
                        [*evidence, "the calls behaved as claimed"], documented=True)


async def _session_rotation(
    run: _Probing,
    client: Client,
    identity: tuple[str, str],
    plan: Mapping[str, types.Tool],
    in_session: Mapping[str, types.Tool],
    earlier_key: str,
    list_changed: int,
) -> Finding:
    """A new session: same tools, same server, earlier effects still queryable?"""
    prop = Property.SESSION_ROTATION
    info = client.server_info
    now_identity = (info.name, info.version) if info is not None else ("", "")
    evidence: list[str] = []
    problems: list[str] = []
    if now_identity != identity:
        problems.append(f"server identity changed: {identity} -> {now_identity}")
    drift = _tool_changes(plan, in_session)
    problems += [f"within the first session: {c}" for c in drift]
    if list_changed:
        evidence.append(f"the server sent tools/list_changed {list_changed} time(s)")
    rotated = await _tools(client)
    problems += [f"in the new session: {c}" for c in _tool_changes(in_session, rotated)]
    seen = await run.lookup(client, earlier_key)
    if seen.answered and not seen.found:
        problems.append(f"the first session's effect under {earlier_key} is not found")
    elif seen.answered:
        evidence.append(f"the first session's effect under {earlier_key} is found "
                        f"(count={seen.count})")
    else:
        evidence.append(f"could not look the first session's effect up: {seen.error}")
    if problems:
        return make_finding(prop, Verdict.VIOLATED, "session.changed", [*problems, *evidence],
                            documented=False)
    if not seen.answered:
        return make_finding(prop, Verdict.UNKNOWN, "session.inconclusive",
                            ["same server and tools", *evidence], documented=False)
    return make_finding(prop, Verdict.OBSERVED, "session.same",
                        [f"same server {now_identity[0]} {now_identity[1]} and "
                         f"{len(rotated)} identical tools", *evidence], documented=False)


async def _removed_method(run: _Probing, client: Client, plan: Mapping[str, types.Tool]) -> Finding:
    """A tool listed while planning, gone at call time: what does calling it get?"""
    prop = Property.REMOVED_METHOD
    now = await _tools(client)
    gone = sorted(set(plan) - set(now))
    if gone:
        evidence = [f"planned, gone at call time: {', '.join(gone)}"]
        answered = False
        for name in gone:
            call = await _call(client, name, {})
            evidence.append(f"calling {name}: {call.describe()}")
            answered = answered or call.ok
        if answered:
            evidence.append("a tool no longer offered still answered as if it were")
            return make_finding(prop, Verdict.VIOLATED, "removed.answered", evidence,
                                documented=False)
        return make_finding(prop, Verdict.OBSERVED, "removed.refused", evidence, documented=False)
    call = await _call(client, UNLISTED_TOOL, {})
    evidence = ["no planned tool disappeared; calling a tool the server never listed instead",
                f"calling {UNLISTED_TOOL}: {call.describe()}"]
    if call.ok:
        return make_finding(prop, Verdict.VIOLATED, "unlisted.answered", evidence,
                            documented=False)
    return make_finding(prop, Verdict.OBSERVED, "unlisted.refused", evidence, documented=False)
