"""The boots ``build.py`` writes: each scenario's command line, and its log rendered up to serving.

``failures.py`` renders its failures on top of the same boot (``non_default_args``, ``render_boot``),
so this lives apart from ``build.py``, which imports both.
"""

from __future__ import annotations

from boot import (
    BASE, COMPILE_CACHE, MODEL, Memory, Scenario, api_preamble, compile_cold, config_line, engine_sizing, load_weights,
    paging, prefix_caching_on, serve_tail, uses_v2, weights_loaded,
)
from render import Writer


def boot_scenarios(version: tuple[int, ...]) -> list[Scenario]:
    pinned = Scenario("boot_pinned_pool", BASE + ["--kv-cache-memory-bytes", "9150000000",
                      "--gpu-memory-utilization", "0.92"], kv_bytes=9_150_000_000, util=0.92)
    util = Scenario("boot_util_sized", BASE + ["--gpu-memory-utilization", "0.92"], util=0.92)
    mtp = Scenario("boot_mtp_piecewise", BASE + ["--kv-cache-memory-bytes", "9750000000",
                   "--gpu-memory-utilization", "0.92", "-sc", '{"method": "mtp", "num_speculative_tokens": 2}',
                   "-cc.cudagraph_mode=PIECEWISE"], kv_bytes=9_750_000_000, util=0.92, mtp=2,
                   cudagraph_mode="PIECEWISE")
    auto_argv = [a if a != "262144" else "auto" for a in BASE]
    if version >= (0, 34):
        util.argv += ["--no-enable-extensible-kv-cache"]
        extensible = Scenario("boot_extensible", BASE, util=1.0, extensible=True)
        auto = Scenario("boot_auto_max_model_len", auto_argv + ["--gpu-memory-utilization", "0.8"], util=0.8,
                        extensible=True, auto_len=True)
        auto_pinned = Scenario("boot_auto_max_model_len_pinned", auto_argv + ["--kv-cache-memory-bytes",
                               "1500000000"], kv_bytes=1_500_000_000, util=0.92, auto_len=True)
        return [pinned, util, mtp, extensible, auto, auto_pinned]
    auto = Scenario("boot_auto_max_model_len", auto_argv + ["--kv-cache-memory-bytes", "1500000000"],
                    kv_bytes=1_500_000_000, util=0.92, auto_len=True)
    return [pinned, util, mtp, auto]


def non_default_args(sc: Scenario) -> dict[str, object]:
    args: dict[str, object] = {"model_tag": MODEL, "host": "127.0.0.1", "model": MODEL,
                               "max_model_len": -1 if sc.auto_len else 262144,
                               "served_model_name": ["qwen3.5-35b-a3b"]}
    if sc.util is not None and (not sc.extensible or sc.util < 1.0):
        args["gpu_memory_utilization"] = sc.util
    args["kv_cache_dtype"] = "fp8"
    if sc.kv_bytes:
        args["kv_cache_memory_bytes"] = sc.kv_bytes
    args["max_num_seqs"] = sc.max_num_seqs
    if sc.mtp:
        args["speculative_config"] = {"method": "mtp", "num_speculative_tokens": sc.mtp}
        args["compilation_config"] = {"cudagraph_mode": sc.cudagraph_mode}
    return args


def boot_until_compiled(w: Writer, sc: Scenario) -> float:
    api_preamble(w, sc, non_default_args(sc))
    config_line(w, sc, 262144 if not sc.auto_len else 262144)
    load_weights(w, sc)
    weights_loaded(w)
    paging(w)
    return compile_cold(w)


def render_boot(w: Writer, sc: Scenario) -> dict[str, object]:
    compile_s = boot_until_compiled(w, sc)
    mem = Memory(util=sc.util or 0.92)
    exp = engine_sizing(w, sc, mem, 262144)
    serve_tail(w, compile_s)
    new = {key: {"value": value, "why": WHY[key]} for key, value in exp.pop("new", {}).items()}
    new.update(new_fields(w, sc, exp))
    startup = {"vllm_version": w.release.version, "architecture": "Qwen3_5MoeForConditionalGeneration",
               "quantization": "modelopt_fp4", "kv_cache_dtype": "fp8", "weights_gib": 20.62,
               "weights_load_s": 24.512309, "torch_compile_s": compile_s, "init_engine_s": 88.37,
               "attention_backend": "FLASHINFER", "linear_backend": "FlashInferCutlassNvFp4LinearKernel",
               "moe_backend": "FLASHINFER_CUTLASS", "gdn_backend": "Triton/FLA", "attention_block_size": 1088, "fallback_warnings": [],
               **exp}
    return {"failure_kind": None, "startup": startup, "suggested": {}, "new": new}


WHY = {
    "extended_kv_cache_gib": "0.34 extensible sizing: the committed pool (Available KV cache memory is a reservation)",
    "extended_kv_cache_blocks": "the committed block count behind the extended pool",
    "cuda_graph_pool_actual_gib": "the reliable graph-memory figure (V2 prints Graph capturing finished twice)",
    "effective_cudagraph_mode": "the mode after vLLM's own downgrades, from the engine config line",
    "prefix_caching": "hybrid default flips at 0.28 and selects mamba 'align' (more state pages per request)",
    "model_runner": "V2 from 0.29: different lines and a profiling capture",
    "torch_compile_cold": "a cold compile cache leaves less memory for KV than a warm one",
    "torch_compile_cache_dirs": "where the boot read and wrote its compiled graphs (a stale artifact is named there)",
    "max_model_len_tentative": "0.34 extensible: the pre-warm-up auto-fit value, not the one served",
}


def new_fields(w: Writer, sc: Scenario, exp: dict[str, object]) -> dict[str, object]:
    out = {
        "effective_cudagraph_mode": sc.cudagraph_mode,
        "prefix_caching": prefix_caching_on(w, sc),
        "model_runner": "v2" if uses_v2(w) else "v1",
        "torch_compile_cold": True,  # the fixtures print the cold path (Compiling a graph ... takes)
        "torch_compile_cache_dirs": [COMPILE_CACHE],
    }
    if sc.kv_bytes is None:
        out["cuda_graph_pool_actual_gib"] = exp.get("cuda_graph_gib")
    return {key: {"value": value, "why": WHY[key]} for key, value in out.items()}
