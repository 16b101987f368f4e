"""Load a Cedar policy bundle and evaluate requests against it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cedarpy
import yaml
from pydantic import ValidationError

from lockgate.authz.config import CONFIG_FILE, BundleConfig
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.canonical import digest_bytes
from lockgate.core.errors import LockgateError

NAMESPACE = "Lockgate"


class BundleError(LockgateError):
    """A bundle that does not parse or does not validate against its schema."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="policy.bundle-invalid")


@dataclass(frozen=True)
class AuthzRequest:
    """Who asks to do what to which resource, with which facts and context."""

    tenant: str
    actor: str
    capability: str
    resource_type: str
    resource_id: str
    resource_facts: dict[str, Any]
    context: dict[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] = ()
    delegation: str = ""


@dataclass(frozen=True)
class Decision:
    """The outcome and what determined it. ``reasons`` are forbid ids, in bundle order."""

    outcome: DecisionOutcome
    revision: str
    reasons: tuple[str, ...]
    determining: tuple[str, ...]
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class PolicyBundle:
    """Cedar policies plus the schema they were validated against, and their revision."""

    revision: str
    policies: Any  # cedarpy.PolicySet
    order: dict[str, int]
    effects: dict[str, str]
    config: BundleConfig = BundleConfig()
    uses_prior_effects: bool = False
    """Whether any policy reads ``context.prior_effects`` (else nobody needs it counted)."""

    @classmethod
    def load(cls, directory: Path) -> PolicyBundle:
        """Load every ``*.cedar`` policy and ``*.cedarschema`` fragment under ``directory``.

        Raises:
            BundleError: missing files, parse errors, schema validation errors.
        """
        files = sorted(directory.rglob("*.cedar"))
        schemas = sorted(directory.rglob("*.cedarschema"))
        if not files or not schemas:
            raise BundleError(f"{directory}: needs *.cedar policies and a *.cedarschema")
        text = "\n".join(f.read_text() for f in files)
        schema_text = merge_schema_fragments([f.read_text() for f in schemas])
        config_file = directory / CONFIG_FILE
        config_text = config_file.read_text() if config_file.exists() else ""
        return cls.from_text(text, schema_text, config_text)

    @classmethod
    def from_text(cls, text: str, schema_text: str, config_text: str = "") -> PolicyBundle:
        """Build a bundle from policy, schema and ``bundle.yaml`` text.

        Raises:
            BundleError: parse or validation errors.
        """
        try:
            raw = yaml.safe_load(config_text) if config_text.strip() else {}
            config = BundleConfig.model_validate(raw or {})
        except (yaml.YAMLError, ValidationError) as exc:
            raise BundleError(f"{CONFIG_FILE}: {exc}") from exc
        try:
            schema = cedarpy.Schema.from_str(schema_text)
        except ValueError as exc:
            raise BundleError(f"schema: {exc}") from exc
        result = cedarpy.validate_policies(text, schema)
        if not result.validation_passed:
            raise BundleError(
                "; ".join(f"{e.policy_id}: {e.error}" for e in result.errors) or "invalid"
            )
        try:
            est = json.loads(cedarpy.policies_to_json_str(text))
        except ValueError as exc:
            raise BundleError(f"policies: {exc}") from exc
        keyed: dict[str, Any] = {}
        order: dict[str, int] = {}
        effects: dict[str, str] = {}
        for position, (pid, policy) in enumerate(est.get("staticPolicies", {}).items()):
            name = policy.get("annotations", {}).get("id")
            if not name:
                raise BundleError(f"{pid}: every policy needs an @id annotation")
            if name in keyed:
                raise BundleError(f"duplicate policy id {name!r}")
            keyed[name] = policy
            order[name] = position
            effects[name] = policy.get("effect", "")
        est["staticPolicies"] = keyed
        policies = cedarpy.PolicySet.from_json_str(json.dumps(est))
        revision = digest_bytes((text + "\x00" + schema_text + "\x00" + config_text).encode())
        return cls(
            revision=revision, policies=policies, order=order, effects=effects, config=config,
            uses_prior_effects="prior_effects" in _COMMENT.sub("", text),
        )


_COMMENT = re.compile(r"//[^\n]*")
_WRAPPED = re.compile(r"^\s*namespace\s+" + NAMESPACE + r"\s*\{(?P<body>.*)\}\s*$", re.DOTALL)


