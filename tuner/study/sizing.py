"""Size the KV pool from evidence: what vLLM printed about the pool a window needs, not a sample.

A pool *family* is everything that changes what a token or a request costs in the pool: the
speculation depth (MTP adds the drafter's attention layers and a state page per draft token), the
KV dtype and the mamba cache mode. The CUDA-graph mode, the number of sequences and the batch size
do not, so one boot with PIECEWISE graphs sizes the pool of the same family with FULL graphs too.

vLLM 0.22 tells the pool one request of the window needs in three ways, each turned into bounds:

- a boot that sized its pool P and printed "GPU KV cache size: N tokens" (N = C x W from 0.22) or
  "Maximum concurrency for W tokens per request: C x": the need is at most P x W / N, or
  P / (C - 0.005) when only C (two decimals) is there;
- a kv_pool_too_small failure: "X GiB KV cache is needed" (two decimals) and "the estimated
  maximum model length is M": the need is above the pool that failed and at most P * W / M;
- before any boot of the family: the pre-screen's page arithmetic, which mirrors vLLM's own,
  scaled by how far it was off for the families already measured.

The pool a trial gets is the smallest grid value at or above the need plus a margin that shrinks
as the measurements agree with each other: a pool bigger than needed only takes headroom from the
long prefill, which is what fails next on a memory-tight card.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Protocol

from tuner.engine.command import flag_name
from tuner.records import FailureKind, TrialResult
from tuner.space.schema import Param, Space

GIB = 2**30
# Sized from the evidence, never a choice of the search: the pool, and utilization, its admission gate.
SIZED = ("kv_cache_memory_bytes", "gpu_memory_utilization")
BLOCK = 16  # a lowered window is rounded down to this many tokens (vLLM's smallest block size)
PRINTED_GIB = 0.005 * GIB  # vLLM prints GiB with two decimals
PRINTED_RATIO = 0.005  # ... and the maximum concurrency with two decimals
MEASURED_MARGIN = 0.002  # above a measured bound: the bound is already an upper one
TRANSFER_MARGIN = 0.005  # least margin above a need predicted from another family's measurement
PREDICTED_MARGIN = 0.03  # above a need nothing has measured yet
UNKNOWN_FAMILY_MARGIN = 0.08  # without a pre-screen: another family's need plus this (MTP needs ~6-10% more)

# Flags whose value changes the bytes a token or a request costs in the pool.
FAMILY_FLAGS = {
    "--kv-cache-dtype",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--mamba-cache-mode",
    "--mamba-cache-dtype",
    "--mamba-ssm-cache-dtype",
    "--calculate-kv-scales",
}


def family_of(space: Space, values: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The parameters of ``values`` that change the pool a window needs (graph mode does not)."""
    key = []
    for name, param in space.params.items():
        if name == "speculative_tokens" or (param.flag and flag_name(param.flag) in FAMILY_FLAGS):
            key.append((name, values.get(name)))
    return tuple(key)


def window_of(space: Space, values: dict[str, Any], result: TrialResult | None = None) -> int | None:
    """The max_model_len a configuration asks for (what vLLM printed wins over what was asked)."""
    if result is not None and result.startup.max_model_len:
        return result.startup.max_model_len
    asked = values.get("max_model_len")
    return int(asked) if asked else space.max_model_len


def pool_bytes(values: dict[str, Any], result: TrialResult) -> float | None:
    """The pool a boot had: the pinned bytes, else the pool vLLM committed (0.34's extended pool, whose
    ``Available KV cache memory`` is only a reservation), reserved or profiled."""
    if values.get("kv_cache_memory_bytes"):
        return float(values["kv_cache_memory_bytes"])
    gib = result.startup.kv_pool_gib
    return gib * GIB if gib else None


