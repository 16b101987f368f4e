"""Typed functions as capabilities against a running system: ``lockgate adapter serve``.

A supervisor (``run_supervisor``, what ``lockgate run`` runs, here with the six services
only) runs on an ephemeral port with its own var directory; ``lockgate adapter serve``
registers two modules with it while it runs, each served by one process with a broker user
the supervisor made for it on the spot: a test module of tickets (a ledger file counts
every call) and the git tools of ``mcp-server-git`` (``lockgate.worlds.gittools``) on a
repository made for the test, under ``deploy/policies/gittools/``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from lockgate.contracts import subjects
from lockgate.operations.registered import registered
from lockgate.runtime.credentials import credentials_path, read_run_info
from lockgate.testing.processes import Printing
from lockgate.testing.system import REPO
from tests.e2e.served_functions import HERE, LOCKGATE, ServedFunctions, supervised

TICKET_POLICIES = {
    "tickets.cedarschema": """namespace Lockgate {
  entity Ticket;
  action "ticket.comment", "ticket.comment::unattended", "ticket.close", "ticket.close::unattended"
    appliesTo { principal: [Actor], resource: [Ticket], context: Context };
}
""",
    "tickets.cedar": """@id("tickets.members")
permit (principal, action in [Lockgate::Action::"ticket.comment", Lockgate::Action::"ticket.comment::unattended",
                              Lockgate::Action::"ticket.close", Lockgate::Action::"ticket.close::unattended"],
        resource is Lockgate::Ticket);
""",
}


class Deployment(ServedFunctions):
    """The running supervisor, its var directory, the adapters served beside it, and the
    repository the git tools act on."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, TICKET_POLICIES, ledger="tickets.jsonl", ledger_env="TICKETS_LEDGER")
        self.repo = root / "repo"

    async def executions(self, name: str, capability: str) -> float:
        """How often the adapter process ``name`` called ``capability``'s function (its metrics)."""
        nc = await self.connect("admin")
        try:
            answer = json.loads((await nc.request(subjects.adapter_status(name), b"", timeout=2)).data)
        finally:
            await nc.close()
        text = await asyncio.to_thread(
            lambda: urllib.request.urlopen(answer["metrics"], timeout=5).read().decode())
        pattern = re.compile(r'^lockgate_adapter_executions_total\{capability="' + re.escape(capability)
                             + r'",[^}]*\} ([0-9.e+]+)$', re.MULTILINE)
        return sum(float(v) for v in pattern.findall(text))

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.repo), *args], check=True, capture_output=True,
                              text=True).stdout


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Deployment]:
    d = Deployment(tmp_path_factory.mktemp("functions"))
    d.repo.mkdir()
    d.git("init", "-q", "-b", "main")
    d.git("config", "user.email", "test@example.com")
    d.git("config", "user.name", "Test")
    (d.repo / "README").write_text("first\n")
    d.git("add", "README")
    d.git("commit", "-q", "-m", "first")
    async with supervised(d):
        await d.serving("function_tickets", "tickets")
        await d.serving("lockgate.worlds.gittools.capabilities:CAPABILITIES", "gittools")
        yield d


@pytest.mark.asyncio(loop_scope="module")
async def test_serve_is_taken_in_by_the_running_supervisor(deployment: Deployment) -> None:
    info = read_run_info(deployment.var_dir)
    assert info is not None
    assert info.adapters["tickets"] == ["ticket.comment", "ticket.close"]
    assert info.adapters["gittools"] == ["git.status", "git.log", "git.add", "git.create_branch",
                                         "git.commit"]
    assert registered(deployment.var_dir)["tickets"] == ("ticket.comment", "ticket.close")
    assert credentials_path(deployment.var_dir, "adapter-tickets").exists()
    assert deployment.run is not None
    assert any(line.startswith("lockgate: adapter tickets taken in") for line in deployment.run.lines)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_proposal_executes_exactly_once(deployment: Deployment) -> None:
    async with await deployment.gateway() as gw:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"ticket_id": "T-1"})
        turn = await run.open_turn()
        offered = {tool.name: tool for tool in turn.tools}
        assert set(offered["ticket.comment"].parameters["properties"]) == {"text"}
        done = await turn.propose(tool="ticket.comment", arguments='{"text": "Looked into it."}',
                                  call_id="call-once")
        assert (done.status, done.code) == ("executed", "operation.executed"), done
        again = await turn.propose(tool="ticket.comment", arguments='{"text": "Looked into it."}',
                                   call_id="call-once")
        assert again.status == "executed" and again.candidate_id == done.candidate_id
    made = [c for c in deployment.calls("comment") if c["text"] == "Looked into it."]
    assert len(made) == 1 and made[0]["ticket_id"] == "T-1"