def merge_schema_fragments(fragments: list[str]) -> str:
    """One ``namespace Lockgate { … }`` from every world's schema fragment.

    Cedar refuses the same namespace declared twice, and each world declares its own
    entity types and actions; a fragment may be wrapped in the namespace or not.
    """
    bodies = []
    for fragment in fragments:
        text = _COMMENT.sub("", fragment)
        wrapped = _WRAPPED.match(text)
        bodies.append(wrapped.group("body") if wrapped else text)
    return f"namespace {NAMESPACE} {{\n" + "\n".join(bodies) + "\n}\n"


def _entities(request: AuthzRequest) -> list[dict[str, Any]]:
    return [
        {
            "uid": {"type": f"{NAMESPACE}::Actor", "id": f"{request.tenant}/{request.actor}"},
            "attrs": {
                "tenant": request.tenant,
                "name": request.actor,
                "roles": sorted(request.roles),
                "delegation": request.delegation,
            },
            "parents": [],
        },
        {
            "uid": {"type": f"{NAMESPACE}::{request.resource_type}", "id": request.resource_id},
            "attrs": request.resource_facts,
            "parents": [],
        },
    ]


#: The suffix of the action a reviewer's approval asks about (``case.add_note::approve``).
APPROVE = "::approve"


def _action_entities(action: str) -> list[dict[str, Any]]:
    """The action and its groups: Cedar evaluates ``action in ...`` on entity data, not the schema."""
    if not action.endswith(APPROVE):
        return []
    group = {"type": f"{NAMESPACE}::Action", "id": APPROVE.removeprefix("::")}
    return [
        {"uid": {"type": f"{NAMESPACE}::Action", "id": action}, "attrs": {}, "parents": [group]},
        {"uid": group, "attrs": {}, "parents": []},
    ]


def _ask(bundle: PolicyBundle, request: AuthzRequest, action: str) -> Any:
    return _ask_all(bundle, request, (action,))[0]


def _ask_all(bundle: PolicyBundle, request: AuthzRequest, actions: tuple[str, ...]) -> list[Any]:
    """Cedar's answers for ``actions`` on one request, in one call (the entities parsed once)."""
    principal = {"type": f"{NAMESPACE}::Actor", "id": f"{request.tenant}/{request.actor}"}
    resource = {"type": f"{NAMESPACE}::{request.resource_type}", "id": request.resource_id}
    entities = _entities(request)
    for action in actions:
        entities += _action_entities(action)
    return list(cedarpy.is_authorized_batch(
        [{"principal": principal, "action": {"type": f"{NAMESPACE}::Action", "id": action},
          "resource": resource, "context": request.context} for action in actions],
        bundle.policies,
        entities,
    ))


def _denial(bundle: PolicyBundle, determining: tuple[str, ...], errors: tuple[str, ...]) -> Decision:
    forbids = sorted(
        (r for r in determining if bundle.effects.get(r) == "forbid"), key=lambda r: bundle.order.get(r, 0)
    )
    reasons = tuple(forbids) or (("policy.evaluation-error",) if errors else ("policy.no-permit",))
    return Decision(DecisionOutcome.DENY, bundle.revision, reasons, determining, errors)


def evaluate_approval(bundle: PolicyBundle, request: AuthzRequest) -> Decision:
    """May the reviewer (``request.actor``) approve this request? Allow or deny, never more.

    One question, ``<capability>::approve``; default deny, forbid overrides permit, and
    an evaluation error is a denial.
    """
    answer = _ask(bundle, request, request.capability + APPROVE)
    errors = tuple(str(e) for e in answer.diagnostics.errors)
    determining = tuple(answer.diagnostics.reasons)
    if errors or not answer.allowed:
        return _denial(bundle, determining, errors)
    return Decision(DecisionOutcome.ALLOW, bundle.revision, (), determining)


def evaluate(bundle: PolicyBundle, request: AuthzRequest) -> Decision:
    """Answer both questions for ``request``. An evaluation error is a denial.

    Both are asked in one call: the second answer is only read when the first allows.
    """
    at_all, unattended = _ask_all(
        bundle, request, (request.capability, f"{request.capability}::unattended"))
    errors = tuple(str(e) for e in at_all.diagnostics.errors)
    determining = tuple(at_all.diagnostics.reasons)
    if errors or not at_all.allowed:
        return _denial(bundle, determining, errors)
    more = tuple(str(e) for e in unattended.diagnostics.errors)
    if unattended.allowed and not more:
        return Decision(
            DecisionOutcome.ALLOW, bundle.revision, (), determining + tuple(unattended.diagnostics.reasons)
        )
    return Decision(
        DecisionOutcome.REQUIRE_APPROVAL,
        bundle.revision,
        ("policy.approval-required",),
        determining + tuple(unattended.diagnostics.reasons),
        more,
    )
