"""A bundle's admission settings (``bundle.yaml``): pauses, progress checkpoints, budgets, limits.

Permission is Cedar's question; admission is this file's: an actor allowed to act
still runs out of budget, hits a rate limit, or is stopped when it keeps proposing
the same denied consequence. Validated when the bundle loads, part of its revision.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

CONFIG_FILE = "bundle.yaml"


#: The most rechecks one pause may take (timeout / recheck): each is a delivery of its
#: timer, and a timer's deliveries are bounded (``runtime.specs.PAUSE_DELIVERIES``), so a
#: pause that needed more would be given up before it timed out.
MAX_PAUSE_RECHECKS = 900


class PauseConfig(BaseModel):
    """How a paused decision waits for its evidence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recheck_s: float = Field(default=2.0, gt=0)
    """How often missing evidence (facts, budgets) is asked for again."""
    timeout_s: float = Field(default=120.0, gt=0)
    """After this long without evidence the pause becomes a denial."""

    @model_validator(mode="after")
    def _fits_its_deliveries(self) -> PauseConfig:
        if self.timeout_s / self.recheck_s > MAX_PAUSE_RECHECKS:
            raise ValueError(f"a pause of {self.timeout_s:g}s rechecked every {self.recheck_s:g}s "
                             f"takes more than {MAX_PAUSE_RECHECKS} rechecks")
        return self


class ProgressConfig(BaseModel):
    """When repeating a denied consequence stops being useful."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_repeated_denials: int = Field(default=3, ge=1)
    """Denials of one consequence in one run, on unchanged facts, before the run's
    further candidates for it are stopped with ``run.progress-stalled``."""


class Budget(BaseModel):
    """A quota over a window, a cost budget, or a concurrency cap, for one scope."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    scope: Literal["actor", "run", "capability", "tenant"]
    capabilities: tuple[str, ...] = ()
    """Capabilities it counts (empty: every capability)."""
    window_s: float | None = Field(default=None, gt=0)
    max_count: int | None = Field(default=None, ge=0)
    max_cost: int | None = Field(default=None, ge=0)
    max_in_flight: int | None = Field(default=None, ge=1)
    on_exhausted: Literal["deny", "pause"] = "deny"

    @model_validator(mode="after")
    def _limits(self) -> Budget:
        if self.max_count is None and self.max_cost is None and self.max_in_flight is None:
            raise ValueError(f"budget {self.name}: set max_count, max_cost or max_in_flight")
        if (self.max_count is not None or self.max_cost is not None) and self.window_s is None:
            raise ValueError(f"budget {self.name}: a count or cost limit needs window_s")
        return self

    def applies_to(self, capability: str) -> bool:
        """True when this budget counts ``capability``."""
        return not self.capabilities or capability in self.capabilities


class Limit(BaseModel):
    """A flood limit intake applies before anything expensive: a rate, an in-flight cap, or both.

    Counted per scope (one actor, one run, one tenant) over every capability, on the
    candidates intake would otherwise accept; a candidate past a limit is refused with
    ``rate.limited`` (the rate) or ``rate.in-flight`` (the cap), which the model sees as
    ``denied``/``rate.limited``, not persistent, with a ``retry_after_s``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    scope: Literal["actor", "run", "tenant"]
    per_s: float | None = Field(default=None, gt=0)
    """Sustained candidates per second (a generic cell rate: smooth, no window edges)."""
    burst: int | None = Field(default=None, ge=1)
    """How many may come at once above the rate (default: one second's worth)."""
    max_in_flight: int | None = Field(default=None, ge=1)
    """Candidates accepted and not yet ended (a terminal state, or waiting for an operator)."""
    retry_after_s: float = Field(default=1.0, gt=0)
    """What the model is told to wait when the in-flight cap is reached."""
    hold_ttl_s: float = Field(default=3600.0, gt=0)
    """An in-flight hold older than this is taken to have leaked and stops counting."""

    @model_validator(mode="after")
    def _something(self) -> Limit:
        if self.per_s is None and self.max_in_flight is None:
            raise ValueError(f"limit {self.name}: set per_s, max_in_flight or both")
        if self.burst is not None and self.per_s is None:
            raise ValueError(f"limit {self.name}: a burst needs per_s")
        return self


class BundleConfig(BaseModel):
    """Everything ``bundle.yaml`` may say; every field has a safe default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pause: PauseConfig = PauseConfig()
    progress: ProgressConfig = ProgressConfig()
    budgets: tuple[Budget, ...] = ()
    limits: tuple[Limit, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> BundleConfig:
        for kind, names in (("budget", [b.name for b in self.budgets]),
                            ("limit", [limit.name for limit in self.limits])):
            if len(names) != len(set(names)):
                raise ValueError(f"{kind} names must be unique: {names}")
        return self
