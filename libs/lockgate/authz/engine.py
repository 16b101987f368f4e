"""Load a Cedar policy bundle and evaluate requests against it."""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cedarpy
import msgspec
import yaml
from pydantic import ValidationError

from lockgate.authz.config import CONFIG_FILE, BundleConfig
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.bounded import keep
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


#: The request variables whose attributes a bundle may read.
_VARIABLES = ("principal", "resource", "context")


@dataclass(frozen=True)
class Reads:
    """What a bundle's policies read of a request: per variable, the names of the
    attributes they read or test for (``None``: the variable as a whole, so all of it),
    and whether any policy names the resource itself (its id) rather than its attributes.

    A Cedar decision is a function of the policies and of what they read: two requests
    equal in all of it are decided alike, whatever else differs (the basis of
    ``DecisionCache``).
    """

    principal: frozenset[str] | None
    resource: frozenset[str] | None
    context: frozenset[str] | None
    resource_id: bool

    @classmethod
    def of(cls, est: dict[str, Any]) -> Reads | None:
        """Read off the policies' JSON form; ``None`` where it cannot be told (templates)."""
        if est.get("templates") or est.get("templateLinks"):
            return None
        read: dict[str, set[str] | None] = {v: set() for v in _VARIABLES}
        resource_id = False
        for policy in est.get("staticPolicies", {}).values():
            if policy.get("resource", {}).get("op", "All") not in ("All", "is"):
                resource_id = True  # resource == / in an entity: the id decides
            for condition in policy.get("conditions", []):
                _reads(condition.get("body"), read)
        def names(variable: str) -> frozenset[str] | None:
            found = read[variable]
            return None if found is None else frozenset(found)

        return cls(principal=names("principal"), resource=names("resource"),
                   context=names("context"), resource_id=resource_id or read["resource"] is None)


def _reads(node: Any, read: dict[str, set[str] | None]) -> None:
    """Note in ``read`` what the expression ``node`` reads of each request variable."""
    if isinstance(node, list):
        for item in node:
            _reads(item, read)
        return
    if not isinstance(node, dict):
        return
    for operator in (".", "has"):
        access = node.get(operator)
        if isinstance(access, dict):
            left = access.get("left")
            if isinstance(left, dict) and set(left) == {"Var"} and left["Var"] in read:
                names = read[left["Var"]]
                if names is not None:
                    names.add(str(access.get("attr")))
                return
    variable = node.get("Var")
    if variable in read and set(node) == {"Var"}:
        read[variable] = None  # compared, tested with ``is`` or ``in``, or passed whole
        return
    for value in node.values():
        _reads(value, read)


_WINDOW_NAMES = ("actor_hour", "actor_day", "tenant_hour", "tenant_day")


@dataclass(frozen=True)
class HistoryScope:
    """Where one policy that reads ``context.history`` applies: its actions (``None``: all)
    and its resource type (``None``: any), and whether it reads a window beyond the run."""

    actions: frozenset[str] | None
    resource_type: str | None
    windows: bool

    @classmethod
    def of(cls, est: dict[str, Any]) -> tuple[HistoryScope, ...]:
        """The scopes of the policies (in their JSON form) that read the history."""
        scopes = []
        for policy in est.get("staticPolicies", {}).values():
            body = json.dumps(policy.get("conditions", []))
            if '"attr": "history"' not in body:
                continue
            windows = any(f'"attr": "{name}"' in body for name in _WINDOW_NAMES)
            scopes.append(cls(_scoped_ids(policy.get("action", {})),
                              _scoped_type(policy.get("resource", {})), windows))
        return tuple(scopes)

    def applies(self, capability: str, resource_type: str) -> bool:
        """Whether the policy may decide this capability's questions on this resource type."""
        asked = {capability, capability + UNATTENDED, UNATTENDED.removeprefix("::")}
        return ((self.actions is None or bool(self.actions & asked))
                and (self.resource_type is None or self.resource_type == resource_type))


_HISTORY_READ = '{"left": {"Var": "context"}, "attr": "history"}'
_HISTORY_ATTRIBUTE = re.compile(re.escape(_HISTORY_READ) + r'\}, "attr": "([^"]+)"')


def history_attributes(est: dict[str, Any]) -> frozenset[str] | None:
    """The attributes of ``context.history`` the policies (in their JSON form) read; ``None``
    when one uses the record otherwise than by attribute (tests it with ``has``, compares it
    whole), so that all of it is needed."""
    body = json.dumps([p.get("conditions", []) for p in est.get("staticPolicies", {}).values()])
    read = _HISTORY_ATTRIBUTE.findall(body)
    return frozenset(read) if body.count(_HISTORY_READ) == len(read) else None


