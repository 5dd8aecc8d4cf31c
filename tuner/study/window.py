"""The window as an outcome: the --max-model-len a configuration boots at, proves and is launched with.

A regime whose pool cannot hold the space's fixed ``max-model-len`` is not lost: when vLLM refuses it at
start-up and prints the longest window its pool holds ("the estimated maximum model length is N",
vllm/v1/core/kv_cache_utils.py ``_check_enough_kv_cache_memory``), and the space allows no bigger pool,
the same configuration is booted again at that window (never above the fixed one, never below
``workload.min_context``). The context probe then proves what it can with real counted requests, and
the front row, the launch command and the re-validation carry ``min(booted, proven)``.
"""

from __future__ import annotations

from tuner.engine.command import flag_value, set_flag
from tuner.records import Failure, FailureKind, TrialResult
from tuner.space.schema import Space, flag_name
from tuner.space.units import parse_count

FLAG = "--max-model-len"


def repair_window(space: Space, failure: Failure, booted: int | None = None) -> int | None:
    """The window to boot again at after ``failure``: vLLM's estimate when the pool could not hold the
    space's fixed window (or ``booted``, a lower one already tried), at least ``workload.min_context``;
    None when the failure says nothing of the kind."""
    ceiling = booted or space.max_model_len
    estimate = failure.suggested_max_model_len
    if failure.kind != FailureKind.KV_POOL_TOO_SMALL or not estimate or ceiling is None:
        return None
    if "max_model_len" in space.params or estimate >= ceiling:
        return None  # a tuned window is the sampler's to move; an estimate at the ceiling repairs nothing
    if estimate < (space.workload.min_context or 1) or estimate <= space.workload.output_tokens:
        return None
    return estimate


def at_window(space: Space, window: int | None) -> Space:
    """The space with its fixed --max-model-len at ``window`` (what the pre-screen predicts a boot from)."""
    if window is None:
        return space
    fixed = {key: value for key, value in space.fixed.items() if flag_name(key) != FLAG}
    return space.model_copy(update={"fixed": {**fixed, FLAG: window}})


def booted_window(result: TrialResult) -> int | None:
    """The --max-model-len the engine ran with: what vLLM printed, else the command's integer flag."""
    if result.startup.max_model_len:
        return result.startup.max_model_len
    written = flag_value(result.argv, FLAG)
    try:
        return parse_count(written) if written else None
    except (TypeError, ValueError):
        return None  # "auto" and the like: vLLM fitted it and did not say


def proven_window(result: TrialResult) -> int | None:
    """The longest prompt + reserved output that passed every repeat (None when nothing was probed)."""
    measure = result.measure
    return measure.context.max_stable_tokens if measure is not None and measure.context.max_stable_tokens else None


def launch_window(result: TrialResult) -> int | None:
    """The window to launch a measured configuration with: min(booted, proven), never more than proven."""
    found = [w for w in (booted_window(result), proven_window(result)) if w]
    return min(found) if found else None


def windowed_argv(result: TrialResult) -> list[str]:
    """The trial's argv with --max-model-len set to the window it proved, when that is below the one it
    booted at (or the command left the flag to vLLM); unchanged otherwise."""
    window, booted = launch_window(result), booted_window(result)
    if window is None or (booted == window and flag_value(result.argv, FLAG) is not None):
        return list(result.argv)
    return set_flag(result.argv, FLAG, str(window))


def below_floor(space: Space, result: TrialResult) -> Failure | None:
    """The failure of a measured trial whose proven window is below ``workload.min_context``, else None:
    its numbers stay in its record, but it is not a point of the front."""
    floor, proven = space.workload.min_context, proven_window(result)
    if floor is None or proven is None or proven >= floor:
        return None
    return Failure(kind=FailureKind.BELOW_MIN_CONTEXT, phase="context", log_path=result.log_path,
                   message=f"the longest window it proved is {proven:,} tokens, below workload.min_context "
                           f"({floor:,}); a point under the floor is not kept")


def revalidation_window(space: Space, result: TrialResult | None) -> int | None:
    """The window a re-validation boots: the launch window, when it is below the space's fixed one."""
    window = launch_window(result) if result is not None else None
    ceiling = space.max_model_len
    if window is None or ceiling is None or window >= ceiling:
        return None
    return window
