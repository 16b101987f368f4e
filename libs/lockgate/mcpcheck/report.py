"""The conformance report: one finding per property, each a verdict with its evidence."""

from __future__ import annotations

from enum import StrEnum

import msgspec


class Verdict(StrEnum):
    """How the suite knows what it says about a property."""

    #: The server's own annotations or description claim it; the suite could not test it.
    DOCUMENTED = "documented"
    #: The suite saw it hold.
    OBSERVED = "observed"
    #: The suite could not tell (and the server claims nothing).
    UNKNOWN = "unknown"
    #: The suite saw it fail.
    VIOLATED = "violated"


class Property(StrEnum):
    """The properties that matter for an effect happening once."""

    #: The same call twice (same key) makes one effect.
    DUPLICATE_CALLS = "duplicate_calls"
    #: A call cancelled after it was sent leaves no effect.
    CANCEL_AFTER_COMMIT = "cancel_after_commit"
    #: Different arguments under one key are refused, not ignored or applied.
    CHANGED_ARGUMENTS = "changed_arguments"
    #: An effect is visible to the query as soon as its call answered.
    DELAYED_VISIBILITY = "delayed_visibility"
    #: The creating tool behaves as its ``readOnlyHint`` / ``idempotentHint`` claim.
    CONFLICTING_ANNOTATIONS = "conflicting_annotations"
    #: A new session sees the same tools, the same server and the earlier effects.
    SESSION_ROTATION = "session_rotation"
    #: A tool gone at call time (listed while planning) is refused with a clear error.
    REMOVED_METHOD = "removed_method"


#: What each property asserts, as the report states it.
CLAIMS: dict[Property, str] = {
    Property.DUPLICATE_CALLS: "the same call twice under one key makes one effect",
    Property.CANCEL_AFTER_COMMIT: "a call cancelled after it was sent leaves no effect",
    Property.CHANGED_ARGUMENTS: "different arguments under one key are refused",
    Property.DELAYED_VISIBILITY: "an effect is visible to the query as soon as its call answers",
    Property.CONFLICTING_ANNOTATIONS: "the creating tool behaves as its annotations claim",
    Property.SESSION_ROTATION: "a new session sees the same tools, server and effects",
    Property.REMOVED_METHOD: "a tool not offered at call time is refused with a clear error",
}

#: Stable outcome codes a finding may carry (part of the report's contract).
OUTCOMES: tuple[str, ...] = (
    "duplicate.one-effect", "duplicate.two-effects", "duplicate.inconclusive",
    "cancel.no-effect", "cancel.effect-happened", "cancel.answered-first", "cancel.inconclusive",
    "changed.refused", "changed.ignored", "changed.applied", "changed.inconclusive",
    "visibility.immediate", "visibility.delayed", "visibility.never-seen",
    "visibility.inconclusive",
    "annotations.consistent", "annotations.conflict", "annotations.no-claim",
    "annotations.inconclusive",
    "session.same", "session.changed", "session.inconclusive",
    "removed.refused", "removed.answered", "unlisted.refused", "unlisted.answered",
    "removed.inconclusive",
    "probe.not-offered",
)

#: Bounds on evidence: a report stays readable whatever a server answers.
MAX_EVIDENCE_LINES = 12
MAX_EVIDENCE_CHARS = 400


def bounded(text: str, limit: int = MAX_EVIDENCE_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """What the suite found about one property."""

    property: Property
    verdict: Verdict
    #: One of ``OUTCOMES``: what happened, more precisely than the verdict.
    outcome: str
    claim: str
    #: Whether the server's annotations or description claim the property.
    documented: bool = False
    evidence: tuple[str, ...] = ()


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """The suite's report on one server under one probe."""

    target: str
    probe: str
    server_name: str
    server_version: str
    protocol_version: str
    started_at: str
    duration_s: float
    findings: tuple[Finding, ...]

    def finding(self, prop: Property | str) -> Finding:
        """The finding about ``prop``.

        Raises:
            KeyError: the report has no finding about it.
        """
        for finding in self.findings:
            if finding.property == prop:
                return finding
        raise KeyError(str(prop))

    def verdicts(self) -> dict[str, str]:
        """Property name to verdict, for a quick look (and assertions)."""
        return {str(f.property): str(f.verdict) for f in self.findings}


def make_finding(
    prop: Property, verdict: Verdict, outcome: str, evidence: list[str], *, documented: bool
) -> Finding:
    """A finding with its evidence bounded (line count and length)."""
    lines = [bounded(line) for line in evidence if line][:MAX_EVIDENCE_LINES]
    return Finding(property=prop, verdict=verdict, outcome=outcome, claim=CLAIMS[prop],
                   documented=documented, evidence=tuple(lines))


def render_json(report: Report) -> str:
    """The report as one JSON document (stable field order, indented)."""
    return msgspec.json.format(msgspec.json.encode(report).decode(), indent=2)


def render_table(report: Report) -> str:
    """The report as a table for a terminal: one row per property, the evidence under it."""
    head = (f"{report.server_name} {report.server_version} at {report.target} "
            f"(probe {report.probe}, protocol {report.protocol_version}, "
            f"{report.duration_s:.1f} s)")
    width = max(len(str(p)) for p in Property)
    lines = [head, "", f"{'property':<{width}}  {'verdict':<10}  outcome"]
    lines.append(f"{'-' * width}  {'-' * 10}  {'-' * 24}")
    for f in report.findings:
        claimed = "  (claimed by the server)" if f.documented else ""
        lines.append(f"{f.property:<{width}}  {f.verdict:<10}  {f.outcome}{claimed}")
        lines.extend(f"{'':<{width}}    · {e}" for e in f.evidence)
    return "\n".join(lines) + "\n"