def _scoped_ids(scope: dict[str, Any]) -> frozenset[str] | None:
    """The action ids (or groups) a policy's action scope names; ``None``: every action."""
    if scope.get("op", "All") == "All":
        return None
    entities = scope.get("entities") or [scope.get("entity", {})]
    return frozenset(str(e.get("id", "")) for e in entities)


def _scoped_type(scope: dict[str, Any]) -> str | None:
    """The entity type (without its namespace) a resource scope names; ``None``: any."""
    if scope.get("op", "All") == "All":
        return None
    named = scope.get("entity_type") or scope.get("entity", {}).get("type", "")
    return str(named).removeprefix(f"{NAMESPACE}::") or None


class DecisionCache:
    """Decisions of one bundle, by what its policies read of the request (``Reads``).

    Most candidates of a run ask Cedar the same question: the same actor and capability, a
    resource whose facts the policies read unchanged, the same context as far as they read
    it. Bounded: the least recently used go first.
    """

    def __init__(self, reads: Reads, capacity: int = 4096) -> None:
        self.reads = reads
        self._capacity = capacity
        self._decisions: OrderedDict[bytes, Decision] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def key(self, request: AuthzRequest, actions: tuple[str, ...]) -> bytes:
        """The request as far as the bundle can tell it from another."""
        reads = self.reads
        principal = {"tenant": request.tenant, "name": request.actor,
                     "roles": sorted(request.roles), "delegation": request.delegation}
        return _key_encoder.encode((
            actions, request.tenant, request.actor, _picked(principal, reads.principal),
            request.resource_type, request.resource_id if reads.resource_id else None,
            _picked(request.resource_facts, reads.resource), _picked(request.context, reads.context),
        ))

    def get(self, key: bytes) -> Decision | None:
        """The decision made on ``key``, if this cache still holds it."""
        found = self._decisions.get(key)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self._decisions.move_to_end(key)
        return found

    def put(self, key: bytes, decision: Decision) -> Decision:
        """Remember ``decision`` for ``key``; return it."""
        return keep(self._decisions, key, decision, self._capacity)


def _picked(values: Mapping[str, Any], names: frozenset[str] | None) -> Mapping[str, Any]:
    """The entries of ``values`` the policies read (all of them for ``None``); an absent one
    stays absent, since ``has`` tells the two apart."""
    if names is None:
        return values
    return {name: values[name] for name in names if name in values}


_key_encoder = msgspec.json.Encoder(order="sorted")


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
    history_scopes: tuple[HistoryScope, ...] = ()
    """Where the policies that read ``context.history`` apply (``history_for``)."""
    history_reads: frozenset[str] | None = None
    """The attributes of ``context.history`` the policies read (``None``: all of it, as when
    a policy hands the record on whole): a request carries only those."""
    decisions: DecisionCache | None = field(default=None, compare=False, repr=False)
    """This bundle's decisions by what its policies read (``None``: every request is
    evaluated)."""

    @property
    def uses_history(self) -> bool:
        """Whether any policy reads ``context.history``."""
        return bool(self.history_scopes)

    def history_for(self, capability: str, resource_type: str) -> tuple[bool, bool]:
        """Whether a policy that reads the run's history applies to this capability's
        decisions on this resource type, and whether one reads an actor's or tenant's window.

        Only then is the history read for a decision, and kept for its effect: a bundle's
        other capabilities pay nothing for it.
        """
        found = [s for s in self.history_scopes if s.applies(capability, resource_type)]
        return bool(found), any(s.windows for s in found)

    @classmethod
    def load(cls, directory: Path) -> PolicyBundle:
        """Load every ``*.cedar`` policy and ``*.cedarschema`` fragment under ``directory``.

        Raises:
            BundleError: missing files, parse errors, schema validation errors.
        """
        try:
            return cls.from_files(bundle_files(directory))
        except BundleError as exc:
            raise BundleError(f"{directory}: {exc}") from None

    @classmethod
    def from_files(cls, files: Mapping[str, str]) -> PolicyBundle:
        """Build a bundle from its files' texts by relative path (``bundle_files``): the same
        files give the same revision wherever they are.

        Raises:
            BundleError: missing files, parse errors, schema validation errors.
        """
        paths = sorted(files)
        text = "\n".join(files[p] for p in paths if p.endswith(".cedar"))
        schemas = [files[p] for p in paths if p.endswith(".cedarschema")]
        if not text or not schemas:
            raise BundleError("needs *.cedar policies and a *.cedarschema")
        return cls.from_text(text, merge_schema_fragments(schemas), files.get(CONFIG_FILE, ""))

    @classmethod
    def from_text(
        cls, text: str, schema_text: str, config_text: str = "", *, cache_decisions: int = 4096,
    ) -> PolicyBundle:
        """Build a bundle from policy, schema and ``bundle.yaml`` text.

        ``cache_decisions``: how many decisions to keep by what the policies read (0: none).

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
        reads = Reads.of(est) if cache_decisions > 0 else None
        code = _COMMENT.sub("", text)
        return cls(
            revision=revision, policies=policies, order=order, effects=effects, config=config,
            uses_prior_effects="prior_effects" in code,
            history_scopes=HistoryScope.of(est), history_reads=history_attributes(est),
            decisions=DecisionCache(reads, cache_decisions) if reads is not None else None,
        )


#: What a bundle is made of: its policies, its schema fragments and its admission settings.
BUNDLE_SUFFIXES = (".cedar", ".cedarschema")


def bundle_files(directory: Path) -> dict[str, str]:
    """The texts of a bundle's files under ``directory``, by path relative to it (``/``)."""
    found = {p for p in directory.rglob("*") if p.is_file() and p.suffix in BUNDLE_SUFFIXES}
    config = directory / CONFIG_FILE
    if config.is_file():
        found.add(config)
    return {p.relative_to(directory).as_posix(): p.read_text() for p in found}


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
#: The suffix of the action that asks whether it may happen without a reviewer.
UNATTENDED = "::unattended"