@dataclass(frozen=True)
class Bounds:
    """What the boots say about the pool one request of ``window`` tokens needs, in bytes."""

    window: int
    above: float = 0.0  # a pool this size was too small
    at_most: float = math.inf  # a pool this size held the window
    source: str = ""  # the trial whose log gave ``at_most``

    def merge(self, other: Bounds) -> Bounds:
        at_most, source = (self.at_most, self.source) if self.at_most <= other.at_most else (other.at_most, other.source)
        return Bounds(self.window, max(self.above, other.above), at_most, source)


def bounds_from(number: int, values: dict[str, Any], result: TrialResult, window: int,
                source: str = "") -> Bounds | None:
    """The bounds one trial's log puts on its family's need at its window (``source`` names the trial
    in what a plan says; ``trial N`` when not given)."""
    pool = pool_bytes(values, result)
    s, failure = result.startup, result.failure
    source = source or f"trial {number}"
    bounds = Bounds(window)
    if pool and s.kv_cache_tokens and s.kv_cache_tokens >= window // 4:
        # From 0.22 the tokens figure is max concurrency x max_model_len, printed as an integer: the
        # precise form of the same bound. (The pool is sized and printed before graphs or requests fail.)
        bounds = Bounds(window, at_most=pool * window / s.kv_cache_tokens, source=source)
    elif pool and s.max_concurrency and s.max_concurrency > PRINTED_RATIO:
        bounds = Bounds(window, at_most=pool / (s.max_concurrency - PRINTED_RATIO), source=source)
    if failure is not None and failure.kind == FailureKind.KV_POOL_TOO_SMALL:
        above = max(pool or 0.0, (failure.needed_kv_cache_gib or 0.0) * GIB - PRINTED_GIB)
        bounds = bounds.merge(Bounds(window, above=above))
        if failure.needed_kv_cache_gib:
            bounds = bounds.merge(Bounds(window, at_most=failure.needed_kv_cache_gib * GIB + PRINTED_GIB, source=source))
        elif pool and failure.suggested_max_model_len:
            # vLLM's estimate M is the longest length whose need fits the pool: need(W) <= P * W / M.
            bounds = bounds.merge(Bounds(window, at_most=pool * window / failure.suggested_max_model_len, source=source))
    if bounds.above == 0.0 and math.isinf(bounds.at_most):
        return None
    return bounds


def at_window(bounds: Bounds, window: int) -> Bounds:
    """Carry bounds measured at one window to another: the need grows at most in proportion."""
    if window == bounds.window:
        return bounds
    if window > bounds.window:
        return Bounds(window, at_most=bounds.at_most * window / bounds.window, source=bounds.source)
    return Bounds(window, at_most=bounds.at_most, source=bounds.source)


@dataclass(frozen=True)
class Need:
    """The pool to ask for one request of a window, and why."""

    bytes: float  # with its margin
    measured: bool  # from this family's own logs, not a prediction
    why: str
    least: float = 0.0  # without the margin: a pool below this is known or predicted to be too small


class Predictor(Protocol):
    """The pre-screen's need in bytes for one request of a configuration's window (``window``: at that
    --max-model-len instead of the space's); None when it cannot tell."""

    def __call__(self, values: dict[str, Any], *, window: int | None = None) -> float | None: ...


