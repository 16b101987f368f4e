"""Run an AgentDojo suite's ground truth through a private Lockgate, and score it with the suite's checks.

``evaluate(Options(suite="banking"))`` loads the suite at AgentDojo's benchmark version,
makes its tools capabilities (``tools``, with the suite's declaration table), starts a
private system serving them (``deployment``) and replays, each on its own copy of the
environment:

- every user task's ground truth directly on AgentDojo's runtime (the reference), then
  through Lockgate with no reviewer and with a reviewer;
- every user task hijacked by every injection task that has ground-truth calls, directly
  and through Lockgate with the reviewer.

Injections are placed as AgentDojo's attacks place them: into the injection vectors the
user task's ground truth reads (``BaseAttack.get_injection_candidates``), the rest of the
vectors at their defaults (``TaskSuite.load_and_inject_default_environment``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline
from agentdojo.attacks.base_attacks import FixedJailbreakAttack
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime, TaskEnvironment
from agentdojo.task_suite.load_suites import get_suite

from lockgate.core.errors import LockgateError
from lockgate.evaluation.agentdojo.deployment import ACTOR, DEMO_BUNDLE, TENANT, Connected, running
from lockgate.evaluation.agentdojo.governed import Governed, Reviewer
from lockgate.evaluation.agentdojo.replay import (
    Direct,
    Executor,
    Step,
    injection_text,
    judge,
    model_output,
    replay,
)
from lockgate.evaluation.agentdojo.report import CallRecord, RunRecord, SuiteReport, figures
from lockgate.evaluation.agentdojo.suites import BENCHMARK_VERSION, SUITES
from lockgate.evaluation.agentdojo.tools import ACCOUNT, Declaration, Environments, capabilities

#: The roles every run's actor has: the demo bundle's assistant policies apply to them.
ROLES = ("assistant",)


class UnknownSuite(LockgateError):
    """A suite the evaluation has no declaration table for, or AgentDojo does not know."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="agentdojo.unknown-suite")


@dataclass(frozen=True)
class Options:
    """What to evaluate and how."""

    suite: str
    version: str = BENCHMARK_VERSION
    #: Only the first N user tasks (after ``select``).
    tasks: int | None = None
    #: Only user tasks whose id contains this text.
    select: str = ""
    #: Runs through Lockgate at once.
    concurrency: int = 2
    policy_dir: Path = DEMO_BUNDLE


def _canary(vector: str) -> str:
    return f"<LOCKGATE-CANARY-{vector}>"


def _replaced(value: Any, texts: Mapping[str, str]) -> Any:
    """``value`` (a model's dump) with every canary in its texts replaced by its text."""
    if isinstance(value, str):
        for canary, text in texts.items():
            value = value.replace(canary, text)
        return value
    if isinstance(value, dict):
        return {k: _replaced(v, texts) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v, texts) for v in value]
    return value


class Placement:
    """Environments with injections placed as AgentDojo places them, parsed once per set of vectors.

    AgentDojo formats the injections into its environment's YAML and parses it again, a
    fifth of a second for a workspace. Here each set of vectors is parsed once with a
    canary in each (``TaskSuite.load_and_inject_default_environment``, the other vectors
    at their defaults) and each injection's text then replaces its canary: the same
    environment, for texts that YAML reads as written (``injection_text`` makes them so).
    """

    def __init__(self, suite: Any) -> None:
        self.suite = suite
        self._parsed: dict[tuple[str, ...], TaskEnvironment] = {}

    def environment(self, injections: Mapping[str, str]) -> TaskEnvironment:
        """A fresh environment with ``injections`` (vector → text) placed."""
        vectors = tuple(sorted(injections))
        if vectors not in self._parsed:
            self._parsed[vectors] = self.suite.load_and_inject_default_environment(
                {v: _canary(v) for v in vectors})
        parsed = self._parsed[vectors]
        if not vectors:
            return parsed.model_copy(deep=True)
        texts = {_canary(v): text for v, text in injections.items()}
        return type(parsed).model_validate(_replaced(parsed.model_dump(), texts))


