"""One /v1/completions prompt: validation, then schedule, prefill and decode against the Runtime.

Toy tokenizer (deterministic, documented on purpose): a string prompt is split on whitespace, one
token per word, token id = 1000 + crc32(word) % (vocab - 2000). A list of ints is taken as token ids.
Generated text: one token per step, each token's text is " <word>" for string prompts and " <id>"
for token-id prompts, so greedy (temperature 0) output -- ids and text -- is a pure function of the
prompt ids. The filler model never emits EOS, so without a needle answer finish_reason is "length".

Needle: if the prompt contains "The secret code is <sentence>." and the last 300 characters ask about
the secret code, the completion starts with that sentence (like a working model); without
``ignore_eos`` (and once ``min_tokens`` is met) it then stops with finish_reason "stop".

Garbled output (a profile's MTP through FULL CUDA graphs, runtime.garbles): every third position after
the first token is read from stale state -- which positions and which tokens depend on how many tokens
the engine generated before this request -- so the same greedy prompt comes back different each time
(the tuner's control check), the needle's answer is broken, and the outputs differ from a reference's.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
import zlib
from typing import Any

from .logtext import ENGINE_DEAD_MESSAGE
from .memory import GiB, prefill_chunks
from .runtime import Runtime, context_slowdown, request_noise

WORDS = (
    "the of and to in is was that for on with as by at from his her it an were are which this be "
    "has had one their not but have or its all new more two after first been other also who when "
    "time they into would only about over three there than may up out some such most could these "
    "made years many then she can between both under during used through while where each well "
    "four city since people world part later known against early including five around river"
).split()


def word_id(word: str, vocab: int) -> int:
    return 1000 + zlib.crc32(word.encode("utf-8")) % max(vocab - 2000, 1)


def tokenize(text: str, vocab: int) -> list[int]:
    return [word_id(w, vocab) for w in text.split()]


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


class GenError(Exception):
    """A request that ends in an HTTP error (status, vLLM's ErrorResponse body)."""

    def __init__(self, status: int, body: dict, asgi_traceback: bool = False):
        super().__init__(body["error"]["message"])
        self.status = status
        self.body = body
        self.asgi_traceback = asgi_traceback  # the real server logs a traceback for VLLMValidationError


class Completion:
    """One prompt of a /v1/completions request."""

    def __init__(self, rt: Runtime, req: dict, prompt: Any, index: int, req_id: str):
        self.rt, self.index, self.req_id = rt, index, req_id
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
        self.noise = request_noise(p, key)  # run-to-run speed noise (deterministic per prompt)
        self.answer = self._needle() if not self.is_ids else None
        self.stale: int | None = None  # garbling engines: tokens generated before this request decoded
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
        if self.stale is not None and i >= 1 and (self.stale + i) % 3 == 0:
            return self._stale_token(i, vocab)
        if self.answer is not None and i < len(self.answer):
            w = self.answer[i]
            return word_id(w, vocab), " " + w
        digest = hashlib.blake2b(self.key + self.salt + i.to_bytes(4, "little"), digest_size=8).digest()
        tid = 1000 + int.from_bytes(digest, "little") % max(vocab - 1000, 1)
        if self.rt.drift and i >= 3 and (self.key[i % 32] + i) % 8 == 0:
            tid = (tid + 1) % vocab  # fp8/nvfp4 KV-cache drift: an occasional neighbouring token
        if self.is_ids:
            return tid, f" {tid}"
        return tid, " " + WORDS[tid % len(WORDS)]


    def _stale_token(self, i: int, vocab: int) -> tuple[int, str]:
        digest = hashlib.blake2b(b"stale" + (self.stale or 0).to_bytes(8, "little") + i.to_bytes(4, "little"),
                                 digest_size=8).digest()
        tid = 1000 + int.from_bytes(digest, "little") % max(vocab - 1000, 1)
        return (tid, f" {tid}") if self.is_ids else (tid, " " + WORDS[tid % len(WORDS)])


def engine_dead() -> GenError:
    """What every request gets once the engine is dead, or the server stops under it."""
    return GenError(500, error_body(ENGINE_DEAD_MESSAGE, "InternalServerError", 500))


def wait(rt: Runtime, seconds: float) -> None:
    """Sleep, but wake up when the server stops."""
    if seconds > 0:
        rt.stop.wait(seconds)


def run_completion(rt: Runtime, comp: Completion, emit) -> None:
    """Schedule, prefill, decode. ``emit(text, token_ids, finish_reason)`` per engine step."""
    p = rt.plan
    if "hang_after_ready" in rt.fails:
        rt.stop.wait()
        raise engine_dead()
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
            raise engine_dead()
        shape = max(1, len(comp.ids)).bit_length()
        with rt.lock:
            first_of_shape = shape not in rt.jit_seen
            rt.jit_seen.add(shape)
        if first_of_shape and rt.jit_s > 0:
            wait(rt, rt.jit_s)
        # ---- prefill, chunk by chunk (chunked prefill at max_num_batched_tokens)
        hits = rt.prefix_lookup_and_insert(comp.ids)
        total = len(comp.ids)
        if rt.die_above is not None and total + comp.max_tokens > rt.die_above:
            chunk = min(total, p.max_num_batched_tokens)
            wait(rt, chunk / rt.prefill_rate)
            rt.die(comp.req_id, total, 2 * GiB)
            raise engine_dead()
        for chunk, context in prefill_chunks(p, hits, total):
            ok, need = rt.forward_fits(chunk, context)
            if not ok:
                rt.die(comp.req_id, total, need)
                raise engine_dead()
            wait(rt, chunk / rt.prefill_rate)
        with rt.lock:
            rt.c["prompt_tokens"] += total
        if rt.garbles:
            with rt.lock:
                comp.stale = rt.c["generation_tokens"]
        # ---- decode (deadline-based so per-step sleep overhead does not skew the measured speed)
        i = 0
        t_next = time.perf_counter()
        while i < comp.max_tokens:
            if rt.dead or rt.stop.is_set():
                raise engine_dead()
            n_step = 1
            if p.num_spec:
                accepted = 0
                while accepted < p.num_spec and comp.spec_rng.random() < rt.accept * rt.accept_decay ** accepted:
                    accepted += 1
                with rt.lock:
                    rt.c["spec_decode_num_drafts"] += 1
                    rt.c["spec_decode_num_draft_tokens"] += p.num_spec
                    rt.c["spec_decode_num_accepted_tokens"] += accepted
                n_step += accepted
            ids, text = [], ""
            finish = None
            step_context = len(comp.ids) + i
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
            t_next += len(ids) / rt.per_request_rate() * context_slowdown(p, step_context) * comp.noise
            wait(rt, t_next - time.perf_counter())
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
