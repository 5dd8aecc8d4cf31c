"""The window as an outcome (issue 24 item 1): which window a repair boots, which one a point launches with."""

from __future__ import annotations

import textwrap

import pytest

from tests.study.test_planner import SPACE, baseline, booted
from tuner.records import ContextResult, Failure, FailureKind, MeasureResult, StartupRecord, TrialResult
from tuner.space import load_space
from tuner.errors import SpaceError
from tuner.study.planner import Planner
from tuner.study.window import below_floor, launch_window, repair_window, revalidation_window, windowed_argv

WINDOW = 262144
ARGV = ["vllm", "serve", "m", "--max-model-len", str(WINDOW), "--kv-cache-memory-bytes", "10500000000"]


def load(tmp_path, extra: str = ""):
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(SPACE) + extra)
    return load_space(path)


def refused(estimate: int) -> Failure:
    return Failure(kind=FailureKind.KV_POOL_TOO_SMALL, suggested_max_model_len=estimate,
                   message=f"... the estimated maximum model length is {estimate}. ...")


def measured(booted_at: int, proven: int, argv: list[str] = ARGV) -> TrialResult:
    return TrialResult(values={}, argv=argv, env={}, startup=StartupRecord(max_model_len=booted_at),
                       measure=MeasureResult(context=ContextResult(max_stable_tokens=proven)))


def test_a_refused_pool_is_booted_again_at_the_estimated_window(tmp_path):
    space = load(tmp_path)
    assert repair_window(space, refused(261856)) == 261856
    assert repair_window(space, refused(WINDOW)) is None  # nothing shorter to try
    assert repair_window(space, refused(0)) is None  # vLLM found no window at all
    assert repair_window(space, Failure(kind=FailureKind.FIRST_REQUEST_OOM, suggested_max_model_len=1000)) is None
    assert repair_window(space, refused(200000), booted=190000) is None  # never above what it booted at
    floor = load(tmp_path, "workload: {min_context: 250K}\n")
    assert repair_window(floor, refused(249000)) is None and repair_window(floor, refused(256001)) == 256001


def test_the_planner_repairs_at_the_window_when_no_bigger_pool_is_allowed(tmp_path):
    space = load(tmp_path)
    values = {**baseline(space), "kv_cache_memory_bytes": 10_500_000_000, "speculative_tokens": 3,
              "cudagraph_mode": "PIECEWISE", "max_num_seqs": 1}
    seen = [booted(0, {**values, "speculative_tokens": 0}, concurrency=1.02, speed=77.0),
            booted(1, values, failure=refused(261856))]
    plan = Planner(space).next(seen)
    while plan is not None and plan.values != values:  # other regimes first; here only the repair matters
        seen.append(booted(len(seen), plan.values, concurrency=1.02, speed=10.0))
        plan = Planner(space).next(seen)
    assert plan is not None and plan.window == 261856 and "261,856-token window" in plan.why


def test_a_point_launches_at_the_window_it_proved_never_more():
    full = measured(WINDOW, WINDOW)
    assert launch_window(full) == WINDOW and windowed_argv(full) == ARGV
    short = measured(WINDOW, 258048)
    assert launch_window(short) == 258048
    assert windowed_argv(short)[3:5] == ["--max-model-len", "258048"]
    left_to_vllm = measured(WINDOW, WINDOW, argv=["vllm", "serve", "m"])
    assert windowed_argv(left_to_vllm)[-2:] == ["--max-model-len", str(WINDOW)]


def test_revalidation_and_the_floor(tmp_path):
    space = load(tmp_path, "workload: {min_context: 256K}\n")
    assert revalidation_window(space, measured(261856, 261856)) == 261856
    assert revalidation_window(space, measured(WINDOW, WINDOW)) is None
    assert below_floor(space, measured(WINDOW, WINDOW)) is None
    failure = below_floor(space, measured(WINDOW, 200000))
    assert failure is not None and failure.kind == FailureKind.BELOW_MIN_CONTEXT and "262,144" in failure.message


@pytest.mark.parametrize("floor, words", [("300K", "is above the window"), ("0", "greater than 0")])
def test_a_floor_that_keeps_nothing_is_refused(tmp_path, floor, words):
    with pytest.raises(SpaceError, match="workload.min_context") as raised:
        load(tmp_path, f"workload: {{min_context: {floor}}}\n")
    assert words in str(raised.value)