@pytest.mark.asyncio(loop_scope="module")
async def test_a_context_argument_from_the_model_is_refused(deployment: Deployment) -> None:
    async with await deployment.gateway() as gw:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"ticket_id": "T-2"})
        turn = await run.open_turn()
        refused = await turn.propose(tool="ticket.comment",
                                     arguments='{"text": "elsewhere", "ticket_id": "T-999"}')
    assert refused.status == "rejected", refused
    assert not [c for c in deployment.calls("comment") if c["text"] == "elsewhere"]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_redelivered_order_never_calls_the_write_twice(deployment: Deployment) -> None:
    """The adapter dies right after closing the ticket: its order comes again, to the adapter
    started after it, and the executor refuses the second crossing: one call, ever."""
    calls = deployment.calls

    async with await deployment.gateway() as gw:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"ticket_id": "T-3"})
        turn = await run.open_turn()
        pending = asyncio.create_task(turn.propose(tool="ticket.close", arguments='{"reason": "crash"}',
                                                   timeout_s=60))
        tickets = deployment.served["tickets"]
        code = await asyncio.wait_for(tickets.proc.wait(), 60)
        assert code == 3, tickets.lines[-20:]
        assert len(calls("close")) == 1
        again = await deployment.serve("function_tickets", "tickets")
        # The redelivered order (ack wait: 5 s) reaches the new process, which may not cross.
        await again.wait_for_line(lambda line: "refused order" in line, 60)
        assert len(calls("close")) == 1
        assert await deployment.executions("tickets", "ticket.close") >= 1  # it was handed the order
        answered = await pending
        assert answered.status != "executed", answered
    assert len(calls("close")) == 1


@pytest.mark.asyncio(loop_scope="module")
async def test_the_adapter_user_cannot_publish_another_adapters_reports(deployment: Deployment) -> None:
    violations: list[str] = []

    async def on_error(exc: Exception) -> None:
        violations.append(str(exc))

    nc = await deployment.connect("adapter-tickets", error_cb=on_error)
    try:
        await nc.publish(subjects.report("git.commit", "intent-1"), b'{"stage": "completed"}')
        await nc.flush(timeout=2)
        for _ in range(40):
            if violations:
                break
            await asyncio.sleep(0.05)
    finally:
        await nc.close()
    assert any("permissions violation for publish" in v.lower() and "lg.report.git.commit" in v
               for v in violations), violations


# -- the git tools nobody here wrote -------------------------------------------------------


@pytest.mark.asyncio(loop_scope="module")
async def test_a_read_of_the_third_party_tools_executes_under_the_policy(deployment: Deployment) -> None:
    (deployment.repo / "new.txt").write_text("new\n")
    async with await deployment.gateway() as gw:
        run = await gw.open_run(tenant="tenant-a", actor="user-42",
                                context={"repository": str(deployment.repo)})
        turn = await run.open_turn()
        assert "repo" not in {p for t in turn.tools if t.name == "git.status"
                              for p in t.parameters["properties"]}
        done = await turn.propose(tool="git.status", arguments="{}")
        assert (done.status, done.code) == ("executed", "operation.executed"), done
        assert done.result is not None and "new.txt" in json.dumps(done.result)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_denied_branch_never_reaches_the_function(deployment: Deployment) -> None:
    async with await deployment.gateway() as gw:
        run = await gw.open_run(tenant="tenant-a", actor="user-42",
                                context={"repository": str(deployment.repo)})
        turn = await run.open_turn()
        denied = await turn.propose(tool="git.create_branch", arguments='{"branch_name": "topic"}')
        # Denied by policy (no permit): a reason the contract does not disclose reads as
        # unavailable to the model.
        assert (denied.status, denied.code) == ("unavailable", "operation.unavailable"), denied
        assert await deployment.executions("gittools", "git.create_branch") == 0
        assert "topic" not in deployment.git("branch", "--list")
        maintainer = await gw.open_run(tenant="tenant-a", actor="user-42", roles=("maintainer",),
                                       context={"repository": str(deployment.repo)})
        made = await (await maintainer.open_turn()).propose(
            tool="git.create_branch", arguments='{"branch_name": "topic"}')
        assert made.status == "executed", made
    assert await deployment.executions("gittools", "git.create_branch") == 1
    assert "topic" in deployment.git("branch", "--list")


