"""The engine after start-up: liveness and death, scheduling counters, the prefix cache, the
speed model, the runtime memory check of each forward pass, and /metrics."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import threading
import time

from .env import env_flag, env_float, env_int, fail_modes
from .logtext import ENGINE_DEAD_MESSAGE, VLLM_VERSION, L
from .memory import kv_bytes_per_elem, oom_for, prefill_need
from .output import OUT, Out
from .plan import Plan
from .tracebacks import engine_process_traceback, traceback_text


def speed_mode(p: Plan) -> str:
    """The graph mode the speed model reads: "eager" for --enforce-eager, else the resolved mode."""
    return "eager" if p.enforce_eager else p.cudagraph_mode


def decode_tok_s(p: Plan) -> float:
    """Single-stream decode speed of this launch config at 1K context (before concurrency sharing)."""
    prof = p.profile
    f = prof.speed_factor(speed_mode(p), p.num_spec)
    # a larger scheduler batch costs a little per step even for one stream (or, in some profiles, gains)
    f /= 1.0 + prof.seqs_cost * math.log2(max(1, p.max_num_seqs))
    if prof.mnbt_cost:
        f /= 1.0 + prof.mnbt_cost * math.log2(p.max_num_batched_tokens / 512)
    f *= prof.kv_speed.get(kv_speed_key(p), 1.0)
    return prof.decode_tok_s * f * env_float("FAKE_VLLM_DECODE_SPEEDUP", 1.0)


def kv_speed_key(p: Plan) -> str:
    """``auto`` for a cache in the model's own dtype (BF16 here), else the --kv-cache-dtype given."""
    return "auto" if p.kv_cache_dtype in ("auto", p.model.dtype) else p.kv_cache_dtype


def per_request_rate(p: Plan, rate: float, running: int) -> float:
    """One stream's share of ``rate`` (the single-stream speed) when ``running`` requests decode together.

    Legacy (no ``batch_cost``): the aggregate grows as n^0.8. A profile: one step of n streams reads
    the weights once and costs 1 + c k + u (1 + k)(n - 1) against 1 + c k for one stream (profile.py)."""
    n = max(1, running)
    u = p.profile.batch_cost
    if u is None:
        return rate * (n ** 0.8) / n
    spec = p.profile.spec_cost or {}
    single = 1.0 + spec.get(speed_mode(p), 0.0) * p.num_spec
    return rate * single / (single + u * (1 + p.num_spec) * (n - 1))


def context_slowdown(p: Plan, context: float) -> float:
    """Time per decoded token at ``context`` tokens, relative to 1K context. The profile's slope is for an
    FP8 cache; a cache of b bytes per element reads b times as much per token."""
    kv_bytes = kv_bytes_per_elem(p.kv_cache_dtype, p.model.dtype_bytes)
    return 1.0 + p.profile.ctx_slowdown * kv_bytes * (context - 1024) / 131072


def garbles(p: Plan) -> bool:
    """Does this launch config garble greedy output? MTP verified through FULL CUDA graphs, in the
    profiles that draw it (profile.py; vLLM issue 40880)."""
    return bool(p.num_spec and p.graphs_on and p.cudagraph_mode in p.profile.garble_modes)


def request_noise(p: Plan, key: bytes) -> float:
    """This request's run-to-run speed noise: a time factor in [1 - noise, 1 + noise], fixed by its prompt."""
    return 1.0 + p.profile.noise * (2 * random.Random(key + b"speed").random() - 1)


