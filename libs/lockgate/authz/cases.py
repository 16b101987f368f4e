"""Case tables: what a policy bundle must decide for given facts, checked like unit tests.

A case table is a YAML file with one top-level key, ``cases``, a list of cases::

    cases:
      - name: member adds a note to an open case
        principal: {tenant: tenant-a, actor: user-42}
        capability: case.add_note
        resource:
          type: Case                 # the Cedar entity type (case is accepted too)
          id: case-123
          facts: {exists: true, tenant: tenant-a, status: open, writes_suspended: false,
                  actor_may_add_note: true, sensitive: false, version: 3}
        context: {effect_class: write, digest: "sha256:x"}   # optional
        expect: allow                # allow | require_approval | deny
        reasons: [case.closed]       # optional
        expect_errors: false         # optional

      - name: a reviewer may not approve their own note
        action: approve              # the reviewer's question (<capability>::approve)
        principal: {tenant: tenant-a, actor: user-42}    # the reviewer
        proposer: user-42            # the run's actor; `proposer_delegation` optional
        capability: case.add_note
        resource: {type: Case, id: case-123, facts: {...}}
        expect: deny                 # allow | deny
        reasons: [review.self-approval]

Each case becomes the ``AuthzRequest`` the policy service would build for an intent
(``lockgate.authz.intents``) and is evaluated with ``lockgate.authz.evaluate``:

- ``resource.facts`` are the attributes Cedar sees on the resource, exactly as the
  world's adapter would report them: write every attribute the schema declares, as a
  missing one is an evaluation error at decision time. Values are strings, booleans,
  integers, lists and mappings (Cedar has no floats, dates or nulls).
- ``resource.type`` gets its first letter upper-cased, as the policy service does.
- ``context`` is merged over the services' defaults (``DEFAULT_CONTEXT``: effect class
  write, stage default, no prior effects, an empty history); ``principal`` may add
  ``roles`` and ``delegation``.
- ``history`` states the run's history the decision is made on (``context.history``,
  ``stated_history``): only what differs from an empty one, e.g.
  ``history: {untrusted_from: [mail.read], run: {amount: 700}}``.
- ``reasons``, when given, must equal the decision's reasons as a set: the ids of the
  forbids that determined a denial, ``policy.no-permit`` when nothing permitted,
  ``policy.evaluation-error`` when an error decided, ``policy.approval-required`` for
  ``require_approval``, nothing for ``allow``.
- A case fails when evaluation reported errors, unless it says ``expect_errors: true``:
  an outcome reached through an error (a mistyped fact, say) is right by accident.
- ``action: approve`` asks the reviewer's question instead (``evaluate_approval``): the
  principal is the reviewer, ``proposer`` (required) the actor whose request it is,
  and the context gets ``proposer`` and ``self_approval`` as the approval service
  computes them, and no ``history`` (unless the case states one). Its outcomes are
  ``allow`` and ``deny``.

Unknown keys are refused, so a misspelt ``reason:`` cannot silently check nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lockgate.authz.budgets import NO_LIMIT
from lockgate.authz.engine import AuthzRequest, Decision, PolicyBundle, evaluate, evaluate_approval
from lockgate.authz.history import NO_HISTORY
from lockgate.authz.intents import review_context
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.errors import LockgateError

OUTCOMES = (DecisionOutcome.ALLOW, DecisionOutcome.REQUIRE_APPROVAL, DecisionOutcome.DENY)
#: The reviewer's question has two answers.
APPROVAL_OUTCOMES = (DecisionOutcome.ALLOW, DecisionOutcome.DENY)
#: What the services give Cedar when a case does not say (see lockgate.authz.intents).
DEFAULT_CONTEXT: Mapping[str, Any] = {
    "effect_class": "write", "digest": "", "destination": "", "data_classes": [],
    "stage": "default", "prior_effects": 0, "budget_remaining": NO_LIMIT,
    "destinations": [], "untrusted_destinations": [], "amount": 0,
    "history": NO_HISTORY.context(),
}

_CASE_KEYS = {"name", "principal", "capability", "resource", "context", "history", "expect", "reasons",
              "expect_errors", "action", "proposer", "proposer_delegation"}
ACTIONS = ("propose", "approve")
_REQUIRED = ("name", "principal", "capability", "resource", "expect")

_Fail = Callable[[str], "CaseError"]


class CaseError(LockgateError):
    """A case table that cannot be read or is not shaped as documented.

    ``index`` is the position of the offending case in ``cases`` (from 0), or ``None``
    when the table as a whole is at fault.
    """

    def __init__(self, path: Path, message: str, index: int | None = None) -> None:
        where = f"{path}" if index is None else f"{path}: cases[{index}]"
        super().__init__(f"{where}: {message}", code="policy.cases-invalid")
        self.path = path
        self.index = index
        self.detail = message


@dataclass(frozen=True)
class Case:
    """One row of a case table: a request and the decision it must get."""

    name: str
    path: Path
    index: int
    request: AuthzRequest
    expect: DecisionOutcome
    reasons: frozenset[str] | None = None
    expect_errors: bool = False
    action: str = "propose"

    @property
    def where(self) -> str:
        """``file: cases[i]``, for messages."""
        return f"{self.path}: cases[{self.index}]"


@dataclass(frozen=True)
class CaseResult:
    """What the bundle decided for a case, and whether that is what the case expects."""

    case: Case
    decision: Decision
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """True when the decision matches every expectation of the case."""
        return not self.problems

    @property
    def expected(self) -> DecisionOutcome:
        """The outcome the case expects."""
        return self.case.expect

    @property
    def actual(self) -> DecisionOutcome:
        """The outcome the bundle decided."""
        return self.decision.outcome

    @property
    def reasons(self) -> tuple[str, ...]:
        """The decision's reason codes."""
        return self.decision.reasons

    @property
    def determining(self) -> tuple[str, ...]:
        """Ids of the policies that determined the decision."""
        return self.decision.determining

    @property
    def errors(self) -> tuple[str, ...]:
        """Evaluation errors Cedar reported."""
        return self.decision.errors


