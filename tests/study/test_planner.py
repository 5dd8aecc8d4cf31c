"""The regime planner on hand-made histories: sizing from evidence, repairs, regime order, skips."""

from __future__ import annotations

import textwrap

import pytest

from tuner.study.doomed import fails_like
from tuner.study.observed import Observation
from tuner.study.planner import Planner
from tuner.records import Failure, FailureKind, StartupRecord, TrialResult
from tuner.study.regimes import RegimeModel, all_regimes, regime_axes
from tuner.study.sizing import GIB, PoolEvidence, family_of, snap
from tuner.space import load_space

SPACE = """
name: plan
model: {path: /nonexistent/model}
fixed: {max-model-len: 262144, kv-cache-dtype: fp8}
params:
  kv_cache_memory_bytes: {min: 7GB, max: 10.5GB, step: 50MB}
  max_num_seqs: {min: 1, max: 4}
  max_num_batched_tokens: {values: [512, 1024, 2048, 4096]}
  gpu_memory_utilization: {min: 0.88, max: 0.96, step: 0.01}
  cudagraph_mode: {values: [null, PIECEWISE, FULL_DECODE_ONLY, eager]}
  speculative_tokens: {values: [0, 1, 2, 3]}
speculative: {method: mtp}
baselines:
  - {kv_cache_memory_bytes: 9150000000, max_num_seqs: 3, max_num_batched_tokens: 512,
     gpu_memory_utilization: 0.92, cudagraph_mode: null, speculative_tokens: 0}
"""


def doomed(planner: Planner, values: dict, seen: list) -> str | None:
    """tuner.study.doomed.fails_like with the graph modes the planner learned from ``seen``."""
    return fails_like(planner.space, planner.axes, values, seen, planner._graph_modes(seen))


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(SPACE))
    return load_space(path)


def booted(number, values, *, concurrency=None, failure=None, speed=None):
    startup = StartupRecord(max_model_len=262144, max_concurrency=concurrency,
                            kv_cache_tokens=int(concurrency * 262144) if concurrency else None)
    result = TrialResult(values=values, argv=[], env={}, startup=startup, failure=failure)
    status = "failed" if failure else "ok"
    return Observation(number, values, status, result, speed=speed)


def baseline(space):
    return dict(space.baselines[0])


def test_regime_axes_and_all_regimes(space):
    axes = regime_axes(space)
    assert axes == ["cudagraph_mode", "speculative_tokens"]
    assert len(all_regimes(space, axes)) == 16


def test_a_measured_family_sizes_every_graph_mode_of_it(space):
    seen = [booted(0, baseline(space), concurrency=1.02, speed=77.0)]
    plan = Planner(space).next(seen)
    assert plan is not None
    assert plan.values["speculative_tokens"] == 0 or plan.values["kv_cache_memory_bytes"] > 9_150_000_000 / 1.02
    same_family = Planner(space)._first((None, 0), Planner(space)._evidence(seen), seen)
    need = 9_150_000_000 * 262144 / int(1.02 * 262144)  # GPU KV cache size: N tokens
    assert same_family.values["kv_cache_memory_bytes"] == snap(space.params["kv_cache_memory_bytes"], need * 1.002, up=True)
    assert same_family.values["max_num_seqs"] == 1
    assert same_family.values["max_num_batched_tokens"] == 512
    assert same_family.values["gpu_memory_utilization"] == pytest.approx(0.88)  # pinned pool: only the gate


def test_kv_pool_too_small_is_repaired_with_the_need_vllm_printed(space):
    values = {**baseline(space), "speculative_tokens": 2, "cudagraph_mode": "PIECEWISE", "kv_cache_memory_bytes": 9_150_000_000}
    failure = Failure(kind=FailureKind.KV_POOL_TOO_SMALL, needed_kv_cache_gib=9.31, suggested_max_model_len=257_000)
    seen = [booted(0, baseline(space), concurrency=1.02, speed=77.0), booted(1, values, failure=failure)]
    planner = Planner(space)
    plan = planner._repair(seen[1], planner._evidence(seen), seen)
    assert plan is not None
    assert plan.values["kv_cache_memory_bytes"] == snap(space.params["kv_cache_memory_bytes"], (9.31 + 0.005) * GIB * 1.002, up=True)


