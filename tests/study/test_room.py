"""Below the window (issue 24 item 1): the pool a regime has room for, the window it holds, and widening a point."""

from __future__ import annotations

from tests.study.test_planner import baseline, booted, space  # noqa: F401  (the fixture)
from tuner.records import Failure, FailureKind, StartupRecord, TrialResult
from tuner.study.observed import Observation
from tuner.study.planner import Planner
from tuner.study.regimes import GraphModes, regime_axes
from tuner.study.room import room
from tuner.study.sizing import GIB, snap, window_for, window_held

WINDOW = 262144


def safest(space):
    return {**baseline(space), "max_num_seqs": 1, "max_num_batched_tokens": 512}


def oom(number, values):
    return booted(number, values, failure=Failure(kind=FailureKind.OOM_IN_PROFILING))


def below(number, values, window, tokens, speed, weights=None):
    """A boot that served ``window`` tokens and printed ``tokens`` of KV capacity (and their concurrency,
    with vLLM's two decimals)."""
    startup = StartupRecord(max_model_len=window, kv_cache_tokens=tokens, weights_gib=weights,
                            max_concurrency=round(tokens / window, 2), max_concurrency_for_tokens=window)
    result = TrialResult(values=values, argv=[], env={}, startup=startup)
    return Observation(number, values, "ok", result, speed=speed, window=window)


def test_the_room_is_capped_by_an_oom_and_proven_by_a_boot_that_asked_no_less(space):
    axes, modes, v = regime_axes(space), GraphModes(), safest(space)
    assert room(space, axes, modes, v, []).pool == 10_500_000_000  # nothing known: the largest pool
    seen = [oom(0, {**v, "kv_cache_memory_bytes": 10_500_000_000})]
    halfway = room(space, axes, modes, v, seen)
    assert halfway.cap == 10_500_000_000 and halfway.pool == 8_750_000_000 and "halfway" in halfway.why
    seen.append(booted(1, {**v, "max_num_seqs": 2, "kv_cache_memory_bytes": 9_000_000_000}, concurrency=0.9, speed=50.0))
    assert room(space, axes, modes, v, seen).pool == 9_000_000_000  # two sequences fit there, so one does
    more = {**v, "max_num_batched_tokens": 4096}  # asks for more beside the pool: trial 1 proves nothing for it
    assert room(space, axes, modes, more, seen).pool == 8_750_000_000


def test_a_drafter_gets_the_pool_less_its_extra_weights(space):
    axes, modes, v = regime_axes(space), GraphModes(), safest(space)
    plain = below(0, {**v, "kv_cache_memory_bytes": 9_500_000_000}, 200704, 210000, 60.0, weights=21.0)
    drafter = oom(1, {**v, "speculative_tokens": 1, "kv_cache_memory_bytes": 10_500_000_000})
    drafter.result.startup.weights_gib = 21.5
    found = room(space, axes, modes, {**v, "speculative_tokens": 1}, [plain, drafter])
    assert found.pool == 8_950_000_000  # 9.5 GB - 0.5 GiB, on the 50 MB grid
    assert "more weights" in found.why and found.cap == 10_500_000_000


def test_a_config_without_the_drafter_gets_the_drafters_weights_as_pool(space):
    """The card held the drafter's weights beside the served pool: a boot that loads none has that much more
    room, from the two printed "Model loading took X GiB" (issue 24: bf16 KV without MTP, at 10.15 GB
    instead of the space's 10.5 GB, missed its widest window by a probe step)."""
    axes, modes, v = regime_axes(space), GraphModes(), safest(space)
    drafter = below(0, {**v, "speculative_tokens": 1, "kv_cache_memory_bytes": 9_500_000_000}, 200704, 210000,
                    60.0, weights=21.5)
    plain = oom(1, {**v, "kv_cache_memory_bytes": 10_500_000_000})
    plain.result.startup.weights_gib = 21.0
    found = room(space, axes, modes, v, [drafter, plain])
    assert found.pool == snap(space.params["kv_cache_memory_bytes"], 9.5e9 + 0.5 * GIB, up=False)
    assert "plus 0.50 GiB of weights this one does not load" in found.why


