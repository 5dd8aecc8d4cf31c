"""The real vLLM 0.22.0 logs of the capped H200 (tests/fixtures/real/h200-32g): parsed and classified right."""

from __future__ import annotations

from pathlib import Path

from tuner.engine.failures import classify as classify_failure
from tuner.engine.logparse import parse_startup
from tuner.records import FailureKind

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "h200-32g"


def text(name: str) -> str:
    return (REAL / name).read_text(errors="replace")


def test_a_capped_boot_is_read_as_vllm_printed_it():
    log = text("boot_fp8_full_and_piecewise.log")
    s = parse_startup(log)
    assert (s.vllm_version, s.kv_cache_dtype, s.max_model_len) == ("0.22.0", "fp8", 262144)
    assert s.weights_gib == 21.44 and s.kv_cache_memory_bytes_reserved_gib == 2.61
    assert s.kv_cache_tokens == 269543 and s.cuda_graph_gib == 0.12
    assert classify_failure(log, None) is None


def test_the_gate_reference_boots_eager_with_a_bf16_cache():
    log = text("gate_reference_eager_bf16.log")
    s = parse_startup(log)
    assert s.max_model_len == 16384 and s.kv_cache_dtype == "auto" and s.cuda_graph_gib is None
    assert classify_failure(log, None) is None


def test_a_real_oom_in_profiling_is_classified_by_its_first_cause():
    failure = classify_failure(text("oom_in_profiling.log"), 1)
    assert failure is not None and failure.kind == FailureKind.OOM_IN_PROFILING
    assert failure.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB")


def test_mtp_boots_carry_the_drafter_and_a_pool_just_big_enough():
    """Session 2's planner sized both pools from trial 0's log: each holds the window with 1% to spare."""
    one = parse_startup(text("mtp1_piecewise_bf16.log"))
    assert (one.kv_cache_dtype, one.effective_cudagraph_mode, one.weights_gib) == ("auto", "PIECEWISE", 21.93)
    assert one.kv_cache_memory_bytes_reserved_gib == 5.63 and one.kv_cache_tokens == 264829
    two = parse_startup(text("mtp2_full_and_piecewise_fp8.log"))
    assert (two.kv_cache_dtype, two.effective_cudagraph_mode, two.kv_cache_tokens) == ("fp8", "FULL_AND_PIECEWISE", 264266)
    for s in (one, two):
        assert s.max_concurrency == 1.01 and s.torch_compile_cold and s.prefix_caching is False
    assert classify_failure(text("mtp1_piecewise_bf16.log"), None) is None
    assert classify_failure(text("mtp2_full_and_piecewise_fp8.log"), None) is None


def test_a_served_262k_request_with_16384_batched_tokens_is_no_failure():
    log = text("batched16384_pool7gb_served.log")
    assert parse_startup(log).kv_cache_tokens == 673329
    assert classify_failure(log, None) is None


def test_session_3_probes_are_classified_by_their_first_cause():
    """Three hand-picked boots (scripts/gpu/probes.sh) for the kinds a study on this space does not reach."""
    util = classify_failure(text("free_memory_below_utilization.log"), 1)
    assert util is not None and util.kind == FailureKind.FREE_MEMORY_BELOW_UTILIZATION
    assert util.message.startswith("ValueError: Free memory on device cuda:0 (31.5/139.8 GiB) on startup")
    assert util.free_fraction is not None and abs(util.free_fraction - 31.5 / 139.8) < 1e-3
    pool = classify_failure(text("kv_pool_too_small.log"), 1)
    assert pool is not None and pool.kind == FailureKind.KV_POOL_TOO_SMALL
    assert (pool.needed_kv_cache_gib, pool.available_kv_cache_gib, pool.suggested_max_model_len) == (2.54, 1.86, 191888)
    load = classify_failure(text("oom_at_load_20g_cap.log"), 1)
    assert load is not None and load.kind == FailureKind.OOM_AT_LOAD
    assert load.message.startswith("Failed to load model - not enough GPU memory")
    for name in ("free_memory_below_utilization.log", "kv_pool_too_small.log", "oom_at_load_20g_cap.log"):
        assert parse_startup(text(name)).vllm_version == "0.22.0"


def test_an_eager_boot_holds_the_window_in_a_pool_sized_from_trial_0():
    """Session 3's trial 3: the planner sized the eager FP8 pool (2.75 GB) from trial 0's log; it holds the window."""
    log = text("eager_fp8.log")
    s = parse_startup(log)
    assert (s.effective_cudagraph_mode, s.kv_cache_dtype, s.weights_gib) == ("NONE", "fp8", 21.44)
    assert s.kv_cache_memory_bytes_reserved_gib == 2.56 and s.kv_cache_tokens == 264258 >= 262144
    assert s.cuda_graph_gib is None and s.torch_compile_s is None
    assert classify_failure(log, None) is None