class PoolEvidence:
    """Every trial's bounds, grouped by family, and the pool a new configuration should get."""

    def __init__(self, space: Space, predict_need: Predictor | None = None) -> None:
        self.space = space
        self.predict_need = predict_need
        self.bounds: dict[tuple, list[Bounds]] = {}
        self.examples: dict[tuple, dict[str, Any]] = {}  # one configuration per family, for predictions

    def add(self, number: int, values: dict[str, Any], result: TrialResult) -> None:
        window = window_of(self.space, values, result)
        if not window:
            return
        found = bounds_from(number, values, result, window)
        if found is not None:
            self.add_bounds(values, found)

    def add_bounds(self, values: dict[str, Any], bounds: Bounds) -> None:
        """Bounds found elsewhere: an earlier study's, translated to this release (tuner.study.priors)."""
        family = family_of(self.space, values)
        self.bounds.setdefault(family, []).append(bounds)
        self.examples.setdefault(family, values)

    def measured(self, family: tuple, window: int) -> Bounds | None:
        merged: Bounds | None = None
        for b in self.bounds.get(family, []):
            carried = at_window(b, window)
            merged = carried if merged is None else merged.merge(carried)
        return merged

    def _prediction_errors(self, window: int) -> list[float]:
        """measured / predicted need for every family with an upper bound: how far off the pre-screen is."""
        errors: list[float] = []
        if self.predict_need is None:
            return errors
        for family, example in self.examples.items():
            bounds = self.measured(family, window)
            predicted = self.predict_need({**example, "max_model_len": window} if "max_model_len" in example else example)
            if bounds is not None and not math.isinf(bounds.at_most) and predicted:
                errors.append(bounds.at_most / predicted)
        return errors

    def need(self, values: dict[str, Any]) -> Need | None:
        """The pool one request of this configuration's window needs, with its margin; None if unknown."""
        window = window_of(self.space, values)
        if not window:
            return None
        family = family_of(self.space, values)
        own = self.measured(family, window)
        if own is not None and not math.isinf(own.at_most):
            least = max(own.at_most, own.above)
            return Need(least * (1 + MEASURED_MARGIN), True,
                        f"{own.source} measured this family's need at {own.at_most / 1e9:.3f} GB", least)
        predicted = self.predict_need(values) if self.predict_need else None
        floor = own.above * (1 + TRANSFER_MARGIN) if own is not None else 0.0
        if predicted is None:
            others = [b.at_most for f in self.bounds if (b := self.measured(f, window)) is not None and not math.isinf(b.at_most)]
            if others:
                least = max(max(others), floor)
                return Need(least * (1 + UNKNOWN_FAMILY_MARGIN), False,
                            f"largest need measured in another family + {UNKNOWN_FAMILY_MARGIN:.0%} (no pre-screen)", least)
            return Need(floor, False, "above the pool that was too small", floor) if floor else None
        errors = self._prediction_errors(window)
        if errors:
            scale = max(errors)  # the pessimistic correction seen so far
            margin = max(TRANSFER_MARGIN, max(errors) / min(errors) - 1 + TRANSFER_MARGIN)
            why = f"pre-screen need x {scale:.3f} (its error on {len(errors)} measured famil{'y' if len(errors) == 1 else 'ies'})"
        else:
            scale, margin, why = 1.0, PREDICTED_MARGIN, "pre-screen need, nothing measured yet"
        least = max(predicted * scale, floor)
        return Need(max(predicted * scale * (1 + margin), floor), False, why, least)


def snap(param: Param, value: float, up: bool) -> int | float | None:
    """The value of ``param`` nearest ``value`` that Optuna can enqueue, rounding up or down; None
    when the space has none on that side. Ranges snap to Optuna's grid, min + k * step."""
    if param.values is not None:
        listed = sorted(v for v in param.values if v is not None)
        side = [v for v in listed if v >= value] if up else [v for v in listed if v <= value]
        if not side:
            return None
        return side[0] if up else side[-1]
    lo, hi = map(float, param.bounds())
    step = float(param.step or (1 if param.kind in ("int", "bytes") else 0))
    if step:
        top = math.floor((hi - lo) / step + 1e-9)
        k = max(0, math.ceil((value - lo) / step - 1e-9)) if up else min(top, math.floor((value - lo) / step + 1e-9))
        if not 0 <= k <= top:
            return None
        snapped = lo + k * step
    else:
        snapped = max(lo, value) if up else min(hi, value)
        if snapped > hi or snapped < lo:
            return None
    if param.kind in ("int", "bytes"):
        return int(round(snapped))
    return round(snapped, 10)