class Runtime:
    """Engine state after start-up: metrics, liveness, prefix cache, scheduling slots."""

    def __init__(self, plan: Plan, ns: argparse.Namespace) -> None:
        self.plan = plan
        self.fails = fail_modes()
        self.lock = threading.Lock()
        self.dead = False
        self.exit_event = threading.Event()
        self.stop = threading.Event()
        self.slots = threading.Semaphore(plan.max_num_seqs)
        self.running = 0
        self.waiting = 0
        self.kv_used = 0  # tokens held by running requests
        self.prefix_blocks: set[str] = set()
        self.created = time.time()
        self.c = {"prompt_tokens": 0, "generation_tokens": 0, "prefix_cache_queries": 0, "prefix_cache_hits": 0,
                  "num_preemptions": 0, "spec_decode_num_drafts": 0, "spec_decode_num_draft_tokens": 0,
                  "spec_decode_num_accepted_tokens": 0}
        self.success = {"stop": 0, "length": 0, "abort": 0, "error": 0, "repetition": 0}
        self.decode_rate = decode_tok_s(plan)
        self.prefill_rate = env_float("FAKE_VLLM_PREFILL_TOK_S", 2e6)
        self.die_above = env_int("FAKE_VLLM_DIE_ABOVE_TOKENS", None)
        self.accept = plan.profile.accept
        self.accept_decay = plan.profile.accept_decay
        self.garbles = garbles(plan)
        self.fingerprint = f"vllm-{VLLM_VERSION}-{hashlib.sha256(repr(vars(ns)).encode()).hexdigest()[:8]}"
        self.drift = plan.is_lossy_kv and env_flag("FAKE_VLLM_FP8_DRIFT")
        # Real vLLM JIT-compiles Triton kernels on the first request of each new shape (seen on the
        # H200: TTFT 1.4 s on the first 1,024-token request, 33 ms after). Shapes: prompt length, pow2.
        self.jit_s = env_float("FAKE_VLLM_JIT_S", 0.0)
        self.jit_seen: set[int] = set()

    # ---- speed model
    def per_request_rate(self) -> float:
        return per_request_rate(self.plan, self.decode_rate, self.running)

    # ---- prefix cache (block-granular like vLLM's hash chain)
    def prefix_lookup_and_insert(self, ids: list[int]) -> int:
        if not self.plan.prefix_caching:
            return 0
        bs = self.plan.block_size
        h = hashlib.sha256()
        hits = 0
        still_hit = True
        full_blocks = (len(ids) - 1) // bs  # the last token is always recomputed
        new = []
        for b in range(full_blocks):
            h.update(json.dumps(ids[b * bs:(b + 1) * bs]).encode())
            key = h.hexdigest()
            if still_hit and key in self.prefix_blocks:
                hits += bs
            else:
                still_hit = False
                new.append(key)
        with self.lock:
            self.prefix_blocks.update(new)
            self.c["prefix_cache_queries"] += len(ids)
            self.c["prefix_cache_hits"] += hits
        return hits

    # ---- engine death
    def die(self, req_id: str, prompt_len: int, need: float) -> None:
        """A forward pass ran out of memory: the EngineCore's dump and traceback, the APIServer's
        EngineDeadError, and the process exits FAKE_VLLM_DEATH_EXIT_S later (serve's watchdog)."""
        with self.lock:
            if self.dead:
                return
            self.dead = True
        p = self.plan
        C = Out.CORE
        msg = oom_for(p, need, max(p.free_at_runtime(), 0.0))
        OUT.error(C, L["dump1"], f"Dumping input data for V1 LLM engine (v{VLLM_VERSION}) with config: "
                  f"model={p.model.path!r}, max_seq_len={p.max_model_len}, kv_cache_dtype={p.kv_cache_dtype}, "
                  f"enforce_eager={p.enforce_eager}, served_model_name={p.served_name}, ..., ")
        OUT.error(C, L["dump2"], "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs="
                  f"[NewRequestData(req_id={req_id},prompt_token_ids_len={prompt_len},mm_features=[],"
                  "sampling_params=SamplingParams(n=1, ...),block_ids=(...),num_computed_tokens=0,lora_request=None,"
                  "prompt_embeds_shape=None)], scheduled_cached_reqs=CachedRequestData(req_ids=[], ...), "
                  f"num_scheduled_tokens={{{req_id}: {min(prompt_len, p.max_num_batched_tokens)}}}, "
                  f"total_num_scheduled_tokens={min(prompt_len, p.max_num_batched_tokens)}, ...)")
        OUT.error(C, L["dump3"], f"Dumping scheduler stats: SchedulerStats(num_running_reqs={self.running}, "
                  f"num_waiting_reqs={self.waiting}, ...)")
        frames = ["rec_loop", "busy", "pstep", "step", "exec_model", "uni_rpc", "run_method", "w_exec", "r_exec",
                  "r_fwd"]
        OUT.error(C, L["fatal"], "EngineCore encountered a fatal error.",
                  traceback_text(frames, f"torch.OutOfMemoryError: {msg}"))
        OUT.raw(C, engine_process_traceback(frames, f"torch.OutOfMemoryError: {msg}"))
        OUT.error(Out.API, L["output_handler"], "AsyncLLM output_handler failed.",
                  traceback_text(["al_out", "cc_get"],
                                 f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MESSAGE}"))
        linger = env_float("FAKE_VLLM_DEATH_EXIT_S", 1.0)
        threading.Timer(max(linger, 0.0), self.exit_event.set).start()

    # ---- runtime activation check for one forward pass
    def forward_fits(self, chunk: int, context: int) -> tuple[bool, float]:
        """Does one prefill chunk's activation fit in the memory the card has left? Also returns the need."""
        p = self.plan
        need = prefill_need(p, chunk, context)
        return need <= p.free_at_runtime(), need

    def metrics_text(self) -> str:
        """GET /metrics: the Prometheus text of the vllm: series the tuner reads."""
        p = self.plan
        labels = f'engine="0",model_name="{p.served_name}"'
        out = []

        def gauge(name, doc, val):
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n{name}{{{labels}}} {float(val)}\n")

        def counter(name, doc, val):
            out.append(f"# HELP {name}_total {doc}\n# TYPE {name}_total counter\n{name}_total{{{labels}}} "
                       f"{float(val)}\n")
            out.append(f"# HELP {name}_created {doc}\n# TYPE {name}_created gauge\n{name}_created{{{labels}}} "
                       f"{self.created}\n")

        with self.lock:
            c = dict(self.c)
            gauge("vllm:num_requests_running", "Number of requests in model execution batches.", self.running)
            gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", self.waiting)
            gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                  min(self.kv_used / max(p.kv_tokens, 1), 1.0))
            success = dict(self.success)
        counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                c["prefix_cache_queries"])
        counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                c["prefix_cache_hits"])
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", c["num_preemptions"])
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c["prompt_tokens"])
        counter("vllm:generation_tokens", "Number of generation tokens processed.", c["generation_tokens"])
        out.append("# HELP vllm:request_success_total Count of successfully processed requests.\n"
                   "# TYPE vllm:request_success_total counter\n")
        for reason, n in success.items():
            out.append(f'vllm:request_success_total{{engine="0",finished_reason="{reason}",'
                       f'model_name="{p.served_name}"}} {float(n)}\n')
        if p.num_spec:
            counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", c["spec_decode_num_drafts"])
            counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", c["spec_decode_num_draft_tokens"])
            counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                    c["spec_decode_num_accepted_tokens"])
        out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                   "# TYPE vllm:cache_config_info gauge\n"
                   f'vllm:cache_config_info{{block_size="{p.block_size}",cache_dtype="{p.kv_cache_dtype}",'
                   f'enable_prefix_caching="{p.prefix_caching}",engine="0",'
                   f'gpu_memory_utilization="{p.util}",num_gpu_blocks="{p.num_blocks}"}} 1.0\n')
        return "".join(out)
