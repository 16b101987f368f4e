"""``lockgate adapter scaffold``: the generated schema and bundle load into the real policy engine."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Annotated, TypedDict

import pytest

from lockgate.adapters.scaffold import scaffold
from lockgate.adapters.sdk import CapabilityFunction, Context, IntentKey, capability
from lockgate.authz.engine import AuthzRequest, PolicyBundle, evaluate, evaluate_approval
from lockgate.cli.app import main
from lockgate.contracts.vocabulary import DecisionOutcome

REPO = Path(__file__).resolve().parents[2]


class Ticket(TypedDict):
    tenant: str
    locked: bool
    comments: int


def tickets() -> list[CapabilityFunction]:
    @capability("ticket.comment", resource=("Ticket", "ticket_id"))
    def comment(ticket_id: Annotated[str, Context()], text: str, key: IntentKey) -> None:
        """Comment on the ticket you are working on."""

    @comment.facts
    def ticket(resource_id: str, tenant: str) -> Ticket:
        return Ticket(tenant=tenant, locked=False, comments=0)

    @capability("ticket.read", effect="read", resource=("Ticket", "ticket_id"))
    def read(ticket_id: Annotated[str, Context()]) -> str:
        """Read the ticket you are working on."""
        return ""

    return [comment, read]


def request(capability: str, facts: dict[str, object] | None = None) -> AuthzRequest:
    return AuthzRequest(
        tenant="tenant-a", actor="user-42", capability=capability, resource_type="Ticket",
        resource_id="T-1", resource_facts=dict(facts or {"tenant": "tenant-a", "locked": False,
                                                          "comments": 0}),
        context={"effect_class": "write", "digest": "sha256:x", "destination": "", "data_classes": [],
                 "stage": "", "prior_effects": 0, "budget_remaining": 10})


def bundle_of(tmp_path: Path) -> Path:
    """Lockgate's own schema and review rules, and the scaffold, as one bundle."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(REPO / "deploy" / "policies" / "lockgate.cedarschema", bundle)
    shutil.copy(REPO / "deploy" / "policies" / "reviews.cedar", bundle)
    scaffold(tickets(), bundle, "tickets", "tests:tickets")
    return bundle


def uncomment(path: Path, *policy_ids: str) -> None:
    """Uncomment the ``@id`` line and the policy after it, for each id."""
    lines = path.read_text().splitlines()
    for pid in policy_ids:
        at = lines.index(f'// @id("{pid}")')
        lines[at] = lines[at].removeprefix("// ")
        lines[at + 1] = lines[at + 1].removeprefix("// ")
    path.write_text("\n".join(lines) + "\n")


def test_as_generated_everything_is_denied(tmp_path: Path) -> None:
    bundle = PolicyBundle.load(bundle_of(tmp_path))
    for cap in ("ticket.comment", "ticket.read"):
        decision = evaluate(bundle, request(cap))
        assert decision.outcome is DecisionOutcome.DENY and decision.reasons == ("policy.no-permit",)


def test_the_schema_declares_the_facts_and_every_action(tmp_path: Path) -> None:
    text = (bundle_of(tmp_path) / "tickets.cedarschema").read_text()
    assert "entity Ticket = { tenant: String, locked: Bool, comments: Long };" in text
    assert text.count("entity Ticket") == 1  # one type, two capabilities
    for action in ('"ticket.comment" appliesTo', '"ticket.comment::unattended" in ["unattended"]',
                   '"ticket.comment::approve" in ["approve"]',
                   '"ticket.read" appliesTo', '"ticket.read::unattended" in ["unattended"]'):
        assert action in text


def test_uncommented_a_write_waits_for_a_reviewer_who_may_approve(tmp_path: Path) -> None:
    directory = bundle_of(tmp_path)
    uncomment(directory / "tickets.cedar", "ticket.comment.permit", "ticket.comment.reviewers-approve")
    bundle = PolicyBundle.load(directory)
    decision = evaluate(bundle, request("ticket.comment"))
    assert decision.outcome is DecisionOutcome.REQUIRE_APPROVAL
    assert decision.determining == ("ticket.comment.permit",)
    reviewer = AuthzRequest(**{**request("ticket.comment").__dict__, "actor": "alice",
                               "context": {**request("x").context, "proposer": "user-42",
                                           "self_approval": False}})
    assert evaluate_approval(bundle, reviewer).outcome is DecisionOutcome.ALLOW
    assert evaluate(bundle, request("ticket.read")).outcome is DecisionOutcome.DENY


def test_uncommented_a_read_runs_unattended(tmp_path: Path) -> None:
    directory = bundle_of(tmp_path)
    uncomment(directory / "tickets.cedar", "ticket.read.permit", "ticket.read.unattended")
    decision = evaluate(PolicyBundle.load(directory), request("ticket.read"))
    assert decision.outcome is DecisionOutcome.ALLOW


def test_the_command_writes_new_files_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scaffolded"
    target = "lockgate.worlds.gittools.capabilities:CAPABILITIES"
    assert main(["adapter", "scaffold", target, "--out", str(out), "--name", "git"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["git.cedar", "git.cedarschema"]
    assert re.search(r'action "git.commit::unattended" in \["unattended"\]', (out / "git.cedarschema").read_text())
    assert main(["adapter", "scaffold", target, "--out", str(out), "--name", "git"]) == 1
    assert "exists" in capsys.readouterr().err
