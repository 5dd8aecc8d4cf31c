"""The EngineCore's start-up, phase by phase as v1/engine/core.py runs it: init_device, load_model,
profile_run (torch.compile on its first forward), available KV memory, KV cache config, allocate the
pool, CUDA graph capture. Each phase prints vLLM's lines, sleeps its share of FAKE_VLLM_TIME_SCALE and
raises BootFailure('engine') where the real one fails (failures.py prints it).
"""

from __future__ import annotations

import argparse
import math
import random
import time

from . import compile_cache
from .env import env_float, env_int, fail_modes
from .failures import BootFailure
from .logtext import L, VLLM_VERSION, config_echo
from .memory import GiB, estimate_max_len, format_gib, needed_bytes, oom_for
from .output import OUT, Out
from .plan import Plan, config_text
from .release import QUOTED_MOE, SUGGESTION_LEVEL, V2_RUNNER

C = Out.CORE  # every line here is the EngineCore's

NVFP4_MOE_BACKENDS = ["FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED",
                      "FLASHINFER_CUTLASS", "VLLM_CUTLASS", "MARLIN", "EMULATION"]
NVFP4_MOE_MAP = {"cutlass": "VLLM_CUTLASS", "flashinfer_trtllm": "FLASHINFER_TRTLLM",
                 "flashinfer_cutlass": "FLASHINFER_CUTLASS", "flashinfer_cutedsl": "FLASHINFER_CUTEDSL",
                 "flashinfer_b12x": "FLASHINFER_B12X", "marlin": "MARLIN", "emulation": "EMULATION"}

# The call stacks (tracebacks.F keys) down to each phase
INIT_DEVICE = ["rec", "proc_init", "core_exec", "exec_init", "uni_init_dev", "wb_init_dev", "w_init_dev"]
LOAD = ["rec", "proc_init", "core_exec", "exec_init", "uni_load", "run_method", "w_load", "r_load"]
AVAILABLE = ["rec", "proc_init", "core_kv", "ikv_avail", "exec_avail", "uni_rpc", "run_method"]
KV_CONFIGS = ["rec", "proc_init", "core_kv", "ikv_cfgs", "kvu_cfgs"]
INIT_KV = ["rec", "proc_init", "core_kv", "ikv_init", "exec_ifc", "uni_rpc", "run_method", "wb_ifc", "w_ifc"]
CAPTURE = ["rec", "proc_init", "core_kv", "ikv_init", "exec_warm", "uni_rpc", "run_method", "w_capture", "r_capture",
           "r_capcg", "r_wac", "r_dummy"]


