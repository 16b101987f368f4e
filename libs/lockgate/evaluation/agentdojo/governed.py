"""Proposing ground-truth calls through Lockgate, with or without a reviewer.

Each call is proposed as a model would propose it: the arguments as JSON text, under a
fresh call id, in the run's turn. One turn serves the whole run: a turn is the catalogue
the model was offered, and nothing in a replayed run changes what is offered (the tools
declare no offer rules); a turn per call would also leave the broker a consumer per turn
for minutes (the capability registry lists its keys with a KV watch), which a few thousand
calls exhaust. A call that waits for a review is, without a reviewer,
withdrawn (a runtime that gives up); with one, decided by ``Reviewer``: it approves a call
the user asked for (equal to one of the user task's ground-truth calls: same tool, same
arguments) and rejects everything else. Why a call did not simply execute is read from the
record: the response's code, policy's reasons and the policies that decided it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentdojo.functions_runtime import FunctionCall

from lockgate.client.sdk import ClientError, Gateway, Run, Turn
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import random_id
from lockgate.evaluation.agentdojo.replay import Role, Step, texts
from lockgate.evaluation.agentdojo.tools import Declaration
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.intent.events import PolicyDecided

#: The provider name the replayed calls carry on the record.
PROVIDER = "agentdojo-ground-truth"
#: How long one call may take to be answered, and to settle after a decision.
CALL_TIMEOUT_S = 30.0
#: How often a rate-limited call is proposed again before the run gives up on it.
RATE_LIMITED_TRIES = 100


def same_call(a: FunctionCall, b: FunctionCall) -> bool:
    """Whether two calls are the same: one tool, equal arguments (as JSON reads them)."""
    return a.function == b.function and _canonical(a.args) == _canonical(b.args)


def _canonical(args: Any) -> str:
    return json.dumps(args, sort_keys=True, default=str)


@dataclass(frozen=True)
class Reviewer:
    """A reviewer who approves exactly what the user asked for, and rejects the rest."""

    gateway: Gateway
    asked: Sequence[FunctionCall]

    def approves(self, call: FunctionCall) -> bool:
        """Whether ``call`` is one the user asked for."""
        return any(same_call(call, wanted) for wanted in self.asked)

    async def decide(self, tenant: str, candidate_id: str, call: FunctionCall) -> bool:
        """Approve or reject the review ``candidate_id`` waits on; return the decision.

        Raises:
            ClientError: the review could not be read or decided (policy may not let this
                reviewer approve it).
        """
        review = await self.gateway.show_review(tenant=tenant, candidate_id=candidate_id)
        approve = self.approves(call)
        await self.gateway.decide_review(
            tenant=tenant, candidate_id=candidate_id, review_id=review.review_id,
            digest=review.digest, approve=approve,
            reason="the user asked for it" if approve else "the user did not ask for it")
        return approve


class Governed:
    """Proposes a run's calls through Lockgate and waits until each is settled."""

    def __init__(self, run: Run, declaration: Declaration, store: JetStreamEventStore,
                 reviewer: Reviewer | None) -> None:
        self.run, self.declaration, self.store, self.reviewer = run, declaration, store, reviewer
        self._turn: Turn | None = None

    async def call(self, call: FunctionCall, role: Role) -> Step:
        """Propose ``call``; settle a review as this run's reviewer would; say what came of it."""
        resp = await self._propose(call)
        reviewed, approved, undecided = False, None, ""
        if resp.status == "paused":
            resp = await self.run.wait(resp.candidate_id, past="paused", timeout_s=CALL_TIMEOUT_S)
        if resp.status == "pending_approval":
            reviewed = True
            resp, approved, undecided = await self._review(resp, call)
        executed = resp.status == "executed"
        # A user's call that simply ran needs no why; an attacker's call always does.
        plain = executed and not reviewed and role == "user"
        reasons: tuple[str, ...] = ()
        if not plain:
            reasons = tuple(r for r in (undecided, *await self._why(resp)) if r)
        return Step(role, call.function, dict(call.args), executed=executed,
                    visible=texts(resp.result) if resp.result is not None else "",
                    status=resp.status, code=resp.code, reviewed=reviewed, approved=approved,
                    reasons=reasons)

    async def _propose(self, call: FunctionCall) -> ModelResponse:
        """Propose in the run's turn; a rate-limited call again after the time it was told."""
        arguments = json.dumps(dict(call.args), default=str)
        tool = self.declaration.capability_name(call.function)
        if self._turn is None:
            self._turn = await self.run.open_turn()
        for _ in range(RATE_LIMITED_TRIES):
            resp = await self._turn.propose(tool=tool, arguments=arguments, call_id=random_id(),
                                      provider=PROVIDER, timeout_s=CALL_TIMEOUT_S)
            if resp.code != "rate.limited":
                return resp
            await asyncio.sleep(resp.retry_after_s or 0.1)
        return resp

    async def _review(self, resp: ModelResponse, call: FunctionCall
                      ) -> tuple[ModelResponse, bool | None, str]:
        """Decide the review (or, without a reviewer, withdraw the call).

        Returns:
            The settled answer, the reviewer's decision (``None``: nobody decided), and
            ``review.undecided:<code>`` when the reviewer's decision was refused.
        """
        if self.reviewer is None:
            return await self._withdraw(resp.candidate_id, "no reviewer"), None, ""
        try:
            approved = await self.reviewer.decide(self.run.tenant, resp.candidate_id, call)
        except ClientError as exc:
            # The decision was refused (policy may not let this reviewer decide it): the
            # call stays unapproved, and the runtime gives up on it.
            withdrawn = await self._withdraw(resp.candidate_id, "the review could not be decided")
            return withdrawn, None, f"review.undecided:{exc.code}"
        settled = await self.run.wait(resp.candidate_id, timeout_s=CALL_TIMEOUT_S)
        return settled, approved, ""

    async def _withdraw(self, candidate_id: str, why: str) -> ModelResponse:
        withdrawn = await self.run.withdraw(candidate_id, why=why)
        if withdrawn.status == "withdrawal_requested":
            withdrawn = await self.run.wait(candidate_id, past="withdrawal_requested",
                                            timeout_s=CALL_TIMEOUT_S)
        return withdrawn

    async def _why(self, resp: ModelResponse) -> tuple[str, ...]:
        """The response's code, then policy's reasons and deciding policies, from the record."""
        why = [resp.code]
        history = await self.store.load(self.run.tenant, resp.candidate_id)
        for event in map(decode_event, history.events):
            if isinstance(event, PolicyDecided):
                why += [f"policy.{event.outcome}", *event.reasons, *event.determining]
        return tuple(dict.fromkeys(w for w in why if w))
