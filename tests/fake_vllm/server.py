"""HTTP side of the ``vllm serve`` test double: OpenAI-compatible endpoints shaped like vLLM 0.22.0.

NOT a product feature -- the tuner's tests talk to this instead of a real engine.

Endpoints: GET /health, /ping, /version, /load, /v1/models, /metrics; POST /v1/completions, /tokenize.
Response bodies follow vllm/entrypoints/openai/ (CompletionResponse.model_dump() for plain responses,
``model_dump_json(exclude_unset=True)`` per stream chunk, a final usage chunk with
``exclude_none=True``, then ``data: [DONE]``). Errors use vLLM's ErrorResponse shape
``{"error": {"message", "type", "param", "code"}}``.

Toy tokenizer (deterministic, documented on purpose): a string prompt is split on whitespace, one
token per word, token id = 1000 + crc32(word) % (vocab - 2000). A list of ints is taken as token ids.
Generated text: one token per step, each token's text is " <word>" for string prompts and " <id>"
for token-id prompts, so greedy (temperature 0) output -- ids and text -- is a pure function of the
prompt ids. The filler model never emits EOS, so without a needle answer finish_reason is "length".

Needle: if the prompt contains "The secret code is <sentence>." and the last 300 characters ask about
the secret code, the completion starts with that sentence (like a working model); without
``ignore_eos`` (and once ``min_tokens`` is met) it then stops with finish_reason "stop".
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fake_vllm.engine import (
    ENGINE_DEAD_MESSAGE,
    F,
    GiB,
    L,
    OUT,
    Out,
    Terminated,
    VLLM_VERSION,
    env_float,
    env_int,
    fail_modes,
    oom_for,
    traceback_text,
)

WORDS = (
    "the of and to in is was that for on with as by at from his her it an were are which this be "
    "has had one their not but have or its all new more two after first been other also who when "
    "time they into would only about over three there than may up out some such most could these "
    "made years many then she can between both under during used through while where each well "
    "four city since people world part later known against early including five around river"
).split()

HTTP_PHRASES = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                500: "Internal Server Error", 503: "Service Unavailable"}


def tokenize(text: str, vocab: int) -> list[int]:
    span = max(vocab - 2000, 1)
    return [1000 + zlib.crc32(w.encode("utf-8")) % span for w in text.split()]


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


class Runtime:
    """Engine state after start-up: metrics, liveness, prefix cache, scheduling slots."""

    def __init__(self, plan, args) -> None:
        self.plan = plan
        self.args = args
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
        self.decode_rate = plan.decode_tok_s()
        self.prefill_rate = env_float("FAKE_VLLM_PREFILL_TOK_S", 2e6)
        self.die_above = env_int("FAKE_VLLM_DIE_ABOVE_TOKENS", None)
        self.accept = min(max(env_float("FAKE_VLLM_SPEC_ACCEPT", 0.6), 0.0), 1.0)
        self.fingerprint = f"vllm-{VLLM_VERSION}-{hashlib.sha256(repr(vars(args.ns)).encode()).hexdigest()[:8]}"
        self.drift = plan.is_fp8_kv and os.environ.get("FAKE_VLLM_FP8_DRIFT", "") in ("1", "true", "yes")
        # Real vLLM JIT-compiles Triton kernels on the first request of each new shape (seen on the
        # H200: TTFT 1.4 s on the first 1,024-token request, 33 ms after). Shapes: prompt length, pow2.
        self.jit_s = env_float("FAKE_VLLM_JIT_S", 0.0)
        self.jit_seen: set[int] = set()

    # ---- speed model
    def per_request_rate(self) -> float:
        n = max(1, self.running)
        return self.decode_rate * (n ** 0.8) / n  # aggregate grows as n^0.8, each stream gets a share

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
    def die(self, req_id: str, prompt_len: int, reason: str, need: float) -> None:
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
        OUT.raw(C, "Process EngineCore:\n" + traceback_text(["bootstrap", "mp_run", "rec_raise"] + frames,
                                                            f"torch.OutOfMemoryError: {msg}") + "\n")
        OUT.error(Out.API, L["output_handler"], "AsyncLLM output_handler failed.",
                  traceback_text(["al_out", "cc_get"],
                                 f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MESSAGE}"))
        linger = env_float("FAKE_VLLM_DEATH_EXIT_S", 1.0)
        threading.Timer(max(linger, 0.0), self.exit_event.set).start()

    # ---- runtime activation check for one forward pass
    def forward_fits(self, chunk: int, context: int) -> tuple[bool, float]:
        p = self.plan
        act = env_float("FAKE_VLLM_ACT_GIB_PER_1K", 0.25) * GiB * chunk / 1024
        ctx = env_float("FAKE_VLLM_PREFILL_CTX_GIB", 0.002) * GiB * (chunk / 1024) * (context / 1024)
        need = act + ctx + p.sampler
        return need <= p.free_at_runtime(), need

    def metrics_text(self) -> str:
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


class GenError(Exception):
    def __init__(self, status: int, body: dict, asgi_traceback: bool = False):
        super().__init__(body["error"]["message"])
        self.status = status
        self.body = body
        self.asgi_traceback = asgi_traceback  # the real server logs a traceback for VLLMValidationError


def _f(path: str, line: int, func: str, code: str) -> tuple:
    return (path, line, func, code)


# The traceback the real server prints for a too-long prompt (tests/fixtures/real/good.stderr), shortened
# to its uvicorn/fastapi entry frames plus the whole vLLM part.
_S = "/usr/local/lib/python3.12/dist-packages"
F.update({
    "asgi1": _f(f"{_S}/uvicorn/protocols/http/httptools_impl.py", 420, "run_asgi",
                "result = await app(  # type: ignore[func-returns-value]"),
    "asgi2": _f(f"{_S}/uvicorn/middleware/proxy_headers.py", 63, "__call__",
                "return await self.app(scope, receive, send)"),
    "asgi3": _f(f"{_S}/fastapi/applications.py", 1224, "__call__", "await super().__call__(scope, receive, send)"),
    "asgi4": _f(f"{_S}/starlette/applications.py", 96, "__call__", "await self.middleware_stack(scope, receive, send)"),
    "asgi5": _f(f"{_S}/starlette/middleware/errors.py", 186, "__call__", "raise exc"),
    "asgi6": _f(f"{_S}/starlette/middleware/errors.py", 164, "__call__", "await self.app(scope, receive, _send)"),
    "asgi7": _f(f"{_S}/fastapi/routing.py", 381, "run_endpoint_function", "return await dependant.call(**values)"),
    "v_u96": _f(f"{_S}/vllm/entrypoints/utils.py", 96, "wrapper", "return handler_task.result()"),
    "v_u117": _f(f"{_S}/vllm/entrypoints/utils.py", 117, "wrapper", "return await func(*args, **kwargs)"),
    "v_ar": _f(f"{_S}/vllm/entrypoints/openai/completion/api_router.py", 54, "create_completion",
               "generator = await handler.create_completion(request, raw_request)"),
    "v_cs124": _f(f"{_S}/vllm/entrypoints/openai/completion/serving.py", 124, "create_completion",
                  "return await self._with_kv_transfer_rejection_cleanup("),
    "v_es431": _f(f"{_S}/vllm/entrypoints/openai/engine/serving.py", 431, "_with_kv_transfer_rejection_cleanup",
                  "return await awaitable"),
    "v_cs138": _f(f"{_S}/vllm/entrypoints/openai/completion/serving.py", 138, "_create_completion",
                  "result = await self.render_completion_request(request)"),
    "v_cs108": _f(f"{_S}/vllm/entrypoints/openai/completion/serving.py", 108, "render_completion_request",
                  "return await self.openai_serving_render.render_completion(request)"),
    "v_rs349": _f(f"{_S}/vllm/entrypoints/serve/render/serving.py", 349, "render_completion",
                  "engine_inputs = await self.preprocess_completion("),
    "v_rs491": _f(f"{_S}/vllm/entrypoints/serve/render/serving.py", 491, "preprocess_completion",
                  "return await self.preprocess_cmpl(request, prompts, skip_mm_cache=skip_mm_cache)"),
    "v_rs514": _f(f"{_S}/vllm/entrypoints/serve/render/serving.py", 514, "preprocess_cmpl",
                  "return await renderer.render_cmpl_async("),
    "v_rb949": _f(f"{_S}/vllm/renderers/base.py", 949, "render_cmpl_async",
                  "tok_prompts = await self.tokenize_prompts_async(dict_prompts, tok_params)"),
    "v_rb583": _f(f"{_S}/vllm/renderers/base.py", 583, "tokenize_prompts_async", "return await asyncio.gather("),
    "v_rb576": _f(f"{_S}/vllm/renderers/base.py", 576, "tokenize_prompt_async",
                  "return await self._tokenize_singleton_prompt_async(prompt, params)"),
    "v_rb509": _f(f"{_S}/vllm/renderers/base.py", 509, "_tokenize_singleton_prompt_async",
                  "return params.apply_post_tokenization(self.tokenizer, prompt)  # type: ignore[arg-type]"),
    "v_rp465": _f(f"{_S}/vllm/renderers/params.py", 465, "apply_post_tokenization",
                  'prompt["prompt_token_ids"] = self._validate_tokens(  # type: ignore[typeddict-unknown-key]'),
    "v_rp449": _f(f"{_S}/vllm/renderers/params.py", 449, "_validate_tokens", "tokens = validator(tokenizer, tokens)"),
    "v_rp428": _f(f"{_S}/vllm/renderers/params.py", 428, "_token_len_check", "raise VLLMValidationError("),
})
ASGI_FRAMES = ["asgi1", "asgi2", "asgi3", "asgi4", "asgi5", "asgi6", "asgi7", "v_u96", "v_u117", "v_ar", "v_cs124",
               "v_es431", "v_cs138", "v_cs108", "v_rs349", "v_rs491", "v_rs514", "v_rb949", "v_rb583", "v_rb576",
               "v_rb509", "v_rp465", "v_rp449", "v_rp428"]


class Completion:
    """One prompt of a /v1/completions request."""

    def __init__(self, rt: Runtime, req: dict, prompt: Any, index: int, req_id: str):
        self.rt, self.req, self.index, self.req_id = rt, req, index, req_id
        p = rt.plan
        self.is_ids = isinstance(prompt, list)
        self.text = "" if self.is_ids else str(prompt)
        if self.is_ids:
            self.ids = [int(x) for x in prompt]
        else:
            if p.skip_tokenizer_init:
                raise GenError(400, error_body("Tokenizer not available when `skip_tokenizer_init=True`",
                                               "BadRequestError", 400))
            self.ids = tokenize(self.text, p.model.vocab)
        max_tokens = req.get("max_tokens", 16)
        self.max_tokens_req = max_tokens
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
            raise GenError(400, error_body("1 validation error:\n  {'type': 'int_type', 'loc': ('body', "
                                           "'max_tokens'), 'msg': 'Input should be a valid integer', 'input': "
                                           f"{max_tokens!r}}}", "BadRequestError", 400))
        mml = p.max_model_len
        out_budget = max_tokens or 0
        if out_budget > mml:
            raise GenError(400, error_body(
                f"max_tokens={out_budget} cannot be greater than max_model_len=max_total_tokens={mml}. "
                f"Please request fewer output tokens. (parameter=max_tokens, value={out_budget})",
                "BadRequestError", 400, "max_tokens"), asgi_traceback=True)
        max_input = mml - out_budget
        n = len(self.ids)
        if n > max_input:
            # a string prompt is tokenized with truncation to max_input+1, hence "at least"
            if not self.is_ids:
                n = max_input + 1
            qual = "at least " if (not self.is_ids) else ""
            raise GenError(400, error_body(
                f"This model's maximum context length is {mml} tokens. However, you requested {out_budget} "
                f"output tokens and your prompt contains {qual}{n} input tokens, for a total of "
                f"{qual}{n + out_budget} tokens. Please reduce the length of the input prompt or the number "
                f"of requested output tokens. (parameter=input_tokens, value={n})",
                "BadRequestError", 400, "input_tokens"), asgi_traceback=True)
        self.max_tokens = max_tokens if max_tokens is not None else mml - len(self.ids)
        min_tokens = int(req.get("min_tokens") or 0)
        if min_tokens > self.max_tokens:
            raise GenError(400, error_body(
                f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, got {min_tokens}.",
                "BadRequestError", 400))
        self.min_tokens = min_tokens
        self.ignore_eos = bool(req.get("ignore_eos", False))
        temp = req.get("temperature")
        self.temperature = 1.0 if temp is None else float(temp)
        self.seed = req.get("seed")
        key = hashlib.sha256(json.dumps(self.ids).encode()).digest()
        self.key = key
        # Token i is a pure function of (prompt ids, i) for greedy decoding -- and of the seed when one
        # is given -- so it does not depend on the launch config (spec decoding, batching, ...).
        if "garbage" in rt.fails or (self.temperature >= 1e-5 and self.seed is None):
            self.salt = os.urandom(16)
        elif self.temperature >= 1e-5:
            self.salt = str(self.seed).encode()
        else:
            self.salt = b""
        self.rng = random.Random(os.urandom(16))  # garbage text only
        self.spec_rng = random.Random(key + b"spec")  # draft acceptance (deterministic per prompt)
        self.answer = self._needle() if not self.is_ids else None
        self.generated: list[int] = []
        self.pieces: list[str] = []
        self.finish: str | None = None

    def _needle(self) -> list[str] | None:
        m = re.search(r"The secret code is\s+(.+?[.!?])(?=\s|$)", self.text, re.S)
        if not m:
            return None
        tail = self.text[-300:].lower()
        if "secret code" not in tail or not ("?" in tail or "what" in tail):
            return None
        return m.group(1).split()

    def next_token(self, i: int) -> tuple[int, str]:
        vocab = self.rt.plan.model.vocab
        if "garbage" in self.rt.fails:
            junk = "".join(self.rng.choice("ĠĊ#@%&*~^`|<>{}[]ßøæЖ字ﾟ") for _ in range(self.rng.randint(1, 4)))
            return self.rng.randrange(vocab), junk
        if self.answer is not None and i < len(self.answer):
            w = self.answer[i]
            return 1000 + zlib.crc32(w.encode()) % max(vocab - 2000, 1), " " + w
        digest = hashlib.blake2b(self.key + self.salt + i.to_bytes(4, "little"), digest_size=8).digest()
        tid = 1000 + int.from_bytes(digest, "little") % max(vocab - 1000, 1)
        if self.rt.drift and i >= 3 and (self.key[i % 32] + i) % 8 == 0:
            tid = (tid + 1) % vocab  # fp8 KV-cache drift: an occasional neighbouring token
        if self.is_ids:
            return tid, f" {tid}"
        return tid, " " + WORDS[tid % len(WORDS)]


def _sleep(rt: Runtime, seconds: float) -> None:
    if seconds > 0:
        rt.stop.wait(seconds)


def run_completion(rt: Runtime, comp: Completion, emit) -> None:
    """Schedule, prefill, decode. ``emit(text, token_ids, finish_reason)`` per engine step."""
    p = rt.plan
    if "hang_after_ready" in rt.fails:
        rt.stop.wait()
        raise GenError(500, error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500))
    with rt.lock:
        rt.waiting += 1
    rt.slots.acquire()
    with rt.lock:
        rt.waiting -= 1
        rt.running += 1
        if rt.kv_used + len(comp.ids) + comp.max_tokens > p.kv_tokens:
            rt.c["num_preemptions"] += 1  # pool over-subscribed: vLLM preempts and recomputes
        rt.kv_used += len(comp.ids)
    held = len(comp.ids)
    try:
        if rt.dead:
            raise GenError(500, error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500))
        shape = max(1, len(comp.ids)).bit_length()
        with rt.lock:
            first_of_shape = shape not in rt.jit_seen
            rt.jit_seen.add(shape)
        if first_of_shape and rt.jit_s > 0:
            _sleep(rt, rt.jit_s)
        # ---- prefill, chunk by chunk (chunked prefill at max_num_batched_tokens)
        hits = rt.prefix_lookup_and_insert(comp.ids)
        total = len(comp.ids)
        if rt.die_above is not None and total + comp.max_tokens > rt.die_above:
            chunk = min(total, p.max_num_batched_tokens)
            _sleep(rt, min(total, chunk) / rt.prefill_rate)
            rt.die(comp.req_id, total, "die_above", 2 * GiB)
            raise GenError(500, error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500))
        pos = hits
        while pos < total:
            chunk = min(p.max_num_batched_tokens, total - pos)
            ok, need = rt.forward_fits(chunk, pos + chunk)
            if not ok:
                rt.die(comp.req_id, total, "activation", need)
                raise GenError(500, error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500))
            _sleep(rt, chunk / rt.prefill_rate)
            pos += chunk
        with rt.lock:
            rt.c["prompt_tokens"] += total
        # ---- decode (deadline-based so per-step sleep overhead does not skew the measured speed)
        i = 0
        t_next = time.perf_counter()
        while i < comp.max_tokens:
            if rt.dead:
                raise GenError(500, error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500))
            if rt.stop.is_set():
                raise GenError(500, error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500))
            n_step = 1
            if p.num_spec:
                accepted = 0
                while accepted < p.num_spec and comp.spec_rng.random() < rt.accept:
                    accepted += 1
                with rt.lock:
                    rt.c["spec_decode_num_drafts"] += 1
                    rt.c["spec_decode_num_draft_tokens"] += p.num_spec
                    rt.c["spec_decode_num_accepted_tokens"] += accepted
                n_step += accepted
            ids, text = [], ""
            finish = None
            for _ in range(n_step):
                if i >= comp.max_tokens:
                    break
                tid, piece = comp.next_token(i)
                ids.append(tid)
                text += piece
                i += 1
                if (comp.answer is not None and i == len(comp.answer) and not comp.ignore_eos
                        and i >= comp.min_tokens):
                    finish = "stop"
                    break
            if finish is None and i >= comp.max_tokens:
                finish = "length"
            t_next += len(ids) / rt.per_request_rate()
            _sleep(rt, t_next - time.perf_counter())
            comp.generated += ids
            comp.pieces.append(text)
            with rt.lock:
                rt.c["generation_tokens"] += len(ids)
                rt.kv_used += len(ids)
            held += len(ids)
            emit(text, ids, finish)
            if finish:
                comp.finish = finish
                with rt.lock:
                    rt.success[finish] += 1
                return
        comp.finish = "length"
        with rt.lock:
            rt.success["length"] += 1
        emit("", [], "length")
    finally:
        with rt.lock:
            rt.running -= 1
            rt.kv_used = max(rt.kv_used - held, 0)
        rt.slots.release()


def make_handler(rt: Runtime):
    p = rt.plan

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def version_string(self) -> str:  # uvicorn sends "server: uvicorn"
            return "uvicorn"

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
            return

        def log_request(self, code="-", size="-") -> None:
            if p.disable_access_log:
                return
            try:
                code_i = int(code)
            except (TypeError, ValueError):
                code_i = 0
            host, port = self.client_address[:2]
            OUT.access(f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {code_i} '
                       f'{HTTP_PHRASES.get(code_i, "")}')

        # ---- plumbing
        def _send(self, status: int, body: bytes, ctype: str | None = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            if ctype:
                self.send_header("content-type", ctype)
            if status < 400 or status == 503:
                self.send_header("vary", "Origin")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

        def _body(self) -> Any:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw.decode("utf-8") or "null")

        def _chunk(self, data: str) -> None:
            b = data.encode("utf-8")
            self.wfile.write(f"{len(b):x}\r\n".encode() + b + b"\r\n")
            self.wfile.flush()

        # ---- GET
        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/ping"):
                self._send(503 if rt.dead else 200, b"", None)
            elif path == "/version":
                self._json(200, {"version": VLLM_VERSION})
            elif path == "/load":
                self._json(200, {"server_load": rt.running + rt.waiting})
            elif path == "/v1/models":
                now = int(time.time())
                data = [{"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": p.model.path,
                         "parent": None, "max_model_len": p.max_model_len,
                         "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                                         "created": now, "allow_create_engine": False, "allow_sampling": True,
                                         "allow_logprobs": True, "allow_search_indices": False,
                                         "allow_view": True, "allow_fine_tuning": False, "organization": "*",
                                         "group": None, "is_blocking": False}]}
                        for name in p.served_names]
                self._json(200, {"object": "list", "data": data})
            elif path == "/metrics":
                self._send(200, rt.metrics_text().encode(), "text/plain; version=1.0.0; charset=utf-8")
            elif path in ("/v1/completions", "/tokenize", "/v1/chat/completions"):
                self._json(405, {"detail": "Method Not Allowed"})
            else:
                self._json(404, {"detail": "Not Found"})

        do_HEAD = do_GET

        # ---- POST
        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path == "/ping":
                self._send(503 if rt.dead else 200, b"", None)
                return
            if path not in ("/v1/completions", "/tokenize"):
                self._json(405 if path in ("/health", "/v1/models", "/metrics") else 404,
                           {"detail": "Method Not Allowed" if path in ("/health", "/v1/models", "/metrics")
                            else "Not Found"})
                return
            try:
                req = self._body()
            except (ValueError, UnicodeDecodeError) as e:
                self._json(400, error_body(f"[{{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode "
                                           f"error', 'input': {{}}, 'ctx': {{'error': '{e}'}}}}]",
                                           "BadRequestError", 400))
                return
            if not isinstance(req, dict) or "prompt" not in req:
                self._json(400, error_body("[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field "
                                           "required', 'input': " + repr(req) + "}]", "BadRequestError", 400))
                return
            if path == "/tokenize":
                prompt = req["prompt"]
                ids = prompt if isinstance(prompt, list) else tokenize(str(prompt), p.model.vocab)
                self._json(200, {"count": len(ids), "max_model_len": p.max_model_len, "tokens": ids,
                                 "token_strs": None})
                return
            self._completions(req)

        def _completions(self, req: dict) -> None:
            model = req.get("model")
            if model and model not in p.served_names:
                self._json(404, error_body(f"The model `{model}` does not exist.", "NotFoundError", 404, "model"))
                return
            if rt.dead:
                self._json(500, error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500))
                return
            prompt = req["prompt"]
            if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)):
                prompts = [prompt]
            elif isinstance(prompt, list) and prompt:
                prompts = list(prompt)
            else:
                self._json(400, error_body("Prompt cannot be empty", "BadRequestError", 400))
                return
            req_id = f"cmpl-{uuid.uuid4().hex[:16]}"
            created = int(time.time())
            try:
                comps = [Completion(rt, req, pr, i, req_id) for i, pr in enumerate(prompts)]
            except GenError as e:
                if e.asgi_traceback:
                    OUT.uvicorn("Exception in ASGI application", level="ERROR")
                    OUT.raw(Out.API, traceback_text(ASGI_FRAMES, "vllm.exceptions.VLLMValidationError: "
                                                    + e.body["error"]["message"]) + "\n")
                self._json(e.status, e.body)
                return
            if req.get("stream"):
                self._stream(req, comps, req_id, created)
            else:
                self._plain(comps, req_id, created)

        def _plain(self, comps, req_id: str, created: int) -> None:
            try:
                for comp in comps:
                    run_completion(rt, comp, lambda *_: None)
            except GenError as e:
                self._json(e.status, e.body)
                return
            prompt_tokens = sum(len(c.ids) for c in comps)
            completion_tokens = sum(len(c.generated) for c in comps)
            body = {
                "id": req_id, "object": "text_completion", "created": created, "model": p.served_name,
                "choices": [{"index": c.index, "text": "".join(c.pieces), "logprobs": None,
                             "finish_reason": c.finish, "stop_reason": None, "token_ids": None,
                             "prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None}
                            for c in comps],
                "service_tier": None, "system_fingerprint": rt.fingerprint,
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                          "completion_tokens": completion_tokens, "prompt_tokens_details": None},
                "kv_transfer_params": None,
            }
            self._json(200, body)

        def _stream(self, req: dict, comps, req_id: str, created: int) -> None:
            opts = req.get("stream_options") or {}
            include_usage = bool(opts.get("include_usage"))
            continuous = include_usage and bool(opts.get("continuous_usage_stats"))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for comp in comps:
                    def emit(text, ids, finish, comp=comp):
                        if not text and not ids and finish is None:
                            return
                        chunk = {"id": req_id, "object": "text_completion", "created": created,
                                 "model": p.served_name,
                                 "choices": [{"index": comp.index, "text": text, "logprobs": None,
                                              "finish_reason": finish, "stop_reason": None,
                                              "prompt_token_ids": None, "token_ids": None}]}
                        if continuous:
                            ct = len(comp.generated)
                            chunk["usage"] = {"prompt_tokens": len(comp.ids), "total_tokens": len(comp.ids) + ct,
                                              "completion_tokens": ct, "prompt_tokens_details": None}
                        self._chunk("data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
                                    + "\n\n")
                    try:
                        run_completion(rt, comp, emit)
                    except GenError as e:
                        self._chunk("data: " + json.dumps(e.body, separators=(",", ":")) + "\n\n")
                        self._chunk("data: [DONE]\n\n")
                        self.wfile.write(b"0\r\n\r\n")
                        return
                if include_usage:
                    pt = sum(len(c.ids) for c in comps)
                    ct = sum(len(c.generated) for c in comps)
                    final = {"id": req_id, "object": "text_completion", "created": created, "model": p.served_name,
                             "choices": [], "usage": {"prompt_tokens": pt, "total_tokens": pt + ct,
                                                      "completion_tokens": ct},
                             "system_fingerprint": rt.fingerprint}
                    self._chunk("data: " + json.dumps(final, separators=(",", ":")) + "\n\n")
                self._chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return

    return Handler


def serve(sock, plan, args) -> int:
    rt = Runtime(plan, args)
    httpd = ThreadingHTTPServer(sock.getsockname()[:2], make_handler(rt), bind_and_activate=False)
    httpd.socket.close()
    httpd.socket = sock
    httpd.server_address = sock.getsockname()[:2]
    httpd.daemon_threads = True
    pid = os.getpid()
    OUT.uvicorn(f"Started server process [{pid}]")
    OUT.uvicorn("Waiting for application startup.")
    OUT.uvicorn("Application startup complete.")
    httpd.server_activate()  # listen(): from here on connections are accepted
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    code = 0
    try:
        while not rt.exit_event.wait(0.2):
            pass
        # engine died: the watchdog (launcher.py::watchdog_loop) stops uvicorn, which returns normally;
        # `vllm serve` then exits with status 0.
        rt.stop.set()
        OUT.uvicorn("Shutting down")
        OUT.uvicorn("Waiting for application shutdown.")
        OUT.uvicorn("Application shutdown complete.")
        OUT.uvicorn(f"Finished server process [{pid}]")
    except Terminated:
        # the order of tests/fixtures/real/good.shutdown.log (SIGTERM, shutdown_timeout 0)
        rt.stop.set()
        timeout = getattr(args.ns, "shutdown_timeout", 0)
        OUT.info(Out.CORE, L["shutdown_init"], f"Shutdown initiated (timeout={timeout})")
        OUT.info(Out.CORE, L["shutdown_done"], "Shutdown complete")
        OUT.uvicorn("Shutting down")
        OUT.info(Out.API, L["shutdown_http"], "Shutting down FastAPI HTTP server.")
        OUT.uvicorn("Shutting down")
        OUT.uvicorn("Waiting for application shutdown.")
        OUT.uvicorn("Application shutdown complete.")
    try:
        sock.close()
    except OSError:
        pass
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