@pytest.mark.asyncio(loop_scope="module")
async def test_a_commit_waits_for_a_reviewer_then_runs_once(deployment: Deployment) -> None:
    (deployment.repo / "change.txt").write_text("change\n")
    before = deployment.git("rev-list", "--count", "HEAD")
    async with await deployment.gateway() as gw, await deployment.gateway("reviewer-alice") as alice:
        run = await gw.open_run(tenant="tenant-a", actor="user-42",
                                context={"repository": str(deployment.repo)})
        turn = await run.open_turn()
        staged = await turn.propose(tool="git.add", arguments='{"files": ["change.txt"]}')
        assert staged.status == "executed", staged
        pending = await turn.propose(tool="git.commit", arguments='{"message": "A change"}')
        assert (pending.status, pending.code) == ("pending_approval", "approval.pending"), pending
        assert await deployment.executions("gittools", "git.commit") == 0
        assert deployment.git("rev-list", "--count", "HEAD") == before
        review = await alice.show_review(tenant="tenant-a", candidate_id=pending.candidate_id)
        await alice.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                                  review_id=review.review_id, digest=review.digest, approve=True)
        done = await run.wait(pending.candidate_id)
        assert (done.status, done.code) == ("executed", "operation.executed"), done
    assert await deployment.executions("gittools", "git.commit") == 1
    assert int(deployment.git("rev-list", "--count", "HEAD")) == int(before) + 1
    assert "A change" in deployment.git("log", "-1", "--format=%s")


@pytest.mark.asyncio(loop_scope="module")
async def test_an_adapter_stops_within_seconds_of_sigterm(deployment: Deployment) -> None:
    proc = deployment.served["gittools"]
    started = time.monotonic()
    code = await proc.stop(signal.SIGTERM, timeout_s=15)
    assert code == 0 and time.monotonic() - started < 10, proc.lines[-10:]


# -- without a running system ----------------------------------------------------------------


async def test_serve_without_a_running_system_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_VAR_DIR=str(tmp_path / "var"), TICKETS_LEDGER=str(tmp_path / "l"),
               PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    proc = await Printing.start(*LOCKGATE, "adapter", "serve", "function_tickets", env=env, cwd=HERE)
    code = await asyncio.wait_for(proc.proc.wait(), 60)
    await proc.reader
    assert code != 0, proc.lines
    assert any("no Lockgate runs from" in line and "lockgate run" in line for line in proc.lines), proc.lines
    assert not (tmp_path / "var" / "adapters").exists()  # nothing registered


@pytest.mark.asyncio(loop_scope="module")
async def test_serve_refuses_a_capability_or_a_name_already_taken(deployment: Deployment) -> None:
    taken = await Printing.start(*LOCKGATE, "adapter", "serve", "function_tickets", "--name", "other",
                                 env=deployment.env(), cwd=HERE)
    assert await asyncio.wait_for(taken.proc.wait(), 60) == 1
    await taken.reader
    assert any("already served by another adapter: ticket.comment (adapter tickets)" in line
               for line in taken.lines), taken.lines
    own = await Printing.start(*LOCKGATE, "adapter", "serve", "function_tickets", "--name", "casenotes",
                               env=deployment.env(), cwd=HERE)
    assert await asyncio.wait_for(own.proc.wait(), 60) == 1
    await own.reader
    assert any("one the deployment's settings name" in line for line in own.lines), own.lines
    assert set(registered(deployment.var_dir)) == {"tickets", "gittools"}