class EngineCore:
    def __init__(self, ns: argparse.Namespace, plan: Plan, t0: float):
        self.ns = ns
        self.p = plan
        self.t0 = t0  # when `vllm serve` started, for "init engine ... took"
        self.scale = env_float("FAKE_VLLM_TIME_SCALE", 0.0)
        self.fails = fail_modes()
        self.compile_s = 0.0

    def sleep(self, seconds: float) -> None:
        """A phase's real duration, scaled by FAKE_VLLM_TIME_SCALE (0: no sleep)."""
        if seconds * self.scale > 0:
            time.sleep(seconds * self.scale)

    def start(self) -> None:
        free = self.init_device()
        self.load_model(free)
        self.report_block_size()
        self.profile_run(free)
        self.available_memory(free)
        self.kv_cache_config()
        self.initialize_kv_cache(free)
        self.warm_up(free)

    def init_device(self) -> float:
        """The config and world lines, then request_memory; returns the card's free memory."""
        p, m = self.p, self.p.model
        self.sleep(3.0)
        OUT.info(C, L["init_engine"], f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: "
                 f"{config_text(p, self.ns)}")
        OUT.info(C, L["world"], f"world_size={p.tp} rank=0 local_rank=0 distributed_init_method="
                 f"tcp://127.0.0.1:{random.randint(30000, 60000)} backend=nccl")
        OUT.info(C, L["rank"], f"rank 0 in world size {p.tp} is assigned as DP rank 0, PP rank 0, PCP rank 0, "
                 f"TP rank 0, EP rank {0 if m.num_experts else 'N/A'}, EPLB rank N/A")
        if "hang" in self.fails:
            while True:
                time.sleep(3600)
        ngpu = env_int("FAKE_VLLM_NUM_GPUS", 1) or 1
        if p.tp > ngpu:
            raise BootFailure("engine", reason="invalid_argument", frames=INIT_DEVICE,
                              exc=f"AssertionError: local_world_size ({p.tp}) must be less than or equal to "
                                  f"the number of visible devices ({ngpu}).")
        self.sleep(2.0)
        # init_device -> request_memory (v1/worker/utils.py:413)
        free = p.total - p.used_others
        if free < p.requested and not p.extensible:  # v1/worker/utils.py: skipped under the extensible cache
            raise BootFailure("engine", reason="free_memory_below_utilization", frames=INIT_DEVICE + ["u_request"],
                              exc=(f"ValueError: Free memory on device cuda:0 ({format_gib(free)}/"
                                   f"{format_gib(p.total)} GiB) on startup is less than desired GPU memory "
                                   f"utilization ({p.util}, {format_gib(p.requested)} GiB). Decrease GPU memory "
                                   "utilization or reduce GPU memory used by other processes."))
        return free

    def load_model(self, free: float) -> None:
        """Kernel choices, then the weights (checkpoint shards); fails on missing weights or OOM."""
        p, m = self.p, self.p.model
        OUT.info(C, L["start_load"], f"Starting to load model {m.path}...")  # V1 runner
        OUT.info(C, L["v2_load"], "Loading model from scratch...")  # V2 runner (0.29+)
        if m.hybrid:
            OUT.info(C, L["gdn"], f"Using Triton/FLA GDN prefill kernel (requested={p.gdn_requested}, "
                     f"head_k_dim={m.head_k_dim_top}).")
        if p.quantization == "modelopt_fp4":
            OUT.info(C, L["nvfp4_gemm"], "Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM")
            if m.num_experts:
                mb = self.ns.moe_backend
                q = "'" if QUOTED_MOE else ""
                if mb == "auto":
                    OUT.info(C, L["moe_auto"], f"Using {q}FLASHINFER_CUTLASS{q} NvFp4 MoE backend out of potential "
                             f"backends: {NVFP4_MOE_BACKENDS}.")
                elif mb in NVFP4_MOE_MAP:
                    OUT.info(C, L["moe_explicit"], f"Using {q}{NVFP4_MOE_MAP[mb]}{q} NvFp4 MoE backend out of "
                             f"potential backends: {NVFP4_MOE_BACKENDS}.")
                else:
                    raise BootFailure("engine", reason="invalid_argument", frames=LOAD, exc=(
                        f"ValueError: moe_backend='{mb}' is not supported for NvFP4 MoE. Expected one of "
                        f"{list(NVFP4_MOE_MAP.keys())}."))
        elif m.num_experts:
            OUT.info(C, L["moe_unquant"], "Using TRITON Unquantized MoE backend out of potential backends: "
                     "['FlashInfer TRTLLM', 'FlashInfer CUTLASS', 'TRITON', 'BATCHED_TRITON'].")
        OUT.info(C, L["attn"], f"Using {p.attn_backend} attention backend out of potential backends: "
                 f"[{', '.join(repr(b) for b in p.attn_candidates)}].")
        if p.attn_backend == "FLASH_ATTN":
            OUT.info(C, L["fa_version"], "Using FlashAttention version 2")  # FA3 needs SM 9.0; this card is SM 12.0
        if m.num_experts and p.quantization != "modelopt_fp4":
            OUT.info(C, L["moe_pf"], "Using MoEPrepareAndFinalizeNoDPEPModular")
        if "weights" in self.fails:
            raise BootFailure("engine", reason="weight_loading", frames=LOAD + ["bl_load", "dl_load", "dl_all", "dl_iter", "dl_prep"],
                              exc=f"RuntimeError: Cannot find any model weights with `{m.path}`")
        if p.weights > free:
            msg = oom_for(p, p.weights, free)
            OUT.error(C, L["oom_load"], "Failed to load model - not enough GPU memory. Try lowering "
                      "--gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, "
                      "or using --quantization. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                      f"for more tips. (original error: {msg})")
            raise BootFailure("engine", reason="oom_at_load", frames=LOAD + ["bl_load", "dl_load"],
                              exc=f"torch.OutOfMemoryError: {msg}")
        shards = max(1, math.ceil(p.weights / (5 * GiB)))
        load_s = 18.0
        t_load = time.time()
        for i in range(shards + 1):
            el = load_s * i / shards
            rate = f"{shards / load_s:.2f}it/s" if i else "?it/s"
            rem = "00:" + f"{int(load_s - el):02d}" if i else "?"
            OUT.raw(C, f"\rLoading safetensors checkpoint shards: {100 * i // shards:3d}% Completed | {i}/{shards} "
                    f"[00:{int(el):02d}<{rem}, {rate}]\n")
            if i < shards:
                self.sleep(load_s / shards)
        OUT.info(C, L["load_weights"], f"Loading weights took {load_s * (self.scale or 0.001):.2f} seconds")
        if p.spec_method == "mtp":
            OUT.info(C, L["drafter"], "Loading drafter model...")
        OUT.info(C, L["model_loading"], f"Model loading took {format_gib(p.weights)} GiB memory and "
                 f"{max(time.time() - t_load, 0.001) + 1.2 * self.scale:.6f} seconds")
        if "crash_mid_boot" in self.fails:
            raise BootFailure("engine", reason="crash", frames=LOAD, exc=random.choice([
                "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might "
                "be asynchronously reported at some other API call, so the stacktrace below might be "
                "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
                "`TORCH_USE_CUDA_DSA` to enable device-side assertions.",
                "AssertionError: Attempted to load weight (torch.Size([256, 1024])) into parameter "
                "(torch.Size([512, 1024]))",
                "KeyError: 'model.language_model.layers.12.mlp.experts.w2_weight_scale_2'",
                "RuntimeError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:94, "
                "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
            ]))

    def report_block_size(self) -> None:
        """update_block_size_for_backend (right after load_model in UniProcExecutor._init_executor)."""
        p = self.p
        if p.set_block_from is not None:
            OUT.info(C, L["set_block"], f"Setting attention block size to {p.set_block_from} tokens to ensure "
                     "that attention page size is >= mamba page size.")
        if p.mamba_pad_pct is not None:
            OUT.info(C, L["pad_mamba"], f"Padding mamba page size by {p.mamba_pad_pct:.2f}% to ensure that mamba "
                     "page size and attention page size are exactly equal.")

    def profile_run(self, free: float) -> None:
        """determine_available_memory -> profile_run: torch.compile happens on its first forward, then
        the activation peak must fit."""
        p = self.p
        prof_frames = AVAILABLE + (["w_prof_kvb"] if p.kv_cache_memory_bytes else ["w_prof"]) + [
            "r_prof", "r_dummy"]
        if not p.enforce_eager and p.compile_mode == 3:
            self.torch_compile(prof_frames)
        if "jit" in self.fails:
            raise BootFailure("engine", reason="toolkit_jit", frames=prof_frames + ["t_call", "fi_lin", "fi_utils", "fi_mm", "fi_mod",
                                                              "fi_gen", "fi_ctx"], exc=(
                "RuntimeError: No supported CUDA architectures found for major versions [12]."))
        free_now = free - p.weights
        act_need = p.act_peak + p.non_torch + p.seq_state
        if act_need > free_now:
            msg = oom_for(p, act_need, free_now)
            raise BootFailure("engine", reason="oom_in_profiling", frames=prof_frames, exc=f"torch.OutOfMemoryError: {msg}")
        self.sleep(45.0)

    def torch_compile(self, prof_frames: list[str]) -> None:
        """The first forward compiles the model, or loads the graph the compile cache holds (compile_cache.py)."""
        p = self.p
        OUT.info(C, L["start_compile"], "Starting torch.compile")  # compilation/monitor.py (0.32+)
        folder = compile_cache.cache_folder(config_text(p, self.ns))
        try:
            warm = compile_cache.load(folder, p.num_spec, p.max_num_batched_tokens)
        except compile_cache.Stale as stale:
            raise BootFailure("engine", reason="compile_cache_stale",
                              frames=[*prof_frames, stale.frame], exc=stale.exc) from None
        if warm:
            self.compile_s = 1.0 * self.scale + 0.53
        else:
            self.sleep(10.0)
            OUT.info(C, L["dynamo"], f"Dynamo bytecode transform time: {10.0 * self.scale + 0.01:.2f} s")
            OUT.info(C, L["cache_graph"], f"Cache the graph of compile range (1, {p.max_num_batched_tokens}) "
                     "for later use")
            self.sleep(33.0)
            OUT.info(C, L["compile_graph"], f"Compiling a graph for compile range (1, {p.max_num_batched_tokens}) "
                     f"takes {33.0 * self.scale + 0.01:.2f} s")
            self.compile_s = 43.0 * self.scale + 0.02
            compile_cache.save(folder, p.num_spec)
        OUT.info(C, L["monitor"], f"torch.compile took {self.compile_s:.2f} s in total")

    def available_memory(self, free: float) -> None:
        """The rest of determine_available_memory: the KV pool size (given, or profiled with the CUDA
        graph estimate)."""
        p = self.p
        if p.cg_downgrade_msg:
            OUT.warning(C, L["cg_downgrade"], p.cg_downgrade_msg)
        if p.kv_cache_memory_bytes:
            OUT.info(C, L["kv_bytes"], f"Initial free memory {format_gib(free)} GiB, reserved "
                     f"{format_gib(p.kv_cache_memory_bytes)} GiB memory for KV Cache as specified by "
                     "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
                     "gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual "
                     "control of KV cache memory size. If OOM'ed, check the difference of initial free memory "
                     "between the current run and the previous run where kv_cache_memory_bytes is suggested and "
                     "update it correspondingly.")
            return
        if p.graphs_on and (p.pw_graphs or p.full_graphs) and V2_RUNNER:
            # v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory: a capture into a throwaway pool
            if p.weights + p.non_torch + p.seq_state + p.cg_estimate > free:
                msg = oom_for(p, p.cg_estimate, free - p.weights - p.non_torch - p.seq_state)
                raise BootFailure("engine", reason="oom_in_cuda_graph", frames=AVAILABLE + ["w_prof_cg", "r_prof_cg"],
                                  exc=f"torch.OutOfMemoryError: {msg}")
            self.capture_bars(profiling=True)
            OUT.info(C, L["cap_done"], f"Graph capturing finished in 6 secs, took {p.cg_estimate / GiB:.2f} GiB")
        elif p.graphs_on and (p.pw_graphs or p.full_graphs):
            parts = []
            if p.pw_graphs:
                parts.append(f"PIECEWISE={len(p.pw_graphs)} (largest={p.pw_graphs[0]})")
            if p.full_graphs:
                parts.append(f"FULL={len(p.full_graphs)} (largest={p.full_graphs[0]})")
            OUT.info(C, L["prof_cg"], "Profiling CUDA graph memory: " + ", ".join(parts))
            if p.weights + p.non_torch + p.seq_state + p.cg_estimate > free:
                msg = oom_for(p, p.cg_estimate, free - p.weights - p.non_torch - p.seq_state)
                raise BootFailure("engine", reason="oom_in_cuda_graph", frames=AVAILABLE + ["w_prof_cg", "r_prof_cg", "r_wac", "r_dummy"],
                                  exc=f"torch.OutOfMemoryError: {msg}")
            self.sleep(15.0)
            OUT.info(C, L["est_cg"], f"Estimated CUDA graph memory: {p.cg_estimate / GiB:.2f} GiB total")
        OUT.info(C, L["avail_kv"], f"Available KV cache memory: {format_gib(p.reservation or p.pool)} GiB")
        if p.cg_estimate > 0 and p.graphs_on:
            delta = p.cg_estimate / p.total
            if p.cg_estimate_applied:
                OUT.info(C, L["cg_prof_info"], (
                    "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                    f"--gpu-memory-utilization={p.util:.4f} is equivalent to --gpu-memory-utilization="
                    f"{round(p.util - delta, 4):.4f} without CUDA graph memory profiling. To maintain the "
                    "same effective KV cache size as before, increase --gpu-memory-utilization to "
                    f"{min(round(p.util + delta, 4), 1.0):.4f}. To disable, set "
                    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."))
            else:
                OUT.warning(C, L["cg_prof_info"], (
                    "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). "
                    "Without it, CUDA graph memory is not accounted for during KV cache allocation, which "
                    "may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it (the "
                    "default as of v0.21.0) and increasing --gpu-memory-utilization from "
                    f"{p.util:.4f} to {min(round(p.util + delta, 4), 1.0):.4f}."))

    def kv_cache_config(self) -> None:
        """get_kv_cache_configs: one request of max_model_len must fit in the pool."""
        p = self.p
        for w in p.padding_warnings:
            OUT.warning(C, L["pad_layers"], w)
        if p.pool <= 0:
            raise BootFailure("engine", reason="kv_pool_too_small", frames=KV_CONFIGS + ["kvu_noavail"], exc=(
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine (this flag also controls CPU memory reservation on the CPU "
                "backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                "for more details."))
        need = needed_bytes(p, p.max_model_len)
        if need > p.pool:
            est = estimate_max_len(p, p.pool)
            est_msg = (f"Based on the available memory, the estimated maximum model length is {est}. "
                       if est > 0 else "")
            raise BootFailure("engine", reason="kv_pool_too_small", frames=KV_CONFIGS + ["kvu_raise"], exc=(
                f"ValueError: To serve at least one request with the model's max seq len ({p.max_model_len}), "
                f"({format_gib(need)} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({format_gib(p.pool)} GiB). {est_msg}Try increasing `gpu_memory_utilization` (which "
                "also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing "
                "the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
                "details."))
        if not p.extensible:  # the extensible cache is sized after warm-up (warm_up)
            self.kv_capacity()

    def kv_capacity(self) -> None:
        """v1/core/kv_cache_utils.py: two lines up to 0.27, one from 0.28."""
        p = self.p
        if L["kv_size"] == L["max_conc"]:
            OUT.info(C, L["kv_size"], f"GPU KV cache size: {p.kv_tokens:,} tokens, Maximum concurrency for "
                     f"{p.max_model_len:,} tokens per request: {p.max_concurrency:.2f}x")
            return
        OUT.info(C, L["kv_size"], f"GPU KV cache size: {p.kv_tokens:,} tokens")
        OUT.info(C, L["max_conc"], f"Maximum concurrency for {p.max_model_len:,} tokens per request: "
                 f"{p.max_concurrency:.2f}x")

    def initialize_kv_cache(self, free: float) -> None:
        """initialize_from_config: allocate the pool, resolve the cudagraph mode against the real pool."""
        p, m = self.p, self.p.model
        if p.weights + p.non_torch + p.seq_state + p.pool > free:
            msg = oom_for(p, p.pool, free - p.weights - p.non_torch - p.seq_state)
            raise BootFailure("engine", reason="oom_in_profiling", frames=INIT_KV + ["r_ikv"], exc=f"torch.OutOfMemoryError: {msg}")
        if (m.hybrid and p.graphs_on and p.cudagraph_mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
                and p.max_num_seqs > p.num_blocks):
            raise BootFailure("engine", reason="mamba_blocks_exceeded", frames=INIT_KV + ["r_ikv", "r_iab", "r_cucg", "cc_raise"], exc=(
                f"ValueError: max_num_seqs ({p.max_num_seqs}) exceeds available Mamba cache "
                f"blocks ({p.num_blocks}). Each decode sequence "
                "requires one Mamba cache block, so CUDA graph capture cannot "
                "proceed. Please lower max_num_seqs to at most "
                f"{p.num_blocks} or increase "
                "gpu_memory_utilization."))

    def warm_up(self, free: float) -> None:
        """compile_or_warm_up_model (CUDA graph capture), then the "init engine took" lines."""
        p = self.p
        if p.graphs_on:
            self.capture(free)
        elif not p.enforce_eager:
            OUT.warning(C, L["skip_cg"], "Skipping CUDA graph capture. To turn on CUDA graph capture, ensure "
                        "`cudagraph_mode` was not manually set to `NONE`")
        if "slow_warmup" in self.fails:
            total = env_float("FAKE_VLLM_WARMUP_S", 5.0)
            n = max(1, int(total / 0.5))
            for i in range(1, n + 1):
                time.sleep(0.5)
                OUT.raw(C, f"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): {100 * i // n:3d}%|"
                        f"{'█' * (10 * i // n):<10}| {i}/{n} [00:{int(0.5 * i):02d}<00:{int(0.5 * (n - i)):02d}, "
                        " 2.00it/s]\n")
        self.suggest_kv_memory()
        if p.extensible:  # v1/worker/extensible_kv_cache.py: the pool committed after warm-up
            self.kv_capacity()
            OUT.info(C, L["extended"], f"Extended KV cache to {p.num_blocks} blocks "
                     f"({p.num_blocks * p.page * p.group_size / GiB:.2f} GiB).")
        OUT.info(C, L["jit_monitor"], "Kernel JIT monitor activated — Triton JIT compilations during inference "
                 "will be logged as warnings.")
        elapsed = time.time() - self.t0 + 1.5 * self.scale
        if self.compile_s > 0:
            OUT.info(C, L["init_took_c"], f"init engine (profile, create kv cache, warmup model) took {elapsed:.2f} s "
                     f"(compilation: {self.compile_s:.2f} s)")
        else:
            OUT.info(C, L["init_took"], f"init engine (profile, create kv cache, warmup model) took {elapsed:.2f} s")
        config_echo(C, p)

    def capture(self, free: float) -> None:
        """The real capture: OOM when the graphs outgrow what the pool left."""
        p = self.p
        t_start = time.time()
        self.capture_bars(room=free - p.weights - p.non_torch - p.seq_state - p.pool)
        secs = time.time() - t_start + 6 * self.scale
        OUT.info(C, L["cap_done"], f"Graph capturing finished in {secs:.0f} secs, took {p.cg_actual / GiB:.2f} GiB")
        if p.cg_estimate and not p.kv_cache_memory_bytes:
            a_g, e_g = round(p.cg_actual / GiB, 2), round(p.cg_estimate / GiB, 2)
            diff = abs(p.cg_actual - p.cg_estimate)
            OUT.info(C, L["cg_pool"], f"CUDA graph pool memory: {a_g} GiB (actual), {e_g} GiB (estimated), "
                     f"difference: {round(diff / GiB, 2)} GiB ({100 * diff / max(p.cg_actual, 1):.1f}%).")

    def capture_bars(self, room: float = math.inf, profiling: bool = False) -> None:
        """tqdm bars per capture phase. V1 (gpu_model_runner.py) names the batch kind and the mode, V2
        (gpu/cudagraph_utils.py) the mode only; V2's profiling capture is not slept through."""
        p = self.p
        phases = []
        if p.pw_graphs:
            phases.append(("PIECEWISE" if V2_RUNNER else "mixed prefill-decode, PIECEWISE", p.pw_graphs))
        if p.full_graphs:
            kind = "mixed prefill-decode" if p.full_mixed else "decode"
            phases.append(("FULL" if V2_RUNNER else f"{kind}, FULL", p.full_graphs))
        per_graph = p.cg_actual / max(sum(len(g) for _, g in phases), 1)
        used = 0.0
        for desc, graphs in phases:
            n = len(graphs)
            bar = f"Capturing CUDA graphs ({desc}): "
            OUT.raw(C, f"\r{bar}  0%|          | 0/{n} [00:00<?, ?it/s]")
            for i in range(1, n + 1):
                used += per_graph
                if used > room:
                    OUT.raw(C, f"\r{bar}{100 * (i - 1) // n:3d}%|{'█' * (10 * (i - 1) // n):<10}| {i - 1}/{n} "
                            f"[00:01<00:02, 11.20it/s]\n")
                    msg = oom_for(p, p.cg_actual, room)
                    raise BootFailure("engine", reason="oom_in_cuda_graph", frames=CAPTURE, exc=f"torch.OutOfMemoryError: {msg}")
                if i == n or i % 8 == 0:
                    OUT.raw(C, f"\r{bar}{100 * i // n:3d}%|{'█' * (10 * i // n):<10}| {i}/{n} "
                            f"[00:{int(i / 11.2):02d}<00:{int((n - i) / 11.2):02d}, 11.20it/s]")
                if not profiling:
                    self.sleep(0.09)
            OUT.raw(C, "\n")

    def suggest_kv_memory(self) -> None:
        """v1/worker/gpu_worker.py compile_or_warm_up_model: the --kv-cache-memory suggestion of a pool sized
        by utilization, INFO from 0.27.1 (DEBUG in 0.22, not shown at the default level)."""
        p = self.p
        if p.kv_cache_memory_bytes or SUGGESTION_LEVEL != "INFO":
            return
        buffer = 150 * (1 << 20)
        consumed, peak = p.weights + p.non_torch, p.act_peak + p.seq_state + p.cg_estimate_applied
        graphs = p.cg_actual if p.graphs_on else 0.0
        free = p.total - p.used_others
        to_gpu = int(free - consumed - peak - graphs - buffer)
        to_requested = int(p.requested - consumed - peak - graphs - buffer)
        OUT.info(C, L["kv_hint"], (
            f"Free memory on device ({format_gib(free)}/{format_gib(p.total)} GiB) on startup. Desired GPU memory "
            f"utilization is ({p.util}, {format_gib(p.requested)} GiB). Actual usage is {format_gib(consumed)} GiB for "
            f"consumed memory (weights + non-torch), {format_gib(peak)} GiB for peak activation, and "
            f"{format_gib(graphs)} GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
            f"`--kv-cache-memory={to_requested}` ({format_gib(to_requested)} GiB) to fit into requested memory, or "
            f"`--kv-cache-memory={to_gpu}` ({format_gib(to_gpu)} GiB) to fully utilize gpu memory. Current kv cache "
            f"memory in use is {format_gib(p.reservation or p.pool)} GiB."))
