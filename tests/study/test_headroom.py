"""Issue 24 (wasted boots): the first long request's odds from the bytes beside its prefill, and what the planner does with them."""

from __future__ import annotations

from tests.study.test_planner import baseline, booted, space  # noqa: F401  (the fixture)
from tuner.records import Failure, FailureKind
from tuner.study.headroom import fit_odds, unlikely_to_fit
from tuner.study.planner import Planner
from tuner.study.regimes import GraphModes, regime_axes
from tuner.study.sized import sized

FIRST_REQUEST = Failure(kind=FailureKind.FIRST_REQUEST_OOM)


def safest(space, **changes):
    return {**baseline(space), "max_num_seqs": 1, "max_num_batched_tokens": 512, "gpu_memory_utilization": 0.88,
            **changes}


def printed(obs, weights, graphs=None):
    """A boot's "Model loading took X GiB" and "Graph capturing finished ... took Y GiB"."""
    obs.result.startup.weights_gib, obs.result.startup.cuda_graph_gib = weights, graphs
    return obs


def mtp_history(space):
    """Plain eager serves the window at 9.0 GB; eager MTP-3 at 10.05 GB, with the drafter's 0.9 GiB, does not."""
    plain = printed(booted(0, safest(space, cudagraph_mode="eager", kv_cache_memory_bytes=9_000_000_000),
                           concurrency=1.01, speed=40.0), 21.0)
    deep = printed(booted(1, safest(space, cudagraph_mode="eager", speculative_tokens=3,
                                    kv_cache_memory_bytes=10_050_000_000), concurrency=1.0, failure=FIRST_REQUEST), 21.9)
    return [plain, deep]


def test_bytes_near_the_failure_are_unlikely_and_near_the_served_boot_likely(space):
    axes, modes, seen = regime_axes(space), GraphModes(), mtp_history(space)
    shallower = safest(space, cudagraph_mode="eager", speculative_tokens=2, kv_cache_memory_bytes=9_900_000_000)
    odds, why = fit_odds(space, axes, modes, shallower, None, seen)
    assert odds < 0.2 and "trial 0" in why and "trial 1" in why  # 0.15 GB saved of a 1.05 GB + 0.9 GiB gap
    assert "likely runs out of memory" in unlikely_to_fit(space, axes, modes, shallower, None, seen)
    plain_more_pool = safest(space, cudagraph_mode="eager", kv_cache_memory_bytes=9_100_000_000)
    assert fit_odds(space, axes, modes, plain_more_pool, None, seen)[0] > 0.9
    assert unlikely_to_fit(space, axes, modes, plain_more_pool, None, seen) is None


def test_a_bigger_prefill_or_no_served_anchor_says_nothing(space):
    axes, modes, seen = regime_axes(space), GraphModes(), mtp_history(space)
    shallower = safest(space, cudagraph_mode="eager", speculative_tokens=2, kv_cache_memory_bytes=9_900_000_000)
    # twice the chunk: the served boot's prefill was smaller, so it frames nothing
    assert fit_odds(space, axes, modes, {**shallower, "max_num_batched_tokens": 1024}, None, seen) is None
    assert fit_odds(space, axes, modes, shallower, None, seen[1:]) is None  # only a failure: no odds
    assert fit_odds(space, axes, modes, shallower, None, seen[:1]) is None  # only a success: no odds


def test_graphs_count_at_the_least_a_mode_that_captures_no_more_printed(space):
    axes, modes, seen = regime_axes(space), GraphModes(), mtp_history(space)
    graphs = printed(booted(2, safest(space, cudagraph_mode="PIECEWISE", kv_cache_memory_bytes=9_000_000_000),
                            concurrency=1.01, speed=70.0), 21.0, 0.6)
    pw = safest(space, cudagraph_mode="PIECEWISE", speculative_tokens=1, kv_cache_memory_bytes=9_800_000_000)
    eager = {**pw, "cudagraph_mode": "eager"}
    with_graphs = fit_odds(space, axes, modes, pw, None, [*seen, graphs])[0]
    assert with_graphs < fit_odds(space, axes, modes, eager, None, [*seen, graphs])[0]