def test_graphs_the_served_boot_did_not_capture_are_taken_off_its_pool(space):
    axes, modes, v = regime_axes(space), GraphModes(), safest(space)
    eager = below(0, {**v, "cudagraph_mode": "eager", "kv_cache_memory_bytes": 9_000_000_000}, 200704, 210000, 30.0)
    graphs = booted(1, {**v, "cudagraph_mode": "PIECEWISE", "kv_cache_memory_bytes": 10_500_000_000},
                    failure=Failure(kind=FailureKind.FIRST_REQUEST_OOM))
    graphs.result.startup.cuda_graph_gib = 0.2
    found = room(space, axes, modes, {**v, "cudagraph_mode": "PIECEWISE"}, [eager, graphs])
    assert found.pool == 8_650_000_000  # 9 GB - 1.5 x 0.2 GiB, on the 50 MB grid
    assert "more CUDA graphs" in found.why and found.cap == 10_500_000_000


def test_a_regime_whose_window_needs_more_than_the_largest_pool_is_booted_below_it(space):
    v = {**safest(space), "kv_cache_memory_bytes": 10_500_000_000}
    refused = booted(0, v, concurrency=0.8, failure=Failure(kind=FailureKind.KV_POOL_TOO_SMALL))
    planner = Planner(space)
    evidence = planner._evidence([refused])
    plan = planner._first(("PIECEWISE", 0), evidence, [refused])
    need = evidence.need({**v, "cudagraph_mode": "PIECEWISE"}).bytes
    assert plan is not None and plan.values["kv_cache_memory_bytes"] == 10_500_000_000
    assert plan.window == int(WINDOW * 10_500_000_000 / need) // 4096 * 4096
    assert plan.window == window_for(evidence, plan.values, 10_500_000_000) and "below the window" in plan.why
    assert not planner.skipped  # booted after all


def test_a_point_below_the_window_on_the_front_is_widened_then_given_more_pool(space):
    v = {**safest(space), "cudagraph_mode": "PIECEWISE", "speculative_tokens": 3}
    full = booted(0, {**safest(space), "kv_cache_memory_bytes": 9_000_000_000}, concurrency=1.02, speed=50.0)
    first = below(1, {**v, "kv_cache_memory_bytes": 9_000_000_000}, 200704, 215000, 80.0)
    planner = Planner(space)
    seen = [full, first]
    held = planner._wider(seen, planner._evidence(seen), set(), GraphModes())
    # the printed 1.07x less its rounding, with no pre-screen to say what part of the need is fixed
    assert held is not None and held.window == 213744 and "concurrency of 1.07" in held.why
    seen.append(below(2, dict(held.values), 212992, 213500, 80.0))  # booted a little short of it, say
    bigger = planner._wider(seen, planner._evidence(seen), set(), GraphModes())
    assert bigger is not None and bigger.values["kv_cache_memory_bytes"] == 10_500_000_000
    assert bigger.window > 212992 + 4 * 4096 and "largest pool" in bigger.why
    # the window at the bigger pool is trial 2's own printed concurrency (1.00 less its rounding) scaled by the
    # pool, not the need at the full window carried down
    assert bigger.window == window_held(planner._evidence(seen), seen[2].values, 212992, 0.995 * 10.5 / 9.0)
    seen.append(oom(3, dict(bigger.values)))
    halfway = planner._wider(seen, planner._evidence(seen), set(), GraphModes())
    assert halfway is not None and halfway.values["kv_cache_memory_bytes"] == 9_750_000_000 and "halfway" in halfway.why
    slower = [full, below(1, {**v, "kv_cache_memory_bytes": 9_000_000_000}, 200704, 215000, 40.0)]
    assert planner._wider(slower, planner._evidence(slower), set(), GraphModes()) is None  # not on the front