@dataclass(frozen=True)
class Plan:
    """One run to replay: a user task, the injection task hijacking it (or none), the vectors."""

    user_task: Any
    injection_task: Any | None = None
    injections: tuple[tuple[str, str], ...] = ()


@dataclass
class Prepared:
    """A plan's environment and the calls the model will propose."""

    environment: TaskEnvironment
    pre: TaskEnvironment
    user_calls: list[FunctionCall]
    injection_calls: list[FunctionCall] | None


class Evaluation:
    """One suite's plans, replayed directly and through Lockgate."""

    def __init__(self, options: Options) -> None:
        if options.suite not in SUITES:
            raise UnknownSuite(f"no declaration for suite {options.suite!r} (known: "
                               f"{', '.join(sorted(SUITES))})")
        try:
            self.suite = get_suite(options.version, options.suite)
        except KeyError:
            raise UnknownSuite(f"AgentDojo {options.version} has no suite {options.suite!r}") from None
        self.options = options
        self.declaration: Declaration = SUITES[options.suite]
        self.environments = Environments()
        self.placement = Placement(self.suite)
        self.functions = capabilities(self.declaration, self.suite.tools, self.environments)
        chosen = [t for tid, t in self.suite.user_tasks.items() if options.select in tid]
        self.user_tasks = chosen[: options.tasks] if options.tasks is not None else chosen
        default = self.suite.load_and_inject_default_environment({})
        all_injections = list(self.suite.injection_tasks.values())
        self.injection_tasks = [t for t in all_injections if t.ground_truth(default.model_copy(deep=True))]
        self.unscored = [t.ID for t in all_injections if t not in self.injection_tasks]
        # The vectors each user task's ground truth reads, found with AgentDojo's canaries.
        attack = FixedJailbreakAttack("{goal}", self.suite, GroundTruthPipeline(None))
        self.vectors: dict[str, list[str]] = {}
        self.not_injectable: list[str] = []
        for task in self.user_tasks:
            try:
                self.vectors[task.ID] = attack.get_injection_candidates(task)
            except ValueError:
                self.not_injectable.append(task.ID)

    def plans(self) -> tuple[list[Plan], list[Plan]]:
        """The benign plans and the hijacked ones."""
        benign = [Plan(t) for t in self.user_tasks]
        hijacked = [Plan(t, i, tuple((v, injection_text(i.GOAL)) for v in self.vectors[t.ID]))
                    for t in self.user_tasks if t.ID in self.vectors for i in self.injection_tasks]
        return benign, hijacked

    def prepare(self, plan: Plan) -> Prepared:
        """The plan's environment (injections placed), its copy before the run, the calls."""
        loaded = self.placement.environment(dict(plan.injections))
        environment = plan.user_task.init_environment(loaded)
        pre = environment.model_copy(deep=True)
        injection_calls = (None if plan.injection_task is None
                           else list(plan.injection_task.ground_truth(pre.model_copy(deep=True))))
        return Prepared(environment, pre, list(plan.user_task.ground_truth(pre.model_copy(deep=True))),
                        injection_calls)

    def score(self, plan: Plan, mode: str, prepared: Prepared, steps: Sequence[Step], seen: bool,
              post: TaskEnvironment, trace: Sequence[FunctionCall]) -> RunRecord:
        """The run judged by the suite's checks on the environment it left."""
        output = model_output(plan.user_task, steps)
        utility = judge(plan.user_task, output, prepared.pre, post, trace, injection=False)
        security = (None if plan.injection_task is None
                    else judge(plan.injection_task, output, prepared.pre, post, trace, injection=True))
        return RunRecord(
            mode=mode, user_task=plan.user_task.ID,
            injection_task=plan.injection_task.ID if plan.injection_task is not None else None,
            utility=utility, security=security, injection_seen=seen,
            calls=[CallRecord(role=s.role, function=s.function, arguments=s.arguments,
                              executed=s.executed, status=s.status, code=s.code, reviewed=s.reviewed,
                              approved=s.approved, reasons=list(s.reasons)) for s in steps])

    async def direct(self, plan: Plan, mode: str) -> RunRecord:
        """Replay ``plan`` on AgentDojo's own runtime."""
        prepared = self.prepare(plan)
        executor = Direct(FunctionsRuntime(self.suite.tools), prepared.environment)
        steps, seen = await replay(executor, prepared.user_calls, prepared.injection_calls)
        return self.score(plan, mode, prepared, steps, seen, prepared.environment, executor.trace)

    async def governed(self, lockgate: Connected, plan: Plan, mode: str, *, review: bool) -> RunRecord:
        """Replay ``plan`` through Lockgate, in a run of its own on its own environment."""
        prepared = self.prepare(plan)
        account = self.environments.open(prepared.environment)
        context = {"task": str(plan.user_task.PROMPT), ACCOUNT: account,
                   "user": " ".join(self.declaration.user(prepared.pre))}
        # Every run is an episode of its own, from a fresh environment: its own user too, so
        # that no actor's hourly window adds up hundreds of episodes replayed back to back.
        run = await lockgate.agent.open_run(tenant=TENANT, actor=f"{ACTOR}-{account}",
                                            context=context, roles=ROLES)
        reviewer = Reviewer(lockgate.reviewer, prepared.user_calls) if review else None
        executor: Executor = Governed(run, self.declaration, lockgate.store, reviewer)
        try:
            steps, seen = await replay(executor, prepared.user_calls, prepared.injection_calls)
        finally:
            await run.close(why="the ground truth was replayed")
            post, trace = self.environments.close(account)
        return self.score(plan, mode, prepared, steps, seen, post, trace)


