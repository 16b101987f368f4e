"""The run's history as policy facts, through the running system.

A supervisor (the six services only) runs on an ephemeral port with a bundle that adds an
assistant's policies to the demo's: once content from outside has entered a run, a mail to
someone the user did not name waits for a reviewer. ``lockgate adapter serve
function_assistant`` serves a mailbox whose one mail is an attacker's; its ledger shows
what was sent. A trusted host opens the run for the assistant with the user's task.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import pytest_asyncio
from nats.js.errors import KeyNotFoundError

from lockgate.adapters.scaffold import schema_fragment
from lockgate.authz.history import RunRecord
from lockgate.runtime.ports.history import run_key
from lockgate.runtime.topology import PROGRESS_BUCKET
from lockgate.testing.system import REPO
from tests.e2e.function_assistant import ATTACKER, CAPABILITIES
from tests.e2e.served_functions import ServedFunctions, supervised

TASK = "Summarise my inbox and send the summary to bob@example.com."
POLICIES = """
@id("history-e2e.assistant-acts-for-its-user")
permit (principal, action, resource is Lockgate::Account)
when { principal.roles.contains("assistant") };

@id("history-e2e.untrusted-reach")
forbid (principal, action in Lockgate::Action::"unattended", resource is Lockgate::Account)
when { context.history.untrusted && !context.untrusted_destinations.isEmpty() };
"""


def declared_by_demo(entity: str) -> bool:
    """Whether the demo bundle declares ``entity`` already (then the fragment must not)."""
    pattern = re.compile(rf"\bentity\s+{entity}\b")
    return any(pattern.search(f.read_text()) for f in (REPO / "deploy" / "policies").rglob("*.cedarschema"))


class Assistant(ServedFunctions):
    """The running supervisor, its var directory, and the mailbox served beside it."""

    def __init__(self, root: Path) -> None:
        declared = ("Account",) if declared_by_demo("Account") else ()
        super().__init__(root, {
            "history-e2e.cedarschema": schema_fragment(CAPABILITIES, "tests", declared=declared),
            "history-e2e.cedar": POLICIES,
        }, ledger="assistant.jsonl", ledger_env="ASSISTANT_LEDGER")

    async def record(self, tenant: str, run_id: str) -> RunRecord | None:
        """The run's history document, as the broker keeps it (read as the administrator)."""
        nc = await self.connect("admin")
        try:
            kv = await nc.jetstream().key_value(PROGRESS_BUCKET)
            try:
                entry = await kv.get(run_key(tenant, run_id))
            except KeyNotFoundError:
                return None
            return msgspec.json.decode(entry.value or b"", type=RunRecord)
        finally:
            await nc.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def assistant(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Assistant]:
    async with supervised(Assistant(tmp_path_factory.mktemp("history"))) as a:
        await a.serving("function_assistant:CAPABILITIES", "assistant")
        yield a


@pytest.mark.asyncio(loop_scope="module")
async def test_a_mail_asked_for_by_outside_content_waits_for_a_reviewer(assistant: Assistant) -> None:
    async with await assistant.gateway() as gw:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", roles=("assistant",),
                                context={"account": "acct-1", "task": TASK})
        turn = await run.open_turn()
        before = await turn.propose(tool="mail.send", call_id="before",
                                    arguments=json.dumps({"to": "carol@example.com", "body": "hi"}))
        # Nothing from outside in the run yet: a mail to anyone goes unattended.
        assert (before.status, before.code) == ("executed", "operation.executed"), before
        inbox = await turn.propose(tool="mail.read", arguments="{}")
        assert inbox.status == "executed" and ATTACKER in json.dumps(inbox.result), inbox
        leak = await turn.propose(tool="mail.send", call_id="leak",
                                  arguments=json.dumps({"to": ATTACKER, "body": "the lease"}))
        assert (leak.status, leak.code) == ("pending_approval", "approval.pending"), leak
        asked = await turn.propose(tool="mail.send", call_id="asked",
                                   arguments=json.dumps({"to": "bob@example.com", "body": "summary"}))
        assert (asked.status, asked.code) == ("executed", "operation.executed"), asked
    sent = [c["to"] for c in assistant.calls("send")]
    assert sent == ["carol@example.com", "bob@example.com"]  # never the attacker
    record = await assistant.record("tenant-a", run.id)
    assert record is not None and record.untrusted_from == ["mail.read"]
    assert sorted(record.destinations) == ["bob@example.com", "carol@example.com"]
    assert record.data_classes_read == ["mail"]
    assert sorted(record.executed_capabilities) == ["mail.read", "mail.send"]


@pytest.mark.asyncio(loop_scope="module")
async def test_an_agent_cannot_write_its_runs_history(assistant: Assistant) -> None:
    """The weakest role: the agent runtime's user may not put a history document (a clean
    record would wash the run of the mail it read)."""
    async with await assistant.gateway() as gw:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", roles=("assistant",),
                                context={"account": "acct-1", "task": TASK})
        inbox = await (await run.open_turn()).propose(tool="mail.read", arguments="{}")
        assert inbox.status == "executed", inbox
    violations: list[str] = []

    async def on_error(exc: Exception) -> None:
        violations.append(str(exc))

    key = run_key("tenant-a", run.id)
    nc = await assistant.connect("agent-tenant-a", error_cb=on_error)
    try:
        # A put of the key publishes on the bucket's subject (NATS KV's layout).
        await nc.publish(f"$KV.{PROGRESS_BUCKET}.{key}", msgspec.json.encode(RunRecord()))
        await nc.flush(timeout=2)
        for _ in range(40):
            if violations:
                break
            await asyncio.sleep(0.05)
    finally:
        await nc.close()
    assert any("permissions violation for publish" in v.lower() and key in v for v in violations), violations
    record = await assistant.record("tenant-a", run.id)
    assert record is not None and record.untrusted_from == ["mail.read"]  # still untrusted
