"""Where the running system is, and as whom a command connects to it.

Every command finds the system by itself: the URL and the credentials ``lockgate run``
made are under its ``var`` directory (``run.json``, ``credentials/``), and each command
connects as the role it needs (``lockgate.operations.roles``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nats.errors import Error as NatsError

from lockgate.cli.group import UsageError
from lockgate.client.discovery import Local, find_local
from lockgate.client.output import Output
from lockgate.client.sdk import ClientError, Gateway, connect
from lockgate.core.ids import is_subject_token
from lockgate.operations.deployment import Deployment
from lockgate.runtime.credentials import Credentials
from lockgate.runtime.settings import Settings

if TYPE_CHECKING:
    from lockgate.views.store import Views


@dataclass(frozen=True)
class Where:
    """The running system as this command sees it (``lockgate.client.discovery``)."""

    local: Local
    settings: Settings

    @property
    def url(self) -> str:
        return self.local.url

    @property
    def var_dir(self) -> Path:
        return self.local.var_dir

    @property
    def deployment(self) -> Deployment | None:
        return self.local.deployment

    def credentials(self, user: str) -> Credentials | None:
        """``user``'s credentials, or ``None`` on a broker without users.

        Raises:
            UsageError: the deployment has users but not this one.
        """
        try:
            return self.local.credentials(user)
        except LookupError as exc:
            raise UsageError(str(exc)) from None

    def person(self, kind: str, chosen: str | None) -> str:
        """The reviewer or operator to act as: ``--as``, else the only or first one configured."""
        if chosen:
            return chosen
        people = self.settings.reviewers if kind == "reviewer" else self.settings.operators
        if self.deployment is not None:
            prefix = f"{kind}-"
            have = sorted(u[len(prefix):] for u in self.deployment.credentials if u.startswith(prefix))
            ordered = [p for p in people if p in have] or have
            if ordered:
                return ordered[0]
        if people:
            return next(iter(people))
        raise UsageError(f"no {kind} configured: pass --as NAME")

    async def gateway(self, user: str, *, host: bool = False, principal: str = "") -> Gateway:
        """A connection as ``user`` (and as the trusted host when ``host``)."""
        creds = self.credentials(user)
        host_creds = self.credentials("host") if host else None
        try:
            gw = await connect(self.url, credentials=creds, host=host_creds)
        except ClientError as exc:
            raise ClientError(
                f"cannot reach Lockgate at {self.url} (is `lockgate run` running?): "
                f"{exc.__cause__ or exc}", code=exc.code,
            ) from None
        if creds is None:
            gw.user, gw.principal = user, principal or user
        return gw


def locate(args: argparse.Namespace) -> Where:
    """Find the system: ``--url`` or ``LOCKGATE_NATS_URL``, else what ``lockgate run`` wrote."""
    settings = Settings()
    return Where(find_local(getattr(args, "url", None), settings.var_dir), settings)


def on_system(
    handler: Callable[[argparse.Namespace, Where, Output], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace, Output], int]:
    """A group's ``run`` for a command that talks to the running system: find it, then run ``handler``."""

    def run(args: argparse.Namespace, out: Output) -> int:
        return asyncio.run(handler(args, locate(args), out))

    return run


def subject_id(value: str, what: str) -> str:
    """``value`` if it can be a subject token (a tenant, an intent, a run id).

    Raises:
        UsageError: it cannot.
    """
    if not is_subject_token(value):
        raise UsageError(f"{what} {value!r} is not an id ([A-Za-z0-9_-], at most 64)")
    return value


async def operator(where: Where, args: argparse.Namespace) -> Gateway:
    """A connection as the operator ``--as`` names (else the first one configured)."""
    person = where.person("operator", getattr(args, "as_", None))
    return await where.gateway(f"operator-{person}", principal=person)


async def views(where: Where, args: argparse.Namespace, out: Output, *,
                user: str | None = None) -> Views:
    """The views, once the projector says they hold every event stored before now.

    Asked as an operator on ``lg.status.projector``: the projector answering as the
    lease holder reports how far the views lag the stream at that moment. If it does
    not say 0 within ``--wait`` seconds, the views are read as they are and a note
    on stderr says they may lag.
    """
    from lockgate.views.store import open_views

    gw = await (where.gateway(user) if user else operator(where, args))
    try:
        lag = await _views_lag(gw, float(getattr(args, "wait", 5.0)))
    finally:
        await gw.close()
    if lag != 0:
        why = "the projector did not answer" if lag is None else f"{lag} events behind"
        out.warn(f"the views may not show the latest events ({why})")
    return open_views(where.settings.views_url, var_dir=where.var_dir)


async def _views_lag(gw: Gateway, wait_s: float) -> int | None:
    """How many events the views lag the stream (``None``: no projector answered)."""
    from lockgate.contracts import subjects

    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    lag: int | None = None
    while True:
        inbox = gw.nc.new_inbox()
        sub = await gw.nc.subscribe(inbox)
        try:
            await gw.nc.publish(subjects.status("projector"), b"", reply=inbox)
            end = loop.time() + 0.5
            while loop.time() < end:  # every replica answers; the one projecting has a lag
                try:
                    msg = await sub.next_msg(timeout=max(0.01, end - loop.time()))
                except (TimeoutError, NatsError):
                    break
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    lag = int(json.loads(msg.data)["consumers"]["views"]["pending"])
                    break
        finally:
            await sub.unsubscribe()
        if lag == 0 or loop.time() > deadline:
            return lag
        await asyncio.sleep(0.1)


def world_dir(directory: Path, name: str) -> Path:
    """``directory`` if the ``name`` world is there.

    Raises:
        UsageError: it is not (the system has not run yet, or runs elsewhere).
    """
    if not directory.is_dir():
        raise UsageError(
            f"no {name} world in {directory}: `lockgate run` creates it on first start "
            "(or set LOCKGATE_VAR_DIR to where it runs)")
    return directory


def world_dirs() -> dict[str, Path]:
    """Where each simulated world keeps its ledger, by name."""
    from lockgate.worlds.casenotes.adapter import CaseWorldSettings
    from lockgate.worlds.items.adapter import ItemsWorldSettings
    from lockgate.worlds.repo.adapter import RepoWorldSettings

    return {"case": CaseWorldSettings().dir, "items": ItemsWorldSettings().dir,
            "repo": RepoWorldSettings().dir}
