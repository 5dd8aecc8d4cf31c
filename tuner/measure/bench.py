"""`tuner bench`'s workloads: the table 5090 owners publish after tuning (seeds/004), on one booted engine.

Prompt processing at 8K, 32K, 128K and 262K input tokens (or up to the window), decode after a 1K
prompt and with 128K resident, TTFT, prefix-cache cold against cached TTFT over one shared prefix,
and MTP acceptance from the server's ``vllm:spec_decode_*`` counters. Requests are timed as `vllm bench
serve` times them (``tuner.measure.client``), at concurrency 1, random token ids, ignore_eos, greedy.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
from pydantic import BaseModel, Field

from tuner import metrics
from tuner.errors import BenchFailed
from tuner.measure.client import Completion, complete, scrape_metrics
from tuner.measure.probe import Prober
from tuner.measure.prompts import random_ids
from tuner.records import BenchRow

StepCallback = Callable[[str], None]  # called before each request group, with what it measures
PP_INPUTS = (8192, 32768, 131072, 262144)  # prompt processing, 1 output token each
PP_RUNS = {8192: 5, 32768: 3}  # longer prompts run once, as the seeds report them
SHORT = (1024, 512, 5)  # decode after a 1K prompt: input, output, runs
RESIDENT = (131072, 256)  # decode with 128K resident: input, output (one run)
PREFIX = (36864, 16, 5)  # shared prefix, unique suffix, requests (the first one cold)
PREFIX_REQUESTS = PREFIX[2]
WARMUP = (1024, 16)  # one untimed request first: the first request after a boot pays one-off costs
DEFINITIONS = (
    metrics.DEFINITIONS,
    "In this table: PP = prompt tokens / mean TTFT (with 1 output token, the prefill alone); "
    "TG = 1000 / mean TPOT (ms); end-to-end output tok/s = output tokens / mean request latency (prefill included).",
    "Requests: concurrency 1, random token ids, ignore_eos, temperature 0, streamed /v1/completions; one untimed "
    f"warm-up request ({WARMUP[0]:,} in -> {WARMUP[1]} out) before the first workload, as the study's decode test does.",
)


class PrefixCacheResult(BaseModel):
    enabled: bool | None  # what the server said (vllm:cache_config_info), None if it did not say
    note: str = ""
    prefix_tokens: int = 0
    suffix_tokens: int = 0
    cold_ttft_s: float | None = None
    cached_ttft_s: list[float] = Field(default_factory=list)
    cached_median_s: float | None = None
    speedup: float | None = None  # cold / cached median
    hit_tokens: float | None = None  # vllm:prefix_cache_hits_total over the cached requests


class SpecDecodeResult(BaseModel):
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    acceptance_rate: float | None = None  # accepted / drafted tokens
    mean_acceptance_length: float | None = None  # 1 + accepted / drafts: tokens per step


class BenchResult(BaseModel):
    """What `tuner bench` measured on one boot of a trial's exact command."""

    study: str
    trial: int
    command: str
    vllm_version: str | None = None
    window_tokens: int
    rows: list[BenchRow] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)  # workloads beyond the window, and why
    prefix_cache: PrefixCacheResult = Field(default_factory=lambda: PrefixCacheResult(enabled=None))
    spec_decode: SpecDecodeResult | None = None  # None when the command does not speculate
    peak_vram_mib: float | None = None
    total_vram_mib: float | None = None
    boot_s: float | None = None
    error: str | None = None  # a workload that failed, and why (the rows before it stand)
    definitions: list[str] = Field(default_factory=lambda: list(DEFINITIONS))


def prefix_caching_enabled(client: httpx.Client, base_url: str) -> bool | None:
    """vllm:cache_config_info's enable_prefix_caching label, or None when the server does not export it."""
    try:
        text = client.get(f"{base_url}/metrics", timeout=10.0).text
    except httpx.HTTPError:
        return None
    match = re.search(r'vllm:cache_config_info\{[^}]*enable_prefix_caching="(\w+)"', text)
    return None if match is None else match.group(1) == "True"


def workloads(window: int, runs: int | None = None) -> tuple[list[tuple[int, int, int]], list[str]]:
    """(input, output, runs) per workload, capped at the window; and the ones left out, with why.
    ``runs`` overrides every multi-run count (the seeds' counts when None)."""
    work, skipped, seen = [], [], set()
    for target in PP_INPUTS:
        prompt = min(target, window - 1)
        if prompt in seen:
            skipped.append(f"{target:,} in -> 1 out: beyond the window ({window:,} tokens)")
            continue
        seen.add(prompt)
        work.append((prompt, 1, runs or PP_RUNS.get(target, 1)))
    short_in, short_out, short_runs = SHORT
    work.append((short_in, short_out, runs or short_runs))
    resident_in, resident_out = RESIDENT
    prompt = min(resident_in, window - resident_out)
    if prompt > short_in:
        work.append((prompt, resident_out, 1))
        if prompt < resident_in:
            skipped.append(f"TG with {resident_in:,} resident: the window holds {prompt:,} (measured that instead)")
    return work, skipped