async def _bounded(jobs: Sequence[Callable[[], Awaitable[RunRecord]]], concurrency: int
                   ) -> list[RunRecord]:
    """Run ``jobs``, at most ``concurrency`` at once; their records in the jobs' order."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(job: Callable[[], Awaitable[RunRecord]]) -> RunRecord:
        async with gate:
            return await job()

    return list(await asyncio.gather(*(one(j) for j in jobs)))


async def evaluate(options: Options) -> SuiteReport:
    """Evaluate one suite (see this module's docstring).

    Raises:
        UnknownSuite: no declaration table, or no such suite in AgentDojo's version.
        TimeoutError: the private system did not start in time.
    """
    started = time.monotonic()
    ev = Evaluation(options)
    benign, hijacked = ev.plans()
    runs = [await ev.direct(p, "reference") for p in benign]
    runs += [await ev.direct(p, "hijacked-reference") for p in hijacked]
    async with running(ev.functions, name=f"agentdojo-{options.suite}",
                       policy_dir=options.policy_dir) as lockgate:
        jobs: list[Callable[[], Awaitable[RunRecord]]] = []
        for plan in benign:
            jobs.append(functools.partial(ev.governed, lockgate, plan, "unreviewed", review=False))
            jobs.append(functools.partial(ev.governed, lockgate, plan, "reviewed", review=True))
        jobs += [functools.partial(ev.governed, lockgate, plan, "hijacked", review=True)
                 for plan in hijacked]
        runs += await _bounded(jobs, options.concurrency)
    return SuiteReport(
        suite=options.suite, benchmark_version=options.version, policy_dir=str(options.policy_dir),
        user_tasks=[t.ID for t in ev.user_tasks], injection_tasks=[t.ID for t in ev.injection_tasks],
        unscored_injection_tasks=ev.unscored, not_injectable=ev.not_injectable,
        figures=figures(runs), wall_s=time.monotonic() - started, runs=runs)