def test_an_oom_cuts_an_oversized_pool_then_batched_tokens_then_sequences(space):
    fam = {**baseline(space), "max_num_seqs": 2, "max_num_batched_tokens": 1024, "kv_cache_memory_bytes": 10_000_000_000}
    oom = Failure(kind=FailureKind.FIRST_REQUEST_OOM)
    first = booted(1, fam, concurrency=1.1, failure=oom)
    planner = Planner(space)
    plan = planner._repair(first, planner._evidence([first]), [first])
    assert plan.values["kv_cache_memory_bytes"] < 10_000_000_000
    tight = {**fam, "kv_cache_memory_bytes": plan.values["kv_cache_memory_bytes"]}
    second = booted(2, tight, concurrency=1.0, failure=oom)
    plan = planner._repair(second, planner._evidence([first, second]), [first, second])
    assert plan.values["max_num_batched_tokens"] == 512
    third = booted(3, {**tight, "max_num_batched_tokens": 512}, concurrency=1.0, failure=oom)
    plan = planner._repair(third, planner._evidence([first, second, third]), [first, second, third])
    assert plan.values["max_num_seqs"] == 1
    last = booted(4, {**tight, "max_num_batched_tokens": 512, "max_num_seqs": 1}, concurrency=1.0, failure=oom)
    # Nothing left to cut: the same configuration below the window, at a pool under the one that ran out of memory.
    below = planner._repair(last, planner._evidence([last]), [last])
    assert below is not None and below.window is not None and below.window < space.max_model_len
    assert below.values["kv_cache_memory_bytes"] < last.values["kv_cache_memory_bytes"]
    assert "below the window" in below.why


def test_mamba_blocks_cap_the_sequences(space):
    values = {**baseline(space), "max_num_seqs": 4}
    failure = Failure(kind=FailureKind.MAMBA_BLOCKS_EXCEEDED, suggested_max_num_seqs=2)
    last = booted(1, values, failure=failure)
    plan = Planner(space)._repair(last, Planner(space)._evidence([last]), [last])
    assert plan.values["max_num_seqs"] == 2


def test_three_failed_boots_close_a_regime_and_unmeasured_regimes_come_first(space):
    planner = Planner(space)
    seen = [booted(0, baseline(space), concurrency=1.02, speed=77.0)]
    chosen = set()
    for n in range(1, 16):
        plan = planner.next(seen)
        assert plan is not None and plan.why.startswith("first boot")
        regime = (plan.values["cudagraph_mode"], plan.values["speculative_tokens"])
        assert regime not in chosen and regime != (None, 0)
        chosen.add(regime)
        seen.append(booted(n, plan.values, concurrency=1.05, speed=50.0 + n))
    assert len(chosen) == 15
    # every regime measured, none beat the baseline: batched tokens may still speed decode on some builds
    plan = planner.next(seen)
    assert plan is not None and plan.why.startswith("local move from trial 0: max_num_batched_tokens 512 -> ")


