"""Opening runs and turns through a cluster's hiccups: asked again, under one id, until answered."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from lockgate.client.sdk import ClientError, Gateway, Refused
from lockgate.contracts.messages import OpenRun, OpenTurn, Refusal, RunOpened, TurnOpened
from lockgate.contracts.subjects import run_open_subject, turn_subject
from lockgate.core.ids import random_id


class Intake:
    """Answers opens after ``silent`` unanswered requests and ``busy`` refusals."""

    def __init__(self, *, silent: int = 0, busy: int = 0) -> None:
        self.silent, self.busy = silent, busy
        self.asked: list[bytes] = []

    async def on_open(self, msg: Msg) -> None:
        self.asked.append(msg.data)
        if len(self.asked) <= self.silent:
            return  # lost with a node going away
        if len(self.asked) <= self.silent + self.busy:
            await msg.respond(msgspec.json.encode(Refusal("service.unavailable", "ask again")))
            return
        if msg.subject.endswith(".open"):
            req = msgspec.json.decode(msg.data, type=OpenRun)
            await msg.respond(msgspec.json.encode(
                RunOpened(run_id=req.run_id or "server-chosen", tenant=req.tenant, actor=req.actor)))
        else:
            turn = msgspec.json.decode(msg.data, type=OpenTurn)
            await msg.respond(msgspec.json.encode(
                TurnOpened(turn_id=turn.turn_id or "server-chosen", catalogue_digest="sha256:c", tools=())))


async def test_a_run_open_lost_and_refused_is_asked_again_under_one_id(nc: Client) -> None:
    tenant = f"t-{random_id()[:8]}"
    intake = Intake(silent=2, busy=2)
    sub = await nc.subscribe(run_open_subject(tenant), cb=intake.on_open)
    gw = Gateway(nc, timeout_s=0.3)
    run = await gw.open_run(tenant=tenant, actor="user-42")
    await sub.unsubscribe()
    ids = {msgspec.json.decode(body, type=OpenRun).run_id for body in intake.asked}
    assert len(intake.asked) == 5 and ids == {run.id}  # one run, chosen by the client


async def test_a_turn_open_is_asked_again_under_one_id(nc: Client) -> None:
    tenant = f"t-{random_id()[:8]}"
    intake = Intake(silent=1, busy=1)
    sub = await nc.subscribe(turn_subject(tenant, "run-1"), cb=intake.on_open)
    turn = await Gateway(nc, timeout_s=0.3).run(tenant=tenant, run_id="run-1").open_turn()
    await sub.unsubscribe()
    ids = {msgspec.json.decode(body, type=OpenTurn).turn_id for body in intake.asked}
    assert len(intake.asked) == 3 and ids == {turn.id}


async def test_an_answer_that_is_not_busy_is_not_asked_again(nc: Client) -> None:
    tenant = f"t-{random_id()[:8]}"
    asked: list[bytes] = []

    async def refuse(msg: Msg) -> None:
        asked.append(msg.data)
        await msg.respond(msgspec.json.encode(Refusal("run.tenant-mismatch")))

    sub = await nc.subscribe(run_open_subject(tenant), cb=refuse)
    with pytest.raises(Refused) as refused:
        await Gateway(nc, timeout_s=0.3).open_run(tenant=tenant, actor="user-42")
    await sub.unsubscribe()
    assert refused.value.code == "run.tenant-mismatch" and len(asked) == 1


async def test_nobody_answering_gives_up_after_the_retry_window(
    nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lockgate.client.sdk.requests.OPEN_RETRY_S", 1.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ClientError) as unanswered:
        await Gateway(nc, timeout_s=0.2).open_run(tenant=f"t-{random_id()[:8]}", actor="user-42")
    assert unanswered.value.code == "lockgate.unavailable"
    assert loop.time() - started < 5