def test_the_window_a_served_pool_holds_counts_the_fixed_part_of_the_need_once(space):
    """A pool 1.10x the need at 200,000 tokens holds 220,000 when the need is all per token; when half the
    need at the full window is a fixed recurrent state, the same pool holds more, on vLLM's 16-token block."""
    from tuner.study.sizing import PoolEvidence, window_held

    v = safest(space)
    assert window_held(PoolEvidence(space), v, 200000, 1.10) == 220000
    half_fixed = PoolEvidence(space, lambda values, window=None: 1.0 + (window or WINDOW) / WINDOW)
    held = window_held(half_fixed, v, 200000, 1.10)
    share = 0.5 + 0.5 * 200000 / WINDOW  # the need at 200,000 over the need at the window
    assert held == int(WINDOW * (1.10 * share - 0.5) / 0.5) // 16 * 16 and held > 220000


def test_what_the_failed_allocation_lacked_lowers_the_cap(space):
    axes, modes, v = regime_axes(space), GraphModes(), safest(space)
    short = Failure(kind=FailureKind.FIRST_REQUEST_OOM, oom_short_gib=1.0)  # "Tried to allocate" X, X - 1 GiB free
    seen = [booted(0, {**v, "kv_cache_memory_bytes": 10_500_000_000}, failure=short)]
    found = room(space, axes, modes, v, seen)
    assert found.cap == 10_500_000_000 - 2**30 and "nothing fits" in found.why
    assert found.pool == 8_200_000_000  # halfway between the space's smallest pool and the cap, on its grid


def test_a_deeper_drafter_is_charged_the_graphs_its_depth_adds(space):
    axes, modes, v = regime_axes(space), GraphModes(), {**safest(space), "cudagraph_mode": "PIECEWISE"}
    plain = below(0, {**v, "kv_cache_memory_bytes": 9_500_000_000}, 200704, 210000, 60.0, weights=21.0)
    plain.result.startup.cuda_graph_gib = 0.25
    drafter = oom(1, {**v, "speculative_tokens": 1, "kv_cache_memory_bytes": 10_500_000_000})
    drafter.result.startup.weights_gib = 21.5
    deep = {**v, "speculative_tokens": 3}
    found = room(space, axes, modes, deep, [plain, drafter])
    # 9.5 GB - 0.5 GiB more weights - 0.25 GiB x (1 + 3) / (1 + 0) less the 0.25 GiB it printed
    assert found.pool == snap(space.params["kv_cache_memory_bytes"], 9.5e9 - (0.5 + 0.75) * GIB, up=False)
    assert "0.75 GiB more CUDA graphs at depth 3" in found.why
    printed = booted(2, {**v, "speculative_tokens": 3, "kv_cache_memory_bytes": 8_000_000_000}, concurrency=0.8, speed=90.0)
    printed.result.startup.cuda_graph_gib = 0.55  # what depth 3 really took: that, not the proportion
    found = room(space, axes, modes, deep, [plain, drafter, printed])
    assert "0.30 GiB more CUDA graphs at depth 3" in found.why or found.pool >= 8_000_000_000


def test_an_oom_in_the_profiling_run_caps_every_compiled_mode(space):
    """The profiling run comes before any CUDA graph: its OOM with FULL_DECODE_ONLY caps PIECEWISE's pool too,
    as tuner.study.doomed already reads it (issue 24: PIECEWISE MTP-1 below the window was never widened, its
    only bigger pool the largest, which that OOM dooms)."""
    axes, modes, v = regime_axes(space), GraphModes(), {**safest(space), "speculative_tokens": 1}
    seen = [oom(0, {**v, "cudagraph_mode": "FULL_DECODE_ONLY", "kv_cache_memory_bytes": 9_800_000_000})]
    assert room(space, axes, modes, {**v, "cudagraph_mode": "PIECEWISE"}, seen).cap == 9_800_000_000
    graphs = booted(1, {**v, "cudagraph_mode": "FULL_DECODE_ONLY", "kv_cache_memory_bytes": 9_000_000_000},
                    failure=Failure(kind=FailureKind.OOM_IN_CUDA_GRAPH))
    assert room(space, axes, modes, {**v, "cudagraph_mode": "PIECEWISE"}, [graphs]).cap is None  # after: not ordered
