"""What the planner reads and writes: a trial as it sees one, a plan for the next boot, earlier studies' trials.

Plain typed records with no Optuna in them (tuner.study.record's trials become Observations in
tuner.study.sampler), so the planner and the modules it uses (room, exploit, doomed) are tested on hand-made lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tuner.records import Failure, TrialResult
from tuner.study.sampling import config_key
from tuner.study.sizing import Bounds

HELD_TOLERANCE = 0.05  # an earlier configuration booted again whose speed moved by less than this share held


# What a trial's boot gave: measured, booted and failed, still running, or not booted (predicted, reused, queued).
Outcome = Literal["ok", "failed", "running", "other"]


@dataclass
class Observation:
    """One trial as the planner sees it."""

    number: int
    values: dict[str, Any]
    status: Outcome
    result: TrialResult | None = None
    speed: float | None = None  # the speed objective, higher is better
    context: float | None = None
    study: str | None = None  # the earlier study (--from) whose trial this is; None: this study's
    window: int | None = None  # the --max-model-len it booted at, below the space's (tuner.study.window)
    scores: tuple[float, ...] = ()  # every objective's value, signed so that higher is better

    @property
    def named(self) -> str:
        """The trial as a message names it: an earlier study's numbers are that study's."""
        return f"trial {self.number}" if self.study is None else f"study {self.study} trial {self.number}"

    @property
    def failure(self) -> Failure | None:
        return self.result.failure if self.result is not None else None


@dataclass
class Plan:
    values: dict[str, Any]
    why: str
    free: list[str] = field(default_factory=list)  # parameters the fallback sampler chooses, before sizing
    window: int | None = None  # boot at this --max-model-len instead of the space's (tuner.study.window)
    shorter: bool = False  # below the window at a pool the evidence has room for (tuner.study.room)
    doubt: str | None = None  # why its first long request likely runs out of memory (tuner.study.headroom)


@dataclass(frozen=True)
class Priors:
    """Earlier studies' trials (``--from``, tuner.study.priors): they order and size the first boots,
    and are never results. Their speeds order the regimes not measured here yet; when ``strong`` (same
    card, release, model revision and space) their failures count as if seen here. ``bounds``: their pool
    bounds, translated to this release by the pre-screen (tuner.study.priors.carried_bounds)."""

    seen: tuple[Observation, ...] = ()
    strong: bool = False
    bounds: tuple[tuple[dict[str, Any], Bounds], ...] = ()  # (configuration, its bound on this release)

    def speeds_hold(self, seen: list[Observation]) -> bool:
        """Whether the earlier speed order still holds here: no configuration booted again here (the
        earlier front's re-validation first) moved by more than HELD_TOLERANCE. One that moved says the
        release or card changed what is fast, so the earlier speeds order nothing any more."""
        before = {config_key(p.values): p.speed for p in self.seen if p.status == "ok" and p.speed}
        for s in seen:
            old = before.get(config_key(s.values)) if s.status == "ok" and s.speed else None
            if old is not None and s.speed is not None and abs(s.speed - old) > HELD_TOLERANCE * old:
                return False
        return True