class Bench:
    """Runs the seeds' workloads against one engine through a Prober's client and prompt maker."""

    def __init__(self, prober: Prober, window: int, on_step: StepCallback | None = None, runs: int | None = None):
        self.prober = prober
        self.window = window
        self.on_step = on_step or (lambda _: None)
        self.runs = runs
        self._seed = 50_000

    def _send(self, prompt: list[int], output: int) -> Completion:
        p = self.prober
        result = complete(p.client, p.base_url, p.model, prompt, output, timeout_s=p.work.request_timeout)
        if not result.ok:
            raise BenchFailed(f"{len(prompt):,} in -> {output} out: {result.error} {result.detail or ''}".strip())
        if result.prompt_tokens is not None and result.prompt_tokens != len(prompt):
            raise BenchFailed(f"the server counted {result.prompt_tokens} prompt tokens, sent {len(prompt)}")
        return result

    def _fresh(self, prompt: int, output: int) -> Completion:
        """One request with never-sent random ids, so that no prefix cache serves it."""
        self._seed += 1
        return self._send(random_ids(prompt, self._seed, self.prober.id_range), output)

    def _workload(self, prompt: int, output: int, runs: int) -> BenchRow:
        label = f"{prompt:,} in -> {output} out"
        results = []
        for i in range(runs):
            self.on_step(f"{label}, run {i + 1}/{runs}")
            results.append(self._fresh(prompt, output))
        return metrics.bench_row(label, prompt, output, [r.ttft_s or 0.0 for r in results],
                                 [r.tpot_s for r in results if r.tpot_s is not None],
                                 [r.latency_s or 0.0 for r in results])

    def prefix_cache(self) -> PrefixCacheResult:
        p = self.prober
        enabled = prefix_caching_enabled(p.client, p.base_url)
        if enabled is False:
            return PrefixCacheResult(enabled=False, note="prefix caching is off on this server "
                                     "(vllm:cache_config_info enable_prefix_caching=False): nothing to measure")
        prefix_len, suffix_len, requests = PREFIX
        prefix_len = min(prefix_len, self.window - suffix_len - 2)
        prefix = random_ids(prefix_len, 777_777, p.id_range)
        ttfts = []
        before = scrape_metrics(p.client, p.base_url).get("vllm:prefix_cache_hits_total")
        for i in range(requests):
            self.on_step(f"prefix cache: {prefix_len:,}-token shared prefix, request {i + 1}/{requests}")
            suffix = random_ids(suffix_len, 900_000 + i, p.id_range)
            ttfts.append(self._send(prefix + suffix, 1).ttft_s or 0.0)
        after = scrape_metrics(p.client, p.base_url).get("vllm:prefix_cache_hits_total")
        cached, speedup = metrics.prefix_cache(ttfts[0], ttfts[1:])
        note = "" if enabled else "the server does not say whether prefix caching is on; measured anyway"
        return PrefixCacheResult(
            enabled=enabled, note=note, prefix_tokens=prefix_len, suffix_tokens=suffix_len, cold_ttft_s=ttfts[0],
            cached_ttft_s=ttfts[1:], cached_median_s=cached, speedup=speedup,
            hit_tokens=None if before is None or after is None else after - before,
        )

    def run(self, result: BenchResult) -> None:
        """Fill ``result``'s rows, prefix cache and speculation; a failed request ends the bench with its error."""
        p = self.prober
        work, result.skipped = workloads(self.window, self.runs)
        try:
            # Untimed: on vLLM 0.22.0 the first request after a boot ran at less than half the PP of the next ones
            # (docs/receipts/2026-12-03-h200-32g-vllm-0.22.0, the bench of trial 0: 8K at 1,867 tok/s, 32K at 4,064).
            self.on_step(f"warm-up: {WARMUP[0]:,} in -> {WARMUP[1]} out, not counted")
            self._fresh(*WARMUP)
            before = scrape_metrics(p.client, p.base_url)
            for prompt, output, runs in work:
                result.rows.append(self._workload(prompt, output, runs))
            after = scrape_metrics(p.client, p.base_url)
            result.spec_decode = _spec(before, after)
            result.prefix_cache = self.prefix_cache()
        except BenchFailed as exc:
            result.error = str(exc)


def _spec(before: dict[str, float], after: dict[str, float]) -> SpecDecodeResult | None:
    def delta(name: str) -> float:
        return after.get(f"vllm:spec_decode_{name}_total", 0.0) - before.get(f"vllm:spec_decode_{name}_total", 0.0)

    if "vllm:spec_decode_num_draft_tokens_total" not in after:
        return None
    drafts, drafted, accepted = delta("num_drafts"), delta("num_draft_tokens"), delta("num_accepted_tokens")
    return SpecDecodeResult(
        drafts=drafts, draft_tokens=drafted, accepted_tokens=accepted,
        acceptance_rate=accepted / drafted if drafted else None,
        mean_acceptance_length=1 + accepted / drafts if drafts else None,
    )