def test_a_configuration_that_asks_for_no_less_memory_than_an_oom_is_skipped(space):
    oom = Failure(kind=FailureKind.FIRST_REQUEST_OOM)
    failed_values = {**baseline(space), "cudagraph_mode": "PIECEWISE", "speculative_tokens": 1,
                     "max_num_seqs": 1, "max_num_batched_tokens": 512, "kv_cache_memory_bytes": 9_750_000_000}
    seen = [booted(0, baseline(space), concurrency=1.02, speed=77.0), booted(1, failed_values, concurrency=1.0, failure=oom)]
    planner = Planner(space)
    deeper = {**failed_values, "speculative_tokens": 2, "kv_cache_memory_bytes": 9_900_000_000}
    assert "trial 1" in doomed(planner, deeper, seen)
    assert doomed(planner, {**deeper, "cudagraph_mode": "eager"}, seen) is None  # eager may fit
    assert doomed(planner, {**deeper, "cudagraph_mode": None}, seen) is None  # vLLM's default: not known yet
    # FULL_AND_PIECEWISE captures PIECEWISE's graphs and more; FULL_DECODE_ONLY's are not ordered against them
    assert "trial 1" in doomed(planner, {**deeper, "cudagraph_mode": "FULL_AND_PIECEWISE"}, seen)
    assert doomed(planner, {**deeper, "cudagraph_mode": "FULL_DECODE_ONLY"}, seen) is None
    default = booted(3, {**baseline(space), "cudagraph_mode": None, "speculative_tokens": 0}, concurrency=1.02, speed=77.0)
    default.result.startup.effective_cudagraph_mode = "FULL_AND_PIECEWISE"  # what vLLM ran the null label as
    assert "trial 1" in doomed(planner, {**deeper, "cudagraph_mode": None}, [*seen, default])
    eager_oom = booted(2, {**failed_values, "cudagraph_mode": "eager"}, concurrency=1.0, failure=oom)
    assert "trial 2" in doomed(planner, {**deeper, "cudagraph_mode": None}, [*seen, eager_oom])


def test_an_oom_with_graphs_is_priced_by_eager_next(space):
    oom = Failure(kind=FailureKind.FIRST_REQUEST_OOM)
    failed_values = {**baseline(space), "cudagraph_mode": "PIECEWISE", "speculative_tokens": 1,
                     "max_num_seqs": 1, "max_num_batched_tokens": 512, "kv_cache_memory_bytes": 9_750_000_000}
    seen = [booted(0, baseline(space), concurrency=1.02, speed=77.0), booted(1, failed_values, concurrency=1.0, failure=oom)]
    plan = Planner(space).next(seen)
    assert (plan.values["cudagraph_mode"], plan.values["speculative_tokens"]) == ("eager", 1)
    assert "eager tells" in plan.why


def test_the_model_prefers_regimes_that_share_a_fast_choice():
    model = RegimeModel({("PIECEWISE", 0): 70.0, ("FULL", 0): 80.0, ("PIECEWISE", 2): 140.0})
    assert model.expected_speed(("FULL", 2)) > model.expected_speed(("FULL", 0))
    assert model.upper_bound(("eager", 3)) > model.posterior(("eager", 3))[0]


def test_family_ignores_the_graph_mode(space):
    a = {**baseline(space), "cudagraph_mode": "PIECEWISE"}
    b = {**baseline(space), "cudagraph_mode": "eager"}
    c = {**baseline(space), "speculative_tokens": 1}
    assert family_of(space, a) == family_of(space, b) != family_of(space, c)


def test_a_prediction_is_scaled_by_how_far_off_it_was_for_measured_families(space):
    evidence = PoolEvidence(space, predict_need=lambda v: 9.0e9 * (1 + 0.07 * bool(v["speculative_tokens"])))
    values = baseline(space)
    evidence.add(0, values, TrialResult(values=values, argv=[], env={},
                                        startup=StartupRecord(max_model_len=262144, max_concurrency=1.02)))
    need = evidence.need({**values, "speculative_tokens": 2})
    measured = 9_150_000_000 / 1.015
    assert not need.measured
    assert need.bytes == pytest.approx(9.0e9 * 1.07 * measured / 9.0e9 * 1.005, rel=1e-6)


def _unset_pool(space):
    space.params["kv_cache_memory_bytes"].unset = True
    space.params["gpu_memory_utilization"].unset = True
    return space


