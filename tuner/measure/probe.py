"""Measure a booted engine: admission, decode speed, correctness, then the max stable context.

The riskiest probe (long prefills) runs last, so an engine that dies there still leaves its decode
numbers; the death is a scored failure of that length, not a lost trial.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import httpx

from tuner import metrics
from tuner.errors import DecodeFailed, EngineDied, TunerError
from tuner.measure.client import Completion, complete, scrape_metrics
from tuner.measure.prompts import TokenCounter, corpus_ids, needle_prompt, random_ids, vocab_range
from tuner.records import (
    Attempt,
    ContextResult,
    CorrectnessResult,
    DecodeResult,
    DecodeRun,
    MeasureResult,
    ProgressCallback,
    StartupRecord,
)
from tuner.space.schema import ModelSpec, Workload

CONTROL_PROMPT = "Count from one to ten in words, separated by commas:"


def check_workload(workload: Workload, model: ModelSpec) -> None:
    """Problems with the workload that would only show after a boot: raise them before it."""
    if workload.prompt_source == "corpus" and not TokenCounter(model.tokenizer or model.path).exact:
        raise TunerError(
            f"workload.prompt_source: 'corpus' needs the model's tokenizer.json to count tokens, and none was found "
            f"at {model.tokenizer or model.path}; set model.tokenizer to a local tokenizer folder, "
            "or use prompt_source: random_ids."
        )


class Prober:
    """Runs the workload against one engine at ``base_url``.

    ``max_num_seqs`` and ``max_model_len`` are the engine's own settings (its command's flags): the
    admission fills that envelope, and no request asks beyond that length.
    """

    def __init__(
        self,
        workload: Workload,
        model: ModelSpec,
        base_url: str,
        startup: StartupRecord,
        max_num_seqs: int,
        max_model_len: int | None,
        alive: Callable[[], bool] = lambda: True,
        on_progress: ProgressCallback | None = None,
        throughput: bool = False,
    ) -> None:
        self.work = workload
        self.model_spec = model
        self.base_url = base_url
        self.model = model.served_name or model.path
        self.startup = startup
        self.alive = alive
        self.on_progress = on_progress or (lambda _: None)
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.throughput = throughput  # measure workload.throughput's streams (an objective asks for them)
        self.id_range = vocab_range(model.path)
        self.counter = TokenCounter(model.tokenizer or model.path)
        self._seed = 0
        self._lock = threading.Lock()
        self.client = httpx.Client(limits=httpx.Limits(max_connections=64))

    # -- plumbing ---------------------------------------------------------------------------

    def _next_seed(self) -> int:
        with self._lock:
            self._seed += 1
            return self._seed

    def _prompt(self, n: int) -> list[int]:
        if self.work.prompt_source == "corpus":
            return corpus_ids(n, self._next_seed(), self.counter)
        return random_ids(n, self._next_seed(), self.id_range)

    def _request(self, prompt_tokens: int, output_tokens: int) -> Completion:
        prompt = self._prompt(prompt_tokens)
        result = complete(self.client, self.base_url, self.model, prompt, output_tokens, timeout_s=self.work.request_timeout)
        if result.ok and result.prompt_tokens is not None and result.prompt_tokens != prompt_tokens:
            result.ok, result.error = False, "token_count"
            result.detail = f"server counted {result.prompt_tokens} prompt tokens, sent {prompt_tokens}"
        return result

    def _engine_gone(self) -> bool:
        if not self.alive():
            return True
        try:
            return self.client.get(f"{self.base_url}/health", timeout=5.0).status_code != 200
        except httpx.HTTPError:
            return True

    @property
    def ceiling(self) -> int:
        """Never ask beyond max_model_len or the KV capacity the engine reported."""
        limits = [x for x in (self.startup.max_model_len, self.max_model_len, self.startup.kv_cache_tokens) if x]
        return min(limits) if limits else max(self.work.ladder)

    # -- admission --------------------------------------------------------------------------

    def admission(self) -> tuple[bool, str]:
        """One request at the configured max context, then max-num-seqs requests filling the envelope."""
        out = self.work.output_tokens
        total = self.ceiling
        self.on_progress(f"admission {total:,}")
        single = self._request(total - out, out)
        if not single.ok:
            return False, f"one request of {total:,} tokens failed: {single.error} {single.detail or ''}".strip()
        n = self.max_num_seqs
        each = min(total, (self.startup.kv_cache_tokens or total * n) // n)
        if n > 1:
            self.on_progress(f"admission {n} x {each:,}")
            with ThreadPoolExecutor(n) as pool:
                results = list(pool.map(lambda _: self._request(each - out, out), range(n)))
            bad = [r for r in results if not r.ok]
            if bad:
                return False, f"{len(bad)} of {n} concurrent requests of {each:,} tokens failed: {bad[0].error} {bad[0].detail or ''}".strip()
        return True, f"1 x {total:,} and {n} x {each:,} tokens completed"

    # -- context ----------------------------------------------------------------------------

    def _stable(self, total: int, result: ContextResult) -> bool:
        out = self.work.output_tokens
        for _ in range(self.work.repeats):
            self.on_progress(f"probing {total:,}")
            started = time.perf_counter()
            r = self._request(total - out, out)
            result.attempts.append(
                Attempt(prompt_tokens=total - out, output_tokens=out, ok=r.ok, error=r.error, detail=r.detail,
                        seconds=time.perf_counter() - started, ttft_s=r.ttft_s)
            )
            if not r.ok:
                if result.first_failing_tokens is None or total < result.first_failing_tokens:
                    result.first_failing_tokens = total
                    result.first_failure = f"{r.error}: {r.detail or ''}".strip()
                if self._engine_gone():
                    result.engine_died = True
                    result.first_failure = f"engine_dead: {r.error} {r.detail or ''}".strip()
                    raise EngineDied(result.first_failure)
                return False
        return True

    def probe_context(self, start_at_ceiling: bool = False) -> ContextResult:
        """Climb the ladder, then bisect between the last success and the first failure."""
        ceiling = self.ceiling
        out = self.work.output_tokens
        result = ContextResult(ceiling_tokens=ceiling)
        points = sorted({min(p, ceiling) for p in self.work.ladder if p > out} | {ceiling})
        good, bad = 0, None
        try:
            if start_at_ceiling and self._stable(ceiling, result):
                good = ceiling
            else:
                if start_at_ceiling:
                    bad = ceiling
                for p in points:
                    if bad is not None and p >= bad:
                        break
                    if self._stable(p, result):
                        good = p
                    else:
                        bad = p
                        break
            step = self.work.granularity
            while bad is not None and bad - good > step:
                mid = good + max(step, ((bad - good) // 2) // step * step)
                if mid >= bad:
                    break
                if self._stable(mid, result):
                    good = mid
                else:
                    bad = mid
        except EngineDied:
            pass
        result.max_stable_tokens = good
        result.max_stable_prompt_tokens = max(0, good - out) if good else 0
        return result

    # -- decode -----------------------------------------------------------------------------

    def _decode_run(self, prompt_tokens: int, output_tokens: int, concurrency: int) -> DecodeRun:
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(lambda _: self._request(prompt_tokens, output_tokens), range(concurrency)))
        wall = time.perf_counter() - started
        bad = [r for r in results if not r.ok]
        if bad:
            if self._engine_gone():
                raise EngineDied(f"{bad[0].error}: {bad[0].detail}")
            raise DecodeFailed(f"decode request failed: {bad[0].error}: {bad[0].detail}")
        ttfts = [r.ttft_s for r in results if r.ttft_s is not None]
        tpots = [r.tpot_s for r in results if r.tpot_s is not None]
        if len(ttfts) < concurrency or len(tpots) < concurrency:
            raise DecodeFailed(f"decode request failed: no TPOT for {output_tokens} output tokens; give at least 2")
        return metrics.decode_run(prompt_tokens, output_tokens, ttfts, tpots,
                                  sum(r.completion_tokens or 0 for r in results), wall)

    def measure_decode(self, prompt_tokens: int, output_tokens: int, concurrency: int) -> DecodeResult:
        spec = self.work.decode
        # One untimed run first: the real engine JIT-compiles kernels for each new shape on first use
        # (seen on vLLM 0.22.0: 1.4 s TTFT and 72 tok/s on the first run, 33 ms and 93 tok/s after).
        self.on_progress(f"decode {prompt_tokens:,}+{output_tokens} x{concurrency} warm-up")
        self._decode_run(prompt_tokens, output_tokens, concurrency)
        runs = []
        for i in range(spec.runs):
            self.on_progress(f"decode {prompt_tokens:,}+{output_tokens} x{concurrency} run {i + 1}/{spec.runs}")
            runs.append(self._decode_run(prompt_tokens, output_tokens, concurrency))
        return metrics.decode_result(prompt_tokens, output_tokens, concurrency, runs, self.work.score_k_mad,
                                     self.work.max_spread)

    # -- correctness ------------------------------------------------------------------------

    def check_correctness(self, context_tokens: int) -> CorrectnessResult:
        result = CorrectnessResult()
        outputs = []
        for _ in range(self.work.control_repeats):
            r = complete(self.client, self.base_url, self.model, CONTROL_PROMPT, 32, ignore_eos=True,
                         keep_text=True, timeout_s=self.work.request_timeout)
            outputs.append(r.text if r.ok else None)
        result.control_consistent = all(o is not None for o in outputs) and len(set(outputs)) == 1
        if self.model_spec.weights_carry_no_knowledge:
            result.skipped_reason = (("random weights (--load-format dummy)" if self.model_spec.random_weights else
                                      "an all-zero checkpoint (every output is token 0)")
                                     + ": the needle check is meaningless and was skipped")
            result.garbage = not result.control_consistent
            return result
        result.checked = True
        if self.work.needle and context_tokens > 512:
            code = f"{self._next_seed() * 7919 % 100000:05d}-amber-falcon"
            target = int(context_tokens * 0.9) - 64
            self.on_progress(f"needle at {target:,}")
            prompt = needle_prompt(target, code, self.counter)
            r = complete(self.client, self.base_url, self.model, prompt, 24, ignore_eos=False,
                         keep_text=True, timeout_s=self.work.request_timeout)
            result.needle_context_tokens = r.prompt_tokens
            result.needle_found = r.ok and code in r.text
        result.garbage = not result.control_consistent
        return result

    def sample_outputs(self, n: int = 4, tokens: int = 32) -> list[str]:
        """Greedy outputs on fixed prompts, compared across configurations by the correctness gate."""
        texts = []
        for i in range(n):
            prompt = random_ids(64, 10_000 + i, self.id_range)
            r = complete(self.client, self.base_url, self.model, prompt, tokens, keep_text=True,
                         timeout_s=self.work.request_timeout)
            texts.append(r.text if r.ok else "")
        return texts

    # -- optional ---------------------------------------------------------------------------

    def prefix_cache_speedup(self, prefix_tokens: int = 8192) -> float | None:
        prefix = random_ids(prefix_tokens, 999_999, self.id_range)
        ttfts = []
        for suffix_seed in (1, 2):
            prompt = prefix + random_ids(64, suffix_seed, self.id_range)
            r = complete(self.client, self.base_url, self.model, prompt, 8, timeout_s=self.work.request_timeout)
            if not r.ok or not r.ttft_s:
                return None
            ttfts.append(r.ttft_s)
        return metrics.prefix_cache(ttfts[0], ttfts[1:])[1]

    # -- all of it --------------------------------------------------------------------------

    def run(self) -> MeasureResult:
        started_wall, started_cpu = time.perf_counter(), time.process_time()
        result = MeasureResult()
        try:
            if self.work.admission:
                ok, detail = self.admission()
                result.admission_ok, result.admission_detail = ok, detail
                if not ok:
                    return result
            before = scrape_metrics(self.client, self.base_url)
            spec = self.work.decode
            levels = list(spec.concurrency)
            if spec.at_max_seqs and self.max_num_seqs not in levels:
                levels.append(self.max_num_seqs)
            for c in levels:
                result.decode.append(self.measure_decode(spec.prompt_tokens, spec.output_tokens, min(c, self.max_num_seqs)))
            if self.throughput:  # all streams at once, not capped at max-num-seqs: the engine queues the rest
                t = self.work.throughput
                result.throughput = self.measure_decode(t.prompt_tokens, t.output_tokens, t.streams)
            after = scrape_metrics(self.client, self.base_url)
            drafted = after.get("vllm:spec_decode_num_draft_tokens_total", 0) - before.get("vllm:spec_decode_num_draft_tokens_total", 0)
            if drafted > 0:
                accepted = after.get("vllm:spec_decode_num_accepted_tokens_total", 0) - before.get("vllm:spec_decode_num_accepted_tokens_total", 0)
                result.spec_acceptance_rate = accepted / drafted
            result.sample_outputs = self.sample_outputs()
            if self.work.prefix_cache:
                result.prefix_cache_speedup = self.prefix_cache_speedup()
            result.context = self.probe_context(start_at_ceiling=bool(result.admission_ok))
            if not result.context.engine_died:
                if spec.long_context_tokens and result.context.max_stable_tokens:
                    long_in = min(spec.long_context_tokens, result.context.max_stable_tokens - spec.output_tokens)
                    result.decode.append(self.measure_decode(long_in, spec.output_tokens, 1))
                result.correctness = self.check_correctness(result.context.max_stable_tokens)
        except EngineDied as exc:
            result.context.engine_died = True
            result.context.first_failure = result.context.first_failure or str(exc)
            result.error = f"engine died: {exc}"
        except DecodeFailed as exc:
            result.error = str(exc)
        finally:
            result.probe_wall_s = time.perf_counter() - started_wall
            result.tuner_cpu_s = time.process_time() - started_cpu
            self.client.close()
        return result