def load_cases(path: Path) -> list[Case]:
    """Read and check a case table.

    Args:
        path: a YAML file shaped as this module's docstring describes.

    Returns:
        The cases, in file order.

    Raises:
        CaseError: the file cannot be read, is not YAML, or a case is malformed
            (the error names the file and the case's index).
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise CaseError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CaseError(path, f"not valid YAML{at}: {problem}") from exc
    if not isinstance(document, dict) or set(document) != {"cases"}:
        raise CaseError(path, "expected a mapping with exactly one key, 'cases'")
    rows = document["cases"]
    if not isinstance(rows, list) or not rows:
        raise CaseError(path, "'cases' must be a non-empty list")
    cases: list[Case] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        case = _case(path, index, row)
        if case.name in seen:
            raise CaseError(path, f"duplicate case name {case.name!r}", index)
        seen.add(case.name)
        cases.append(case)
    return cases


def run_cases(bundle: PolicyBundle, cases: Sequence[Case]) -> list[CaseResult]:
    """Evaluate every case against ``bundle``, in order.

    Args:
        bundle: the validated policies.
        cases: from ``load_cases``.

    Returns:
        One result per case, passed or not; evaluation never raises for a case.
    """
    return [run_case(bundle, case) for case in cases]


def run_case(bundle: PolicyBundle, case: Case) -> CaseResult:
    """Evaluate one case and compare the decision with what it expects."""
    ask = evaluate_approval if case.action == "approve" else evaluate
    decision = ask(bundle, case.request)
    problems: list[str] = []
    if decision.outcome != case.expect:
        problems.append(f"expected {case.expect}, got {decision.outcome}")
    if case.reasons is not None and set(decision.reasons) != case.reasons:
        want = ", ".join(sorted(case.reasons)) or "none"
        got = ", ".join(decision.reasons) or "none"
        problems.append(f"expected reasons [{want}], got [{got}]")
    if decision.errors and not case.expect_errors:
        problems.append("evaluation errors (a missing or mistyped fact?)")
    if case.expect_errors and not decision.errors:
        problems.append("expected evaluation errors, got none")
    return CaseResult(case, decision, tuple(problems))


def _case(path: Path, index: int, row: object) -> Case:
    def fail(message: str) -> CaseError:
        return CaseError(path, message, index)

    if not isinstance(row, dict):
        raise fail("a case must be a mapping")
    unknown = sorted(str(k) for k in set(row) - _CASE_KEYS)
    if unknown:
        raise fail(f"unknown keys {unknown}; known: {sorted(_CASE_KEYS)}")
    missing = [k for k in _REQUIRED if k not in row]
    if missing:
        raise fail(f"missing keys {missing}")
    name = _text(row["name"], "name", fail)
    principal = _mapping(row["principal"], "principal", {"tenant", "actor"}, fail,
                         optional=frozenset({"roles", "delegation"}))
    roles = principal.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise fail("principal.roles must be a list of strings")
    delegation = principal.get("delegation", "")
    if not isinstance(delegation, str):
        raise fail("principal.delegation must be text")
    resource = _mapping(row["resource"], "resource", {"type", "id", "facts"}, fail)
    facts = resource["facts"]
    if not isinstance(facts, dict):
        raise fail("resource.facts must be a mapping")
    _check_value(facts, "resource.facts", fail)
    context: dict[str, Any] = dict(DEFAULT_CONTEXT)
    if row.get("context") is not None:
        given = row["context"]
        if not isinstance(given, dict):
            raise fail("context must be a mapping")
        _check_value(given, "context", fail)
        context.update(given)
    if row.get("history") is not None:
        context["history"] = stated_history(row["history"], fail)
    action = row.get("action", "propose")
    if action not in ACTIONS:
        raise fail(f"action must be one of {list(ACTIONS)}, got {action!r}")
    expect = row["expect"]
    outcomes = APPROVAL_OUTCOMES if action == "approve" else OUTCOMES
    if expect not in outcomes:
        raise fail(f"expect must be one of {[o.value for o in outcomes]}, got {expect!r}")
    if action == "approve":
        proposer = _text(row.get("proposer"), "proposer", fail)
        delegation_of = row.get("proposer_delegation", "")
        if not isinstance(delegation_of, str):
            raise fail("proposer_delegation must be text")
        if row.get("history") is None:
            # As the approval service asks: a reviewer's question carries no run history.
            context.pop("history", None)
        context = review_context(context, str(principal.get("actor", "")), proposer, delegation_of)
    elif "proposer" in row or "proposer_delegation" in row:
        raise fail("proposer is only for action: approve")
    reasons: frozenset[str] | None = None
    if row.get("reasons") is not None:
        listed = row["reasons"]
        if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed):
            raise fail("reasons must be a list of policy ids")
        reasons = frozenset(listed)
    expect_errors = row.get("expect_errors", False)
    if not isinstance(expect_errors, bool):
        raise fail("expect_errors must be true or false")
    kind = _text(resource["type"], "resource.type", fail)
    request = AuthzRequest(
        tenant=_text(principal["tenant"], "principal.tenant", fail),
        actor=_text(principal["actor"], "principal.actor", fail),
        capability=_text(row["capability"], "capability", fail),
        # As lockgate.authz.intents does for an intent's resource type.
        resource_type=kind[:1].upper() + kind[1:],
        resource_id=_text(resource["id"], "resource.id", fail),
        resource_facts=dict(facts),
        context=context,
        roles=tuple(roles),
        delegation=delegation,
    )
    return Case(name=name, path=path, index=index, request=request, expect=DecisionOutcome(expect),
                reasons=reasons, expect_errors=expect_errors, action=action)


def _text(value: object, field: str, fail: _Fail) -> str:
    if not isinstance(value, str) or not value:
        raise fail(f"{field} must be a non-empty string, got {value!r}")
    return value


def _mapping(
    value: object, field: str, keys: set[str], fail: _Fail, optional: frozenset[str] = frozenset()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(f"{field} must be a mapping with keys {sorted(keys)}")
    if not keys <= set(value) <= keys | optional:
        raise fail(f"{field} must have the keys {sorted(keys)} (optional: {sorted(optional)}), "
                   f"got {sorted(map(str, value))}")
    return value


def _check_value(value: object, field: str, fail: _Fail) -> None:
    """Only what Cedar's JSON entity format takes: YAML floats, dates and nulls are refused."""
    if isinstance(value, bool | str | int):
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_value(item, f"{field}[{i}]", fail)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise fail(f"{field}: keys must be strings, got {key!r}")
            _check_value(item, f"{field}.{key}", fail)
        return
    raise fail(f"{field}: {type(value).__name__} {value!r} is not a Cedar value "
               "(use a string, boolean, integer, list or mapping)")