def _action_entities(action: str) -> list[dict[str, Any]]:
    """The action and its group (``approve``, ``unattended``): Cedar evaluates ``action in ...``
    on entity data, not the schema."""
    suffix = next((s for s in (APPROVE, UNATTENDED) if action.endswith(s)), None)
    if suffix is None:
        return []
    group = {"type": f"{NAMESPACE}::Action", "id": suffix.removeprefix("::")}
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


def _determining(bundle: PolicyBundle, answer: Any) -> tuple[str, ...]:
    """The policies that determined ``answer``, in bundle order (Cedar's own order varies)."""
    return tuple(sorted(answer.diagnostics.reasons, key=lambda r: (bundle.order.get(r, len(bundle.order)), r)))


def _errors(answer: Any) -> tuple[str, ...]:
    """``answer``'s evaluation errors, sorted (Cedar's own order varies)."""
    return tuple(sorted(str(e) for e in answer.diagnostics.errors))


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
    return _cached(bundle, request, (request.capability + APPROVE,), _approval)


def _approval(bundle: PolicyBundle, request: AuthzRequest) -> Decision:
    answer = _ask(bundle, request, request.capability + APPROVE)
    errors = _errors(answer)
    determining = _determining(bundle, answer)
    if errors or not answer.allowed:
        return _denial(bundle, determining, errors)
    return Decision(DecisionOutcome.ALLOW, bundle.revision, (), determining)


def _cached(
    bundle: PolicyBundle, request: AuthzRequest, actions: tuple[str, ...],
    decide: Callable[[PolicyBundle, AuthzRequest], Decision],
) -> Decision:
    """``decide``'s decision, or the one it made on a request the bundle cannot tell apart."""
    cache = bundle.decisions
    if cache is None:
        return decide(bundle, request)
    key = cache.key(request, actions)
    found = cache.get(key)
    if found is not None:
        return found
    decision = decide(bundle, request)
    # An evaluation error names the entity it met (its id, which the key may not hold):
    # such a decision is not kept, and is rare (facts that lack what a policy reads).
    return decision if decision.errors else cache.put(key, decision)


def evaluate(bundle: PolicyBundle, request: AuthzRequest) -> Decision:
    """Answer both questions for ``request``. An evaluation error is a denial.

    Both are asked in one call: the second answer is only read when the first allows.
    A request the bundle cannot tell from one it decided is answered as that one was
    (``PolicyBundle.decisions``).
    """
    return _cached(bundle, request, (request.capability, request.capability + UNATTENDED), _decide)


def _decide(bundle: PolicyBundle, request: AuthzRequest) -> Decision:
    at_all, unattended = _ask_all(bundle, request, (request.capability, request.capability + UNATTENDED))
    errors = _errors(at_all)
    determining = _determining(bundle, at_all)
    if errors or not at_all.allowed:
        return _denial(bundle, determining, errors)
    more = _errors(unattended)
    if unattended.allowed and not more:
        return Decision(
            DecisionOutcome.ALLOW, bundle.revision, (), determining + _determining(bundle, unattended)
        )
    return Decision(
        DecisionOutcome.REQUIRE_APPROVAL,
        bundle.revision,
        ("policy.approval-required",),
        determining + _determining(bundle, unattended),
        more,
    )
