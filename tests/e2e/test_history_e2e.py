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
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest
import pytest_asyncio
from nats.js.errors import KeyNotFoundError

from lockgate.adapters.scaffold import schema_fragment
from lockgate.authz.history import RunRecord
from lockgate.client.sdk import Gateway
from lockgate.client.sdk import connect as connect_gateway
from lockgate.operations.supervisor import READY_LINE
from lockgate.runtime.credentials import credentials_path, load_credentials, read_run_info
from lockgate.runtime.ports.history import run_key
from lockgate.runtime.topology import PROGRESS_BUCKET
from lockgate.testing.processes import Printing
from lockgate.testing.system import REPO, bundle_copy
from tests.e2e.function_assistant import ATTACKER, CAPABILITIES

HERE = Path(__file__).resolve().parent
LOCKGATE = [sys.executable, "-m", "lockgate.cli"]
#: The supervisor over the six services only: the demo's adapters play no part here.
SUPERVISE = (
    "import asyncio, sys\n"
    "from lockgate.runtime.settings import Settings\n"
    "from lockgate.operations.status import SERVICES\n"
    "from lockgate.operations.supervisor import run_supervisor\n"
    "children = [(s, f'lockgate.{s}') for s in SERVICES]\n"
    "sys.exit(asyncio.run(run_supervisor(Settings(), port=0, children=children)))\n"
)
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


class Assistant:
    """The running supervisor, its var directory, and the mailbox served beside it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.var_dir = root / "var"
        self.ledger = root / "assistant.jsonl"
        declared = ("Account",) if declared_by_demo("Account") else ()
        self.policies = bundle_copy(root, (REPO / "deploy" / "policies" / "bundle.yaml").read_text(), {
            "history-e2e.cedarschema": schema_fragment(CAPABILITIES, "tests", declared=declared),
            "history-e2e.cedar": POLICIES,
        })
        self.run: Printing | None = None
        self.served: Printing | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
        env.update(LOCKGATE_VAR_DIR=str(self.var_dir), LOCKGATE_POLICY_DIR=str(self.policies),
                   LOCKGATE_METRICS_PORT="0", ASSISTANT_LEDGER=str(self.ledger),
                   PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
        return env

    def url(self) -> str:
        info = read_run_info(self.var_dir)
        assert info is not None
        return info.url

    async def connect(self, user: str, **options: object) -> nats.NATS:
        creds = load_credentials(credentials_path(self.var_dir, user))
        return await nats.connect(self.url(), user=creds.user, password=creds.password,
                                  inbox_prefix=creds.inbox_prefix, allow_reconnect=False, **options)

    async def gateway(self) -> Gateway:
        return await connect_gateway(self.url(), credentials=credentials_path(self.var_dir, "agent-tenant-a"),
                                     host=credentials_path(self.var_dir, "host"), timeout_s=10)

    def calls(self, kind: str) -> list[dict[str, str]]:
        """The mailbox's calls of ``kind``, from its ledger (``function_assistant``)."""
        lines = self.ledger.read_text().splitlines() if self.ledger.exists() else []
        return [c for c in map(json.loads, lines) if c["kind"] == kind]

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
    a = Assistant(tmp_path_factory.mktemp("history"))
    a.run = await Printing.start(sys.executable, "-c", SUPERVISE, env=a.env(), cwd=a.root)
    try:
        await a.run.wait_for_line(lambda line: line == READY_LINE, 240)
        a.served = await Printing.start(*LOCKGATE, "adapter", "serve", "function_assistant:CAPABILITIES",
                                        "--name", "assistant", env=a.env(), cwd=HERE)
        await a.served.wait_for_line(lambda line: line.startswith("lockgate: adapter assistant serving"), 60)
        yield a
    finally:
        if a.served is not None:
            await a.served.stop(signal.SIGTERM, timeout_s=15)
        code = await a.run.stop(timeout_s=60)
    assert code == 0, a.run.lines[-20:]


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