def stated_history(given: Any, fail: _Fail) -> dict[str, Any]:
    """``context.history`` as a case states it, over an empty history: a window or a count by
    class names only what it changes, and naming ``untrusted_from`` makes the run untrusted.

    ::

        history:
          untrusted_from: [mail.read]          # untrusted: true follows
          destinations: [acct-1]
          run: {publish: 2, amount: 700}        # effects follows from the classes
          actor_hour: {publish: 10}
    """
    if not isinstance(given, dict):
        raise fail("history must be a mapping")
    _check_value(given, "history", fail)
    history: dict[str, Any] = NO_HISTORY.context()
    for key, value in given.items():
        if key not in history:
            raise fail(f"history has no {key!r} (it has {', '.join(sorted(history))})")
        if isinstance(history[key], dict):
            if (not isinstance(value, dict) or not set(value) <= set(history[key])
                    or not all(_is_count(v) for v in value.values())):
                raise fail(f"history.{key} takes a mapping of {', '.join(history[key])} "
                           "to whole numbers")
            history[key] = {**history[key], **value}
            if "effects" in history[key] and "effects" not in value:
                history[key]["effects"] = sum(v for k, v in history[key].items()
                                              if k not in ("effects", "amount"))
        elif not _same_kind(history[key], value):
            raise fail(f"history.{key} takes {_KINDS[type(history[key])]}, got {value!r}")
        else:
            history[key] = value
    if given.get("untrusted_from") and "untrusted" not in given:
        history["untrusted"] = True
    return history


#: What each kind of ``context.history`` attribute takes, for a case table's messages.
_KINDS = {list: "a list of texts", bool: "true or false", int: "a whole number"}


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same_kind(empty: object, value: object) -> bool:
    """Whether a stated history's ``value`` is of the kind Cedar's schema declares for it
    (the empty history's ``empty``): else the request fails validation, not the case's reader."""
    if isinstance(empty, list):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if isinstance(empty, bool):
        return isinstance(value, bool)
    return _is_count(value)