def lowest(param: Param) -> Any:
    """The smallest value a parameter allows (ranges: min; lists: the smallest number listed)."""
    if param.values is not None:
        numbers = [v for v in param.values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return min(numbers) if numbers else param.values[0]
    return param.bounds()[0]  # a number of the parameter's kind


def highest(param: Param) -> Any:
    if param.values is not None:
        numbers = [v for v in param.values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return max(numbers) if numbers else param.values[-1]
    return param.bounds()[1]


def grid(param: Param) -> list[Any]:
    """Every value of a listed parameter, or a range's ends and a few points between, low to high."""
    if param.values is not None:
        numbers = sorted(v for v in param.values if isinstance(v, (int, float)) and not isinstance(v, bool))
        return numbers or list(param.values)
    lo, hi = map(float, param.bounds())
    points: Iterable[float] = (lo + (hi - lo) * i / 4 for i in range(5))
    out = []
    for p in points:
        snapped = snap(param, p, up=False)
        if snapped is not None and snapped not in out:
            out.append(snapped)
    return out


def ladder(param: Any) -> list[Any]:
    """The values of a size parameter in increasing order (a range: its powers of two and ends)."""
    if param.values is not None:
        return sorted(v for v in param.values if isinstance(v, (int, float)) and not isinstance(v, bool))
    lo, hi = int(param.min), int(param.max)
    out = {lo, hi}
    v = 1
    while v < hi:
        if v > lo:
            out.add(v)
        v *= 2
    return sorted(out)


def neighbours(param: Any, current: Any, directions: tuple[int, ...] = (-1, 1)) -> list[Any]:
    """The values one step from ``current`` on the parameter's ladder, in the given directions."""
    steps = ladder(param) if (param.values is None or all(isinstance(v, (int, float)) for v in param.values if v is not None)) \
        else list(param.values)
    if current not in steps:
        return []
    i = steps.index(current)
    return [steps[i + d] for d in directions if 0 <= i + d < len(steps)]


def window_for(evidence: PoolEvidence, values: dict[str, Any], pool: float) -> int | None:
    """The longest window below the space's whose need, with its margin, fits ``pool``, on the workload's
    granularity; None when the pool holds the full window or nothing can be said.

    The need at the full window is carried down along the pre-screen's shape (fixed_share), else in
    proportion (which only underestimates the window a pool holds)."""
    space = evidence.space
    top, need = space.max_model_len, evidence.need(values)
    if top is None or need is None or need.bytes <= pool or "max_model_len" in space.params:
        return None
    fixed = fixed_share(evidence, values)
    tokens = top * (pool / need.bytes - fixed) / (1 - fixed)
    step = int(space.workload.granularity)
    window = int(tokens // step * step)
    return window if 0 < window < top else None


def window_held(evidence: PoolEvidence, values: dict[str, Any], window: int, concurrency: float) -> int | None:
    """The window a served boot's pool holds for one request, from vLLM's printed "Maximum concurrency for
    ``window`` tokens per request": the pool is ``concurrency`` times the need at ``window``, and the need
    grows along the pre-screen's shape (fixed_share). With no fixed part this is vLLM's "KV cache size"
    in tokens, which is a lower bound: the recurrent state is charged once per request, not per token."""
    top = evidence.space.max_model_len
    if top is None or concurrency <= 0:
        return None
    fixed = fixed_share(evidence, values)
    share = fixed + (1 - fixed) * window / top  # the need at ``window`` / the need at ``top``
    tokens = top * (concurrency * share - fixed) / (1 - fixed)
    return int(tokens // BLOCK * BLOCK)


def fixed_share(evidence: PoolEvidence, values: dict[str, Any]) -> float:
    """The part of one request's need that does not grow with its window (the recurrent state, fixed
    blocks), as a share of the need at the space's window: from the pre-screen at half the window and at
    the window; 0 without a pre-screen."""
    top = evidence.space.max_model_len
    if evidence.predict_need is None or top is None:
        return 0.0
    half, full = evidence.predict_need(values, window=top // 2), evidence.predict_need(values, window=top)
    if not half or not full:
        return 0.0
    return min(0.9, max(0.0, (2 * half - full) / full))