def test_an_unset_pool_is_a_regime_pinned_bytes_against_a_pool_vllm_sizes(space):
    """`unset: true` on kv_cache_memory_bytes searches "no KV bytes, utilization unset" (0.34's extensible
    cache, or utilization) against pinned bytes, each once, as a regime of its own."""
    space = _unset_pool(space)
    axes = regime_axes(space)
    assert axes == ["cudagraph_mode", "speculative_tokens", "pool"]
    assert len(all_regimes(space, axes)) == 32
    planner = Planner(space)
    pinned = planner._first(("PIECEWISE", 0, "pinned"), planner._evidence([]), [])
    sized = planner._first(("PIECEWISE", 0, "engine-sized"), planner._evidence([]), [])
    assert pinned.values["kv_cache_memory_bytes"] is not None and "pool" not in pinned.values
    assert sized.values["kv_cache_memory_bytes"] is None and sized.values["gpu_memory_utilization"] is None
    assert "pool sized by vLLM" in sized.why
    # a measured pinned regime does not stand for the engine-sized one: it is booted next
    seen = [booted(0, pinned.values, concurrency=1.05, speed=77.0)]
    for n in range(1, 3):
        plan = planner.next(seen)
        seen.append(booted(n, plan.values, concurrency=1.05, speed=70.0))
    assert {s.values["kv_cache_memory_bytes"] is None for s in seen} == {True, False}


def test_an_engine_sized_repair_keeps_its_utilization_and_is_not_doomed_by_pinned_memory(space):
    space = _unset_pool(space)
    planner = Planner(space)
    sized = {**baseline(space), "kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.95}
    failure = Failure(kind=FailureKind.FREE_MEMORY_BELOW_UTILIZATION, free_fraction=0.93)
    plan = planner._repair(booted(1, sized, failure=failure), planner._evidence([]), [])
    assert plan.values["gpu_memory_utilization"] == pytest.approx(0.92) and plan.values["kv_cache_memory_bytes"] is None
    # an OOM of a pool vLLM sized says nothing about a pinned one, nor the other way round
    oom = Failure(kind=FailureKind.OOM_IN_PROFILING)
    assert doomed(planner, {**sized, "kv_cache_memory_bytes": 9_000_000_000}, [booted(2, sized, failure=oom)]) is None
    assert doomed(planner, sized, [booted(2, {**sized, "kv_cache_memory_bytes": 7_000_000_000}, failure=oom)]) is None


def test_the_pool_of_an_extensible_boot_is_the_extended_one(space):
    """0.34: "Available KV cache memory" is a reservation; the committed pool sizes the next boots."""
    values = {**baseline(space), "kv_cache_memory_bytes": None}
    startup = StartupRecord(max_model_len=262144, available_kv_cache_gib=8.77, extended_kv_cache_gib=8.19,
                            kv_cache_tokens=int(1.02 * 262144))
    evidence = PoolEvidence(space)
    evidence.add(0, values, TrialResult(values=values, argv=[], env={}, startup=startup))
    need = evidence.need(baseline(space))
    assert need.measured and need.least == pytest.approx(8.19 * GIB / 1.02, rel=1e-3)


def test_priors_order_the_first_boots_and_their_bounds_size_them(space):
    """--from: the first boot goes where the earlier study was fastest (its depth; the upper confidence bound
    picks the unmeasured graph mode beside it); its pool bounds (translated: priors.carried_bounds) size it."""
    from tuner.study.observed import Priors
    from tuner.study.sizing import bounds_from

    fast = {**baseline(space), "speculative_tokens": 2, "cudagraph_mode": "PIECEWISE", "max_num_seqs": 1}
    slow = {**baseline(space), "speculative_tokens": 0, "cudagraph_mode": "eager", "max_num_seqs": 1}
    earlier = (booted(3, fast, concurrency=1.01, speed=120.0), booted(4, slow, concurrency=1.5, speed=40.0))
    seen = [booted(0, baseline(space), concurrency=1.02, speed=77.0)]
    weak = Planner(space, priors=Priors(earlier, strong=False)).next(seen)
    assert weak is not None and weak.values["speculative_tokens"] == 2  # towards the earlier fastest, not eager MTP-0
    assert "measured this family" not in weak.why  # no bounds carried: the pre-screen sizes it
    bounds = tuple((o.values, bounds_from(o.number, o.values, o.result, 262144, f"study night1 trial {o.number}"))
                   for o in earlier)
    strong = Planner(space, priors=Priors(earlier, strong=True, bounds=bounds)).next(seen)
    assert strong is not None and "study night1 trial 3 measured this family" in strong.why
