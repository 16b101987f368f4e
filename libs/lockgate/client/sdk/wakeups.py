"""Wake-ups for proposals waiting for their responses, and how soon the stream is asked again after one."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError

from lockgate.contracts.subjects import responses_of_run

#: After a wake-up whose response the stream does not show yet, it is asked again after
#: the first of these, then twice as long each time, up to the second (seconds).
WAKE_RETRY_S = (0.002, 0.5)


def pause_after(soon_s: float, *, woke: bool) -> float:
    """How soon to ask the stream again (0: the usual second): sooner after a wake-up the
    stream did not show yet, doubling while it still does not, up to ``WAKE_RETRY_S``'s second."""
    first, last = WAKE_RETRY_S
    if woke:  # woken, and the stream did not show it: ask again soon
        return first if soon_s == 0.0 else min(2 * soon_s, last)
    if soon_s:  # still not there: a little later, until the pause is the usual
        return 0.0 if soon_s >= last else min(2 * soon_s, last)
    return soon_s


async def was_woken(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``event``; whether it was set. Cleared either way."""
    woke = False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
        woke = True
    event.clear()
    return woke


#: Runs whose responses one gateway keeps a subscription to; past this many, the least
#: recently proposed in with no proposal waiting is given up.
RUNS_WATCHED = 1024


class Wakeups:
    """Wake-ups for proposals waiting for their responses: one core subscription per run.

    A proposal waits on its two response subjects (its call's intent, and the one a
    reused call id is refused on). Subscribing to both for every proposal cost two
    subscriptions and two unsubscriptions a candidate, each an update of the broker's
    interest (and on a cluster, of every node's); a run's proposals share one instead,
    kept while the gateway lives (at most ``RUNS_WATCHED`` runs).
    """

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._runs: OrderedDict[str, asyncio.Future[Subscription]] = OrderedDict()
        self._waiting: dict[str, set[asyncio.Event]] = {}

    async def watch(self, tenant: str, run_id: str, watched: tuple[str, ...], woken: asyncio.Event) -> None:
        """Set ``woken`` whenever a message arrives on one of ``watched`` (subjects of the run).

        Returns once the run's subscription is made: what is published after that wakes.
        """
        wildcard = responses_of_run(tenant, run_id)
        made = self._runs.get(wildcard)
        if made is not None:
            self._runs.move_to_end(wildcard)
            await asyncio.shield(made)
        else:
            made = asyncio.get_running_loop().create_future()
            self._runs[wildcard] = made
            try:
                made.set_result(await self._nc.subscribe(wildcard, cb=self._wake))
            except BaseException as exc:
                del self._runs[wildcard]
                made.set_exception(exc)
                made.exception()  # read here: the run's other proposals see it through shield
                raise
            await self._forget_idle()
        for subject in watched:
            self._waiting.setdefault(subject, set()).add(woken)

    def unwatch(self, watched: tuple[str, ...], woken: asyncio.Event) -> None:
        """Stop waking ``woken``."""
        for subject in watched:
            waiters = self._waiting.get(subject)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiting[subject]

    async def _wake(self, msg: Msg) -> None:
        for woken in self._waiting.get(msg.subject, ()):
            woken.set()

    async def _forget_idle(self) -> None:
        """Give up the least recently used runs' subscriptions past ``RUNS_WATCHED``,
        unless a proposal of theirs is waiting."""
        while len(self._runs) > RUNS_WATCHED:
            idle = next((w for w in self._runs if self._runs[w].done()
                         and not any(s.startswith(w[:-1]) for s in self._waiting)), None)
            if idle is None:
                return
            made = self._runs.pop(idle)
            if made.exception() is None:
                with contextlib.suppress(NatsError):
                    await made.result().unsubscribe()