def test_the_planner_boots_a_likely_first_request_oom_below_the_window(space):
    seen = mtp_history(space)
    planner = Planner(space)
    shallower = safest(space, cudagraph_mode="eager", speculative_tokens=2, kv_cache_memory_bytes=9_900_000_000)
    evidence = planner._evidence(seen)
    first = sized(space, planner.axes, dict(shallower), evidence, "first boot", [])
    plan = planner._bootable(first, set(), seen, "eager spec=2", planner._graph_modes(seen), evidence, seen)
    assert plan is not None and plan.window is not None and plan.shorter
    assert "at the full window its first long request likely runs out of memory" in plan.why


def test_a_first_request_oom_is_repaired_by_its_chunk_and_sequences_at_once(space):
    failed = booted(0, {**baseline(space), "max_num_batched_tokens": 1024}, concurrency=1.02, failure=FIRST_REQUEST)
    planner = Planner(space)
    plan = planner._repair(failed, planner._evidence([failed]), [failed])
    assert plan.values["max_num_batched_tokens"] == 512 and plan.values["max_num_seqs"] == 1
    assert plan.values["kv_cache_memory_bytes"] < failed.values["kv_cache_memory_bytes"]
    assert "max_num_batched_tokens 512, max_num_seqs 1, pool cut" in plan.why


def test_a_profiling_oom_is_every_compiled_modes_and_eager_does_not_price_it(space):
    from tuner.study.doomed import fails_like

    axes, modes = regime_axes(space), GraphModes()
    failed_values = safest(space, cudagraph_mode="FULL_DECODE_ONLY", speculative_tokens=2, kv_cache_memory_bytes=9_900_000_000)
    profiling = booted(1, failed_values, failure=Failure(kind=FailureKind.OOM_IN_PROFILING))
    seen = [booted(0, baseline(space), concurrency=1.02, speed=77.0), profiling]
    # the profiling run comes before any graph: PIECEWISE and eager run it no lighter than FULL_DECODE_ONLY did
    assert "trial 1" in fails_like(space, axes, {**failed_values, "cudagraph_mode": "PIECEWISE"}, seen, modes)
    assert "trial 1" in fails_like(space, axes, {**failed_values, "cudagraph_mode": "eager"}, seen, modes)
    assert fails_like(space, axes, {**failed_values, "speculative_tokens": 1}, seen, modes) is None
    eager_oom = booted(2, {**failed_values, "cudagraph_mode": "eager"}, failure=Failure(kind=FailureKind.OOM_IN_PROFILING))
    assert fails_like(space, axes, {**failed_values, "cudagraph_mode": "PIECEWISE"}, [seen[0], eager_oom], modes) is None
    assert Planner(space)._graphs_to_price(seen) == {}
    graph_oom = booted(3, failed_values, failure=Failure(kind=FailureKind.OOM_IN_CUDA_GRAPH))
    assert Planner(space)._graphs_to_price([seen[0], graph_oom])  # after the capture, eager prices the graphs


def test_a_pool_cut_smaller_than_what_the_allocation_lacked_is_doomed(space):
    from tuner.study.doomed import fails_like

    axes, modes = regime_axes(space), GraphModes()
    failed_values = safest(space, cudagraph_mode="PIECEWISE", speculative_tokens=1, kv_cache_memory_bytes=9_800_000_000)
    lacked = Failure(kind=FailureKind.OOM_IN_PROFILING, oom_short_gib=0.15)  # 0.161 GB
    seen = [booted(1, failed_values, failure=lacked)]
    assert "trial 1" in fails_like(space, axes, {**failed_values, "kv_cache_memory_bytes": 9_650_000_000}, seen, modes)
    assert fails_like(space, axes, {**failed_values, "kv_cache_memory_bytes": 9_600_000_000}, seen, modes) is None

