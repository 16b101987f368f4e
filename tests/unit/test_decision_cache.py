"""Decisions kept by what the policies read: never a different answer than Cedar's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cedarpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.policy import SCHEMA, generate, requests
from lockgate.authz import AuthzRequest, PolicyBundle, evaluate
from lockgate.authz.engine import Reads, evaluate_approval, merge_schema_fragments

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "deploy" / "policies"

DEMO_CACHED = PolicyBundle.load(DEMO)


def _demo_uncached() -> PolicyBundle:
    text = "\n".join(f.read_text() for f in sorted(DEMO.rglob("*.cedar")))
    schema = merge_schema_fragments([f.read_text() for f in sorted(DEMO.rglob("*.cedarschema"))])
    config = (DEMO / "bundle.yaml").read_text()
    return PolicyBundle.from_text(text, schema, config, cache_decisions=0)


def reads_of(policies: str) -> Reads | None:
    return Reads.of(json.loads(cedarpy.policies_to_json_str(policies)))


def test_what_the_policies_read_is_read_off_their_conditions() -> None:
    reads = reads_of('''
        permit(principal, action, resource is Lockgate::Case)
        when { resource.status == "open" && principal.roles.contains("agent")
               && context has stage && context.budgets.notes > 0 };
    ''')
    assert reads == Reads(principal=frozenset({"roles"}), resource=frozenset({"status"}),
                          context=frozenset({"stage", "budgets"}), resource_id=False)


@pytest.mark.parametrize(("policy", "whole"), [
    ('permit(principal, action, resource) when { principal is Lockgate::Actor };', "principal"),
    ('permit(principal, action, resource) when { resource == Lockgate::Case::"c" };', "resource"),
    ('permit(principal, action, resource) when { context == {"a": 1} };', "context"),
    ('permit(principal, action, resource) when { resource in [Lockgate::Case::"c"] };', "resource"),
])
def test_a_variable_used_as_a_whole_is_read_whole(policy: str, whole: str) -> None:
    reads = reads_of(policy)
    assert reads is not None and getattr(reads, whole) is None
    if whole == "resource":
        assert reads.resource_id


def test_a_policy_scoped_to_a_resource_reads_its_id_and_templates_are_not_cached() -> None:
    reads = reads_of('permit(principal, action, resource == Lockgate::Case::"c");')
    assert reads is not None and reads.resource_id
    assert reads_of('permit(principal == ?principal, action, resource);') is None


def test_requests_that_differ_only_in_what_no_policy_reads_are_decided_once() -> None:
    bundle = PolicyBundle.load(DEMO)
    assert bundle.decisions is not None
    base = dict(tenant="tenant-a", actor="user-42", capability="case.add_note",
                resource_type="Case", roles=("agent",),
                context={"effect_class": "write", "stage": "", "digest": "sha256:1"})
    facts = {"exists": True, "tenant": "tenant-a", "status": "open", "writes_suspended": False,
             "actor_may_add_note": True, "sensitive": False}
    first = evaluate(bundle, AuthzRequest(resource_id="case-1", resource_facts={**facts, "version": 1},
                                          **base))  # type: ignore[arg-type]
    again = evaluate(bundle, AuthzRequest(
        resource_id="case-2", resource_facts={**facts, "version": 7},
        **{**base, "context": {**base["context"], "digest": "sha256:2"}}))  # type: ignore[arg-type]
    assert again == first and (bundle.decisions.hits, bundle.decisions.misses) == (1, 1)
    closed = evaluate(bundle, AuthzRequest(resource_id="case-2", resource_facts={**facts, "status": "closed"},
                                           **base))  # type: ignore[arg-type]
    assert closed != first and bundle.decisions.misses == 2


_VALUES = st.one_of(st.booleans(), st.integers(0, 3), st.sampled_from(["open", "closed", "tenant-a", "x"]))


def _requests(capabilities: list[str], resource_types: list[str], attrs: list[str]) -> Any:
    return st.builds(
        AuthzRequest,
        tenant=st.sampled_from(["tenant-a", "tenant-b"]),
        actor=st.sampled_from(["user-42", "user-13", "alice"]),
        capability=st.sampled_from(capabilities),
        resource_type=st.sampled_from(resource_types),
        resource_id=st.sampled_from(["r1", "r2", "case-123"]),
        resource_facts=st.dictionaries(st.sampled_from(attrs), _VALUES, max_size=len(attrs)),
        context=st.fixed_dictionaries({}, optional={
            "effect_class": st.sampled_from(["read", "write", "publish"]),
            "stage": st.sampled_from(["", "work", "review"]),
            "digest": st.sampled_from(["d1", "d2"]),
            "self_approval": st.booleans(),
        }),
        roles=st.lists(st.sampled_from(["agent", "member", "admin"]), max_size=2).map(tuple),
        delegation=st.sampled_from(["", "d"]),
    )


DEMO_UNCACHED = _demo_uncached()
DEMO_ATTRS = sorted((DEMO_CACHED.decisions.reads.resource or frozenset()) | {"version", "owner"}) \
    if DEMO_CACHED.decisions else []


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.lists(_requests(["case.add_note", "item.publish", "repo.read_file", "review.publish_summary"],
                          ["Case", "Space", "File", "Summary"], DEMO_ATTRS), min_size=1, max_size=12))
def test_the_demo_bundle_decides_every_request_as_cedar_does(requests: list[AuthzRequest]) -> None:
    for request in requests:
        assert evaluate(DEMO_CACHED, request) == evaluate(DEMO_UNCACHED, request)
        assert evaluate_approval(DEMO_CACHED, request) == evaluate_approval(DEMO_UNCACHED, request)


GENERATED = generate(100)
GEN_CACHED = PolicyBundle.from_text(GENERATED.text, SCHEMA)
GEN_UNCACHED = PolicyBundle.from_text(GENERATED.text, SCHEMA, cache_decisions=0)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.data())
def test_a_generated_bundle_decides_every_request_as_cedar_does(data: st.DataObject) -> None:
    pool = requests(GENERATED, count=32, seed=data.draw(st.integers(0, 1000)))
    for request in data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=16)):
        facts = dict(request.resource_facts)
        if facts and data.draw(st.booleans()):
            name = data.draw(st.sampled_from(sorted(facts)))
            facts[name] = data.draw(_VALUES)
        changed = AuthzRequest(**{**request.__dict__, "resource_facts": facts})
        assert evaluate(GEN_CACHED, changed) == evaluate(GEN_UNCACHED, changed)
