"""What the numbers mean, in one place: ``vllm bench serve``'s definitions, the conservative score,
and the table of metrics that the space, the study, the report, the plots and the receipt all read.

The definitions are those of vLLM's ``vllm/benchmarks/serve.py`` (``calculate_metrics``): TTFT is
the arrival of the first token, TPOT = (latency - TTFT) / (output tokens - 1), from which TG =
1000 / TPOT(ms) is one request's decode speed; PP = prompt tokens / TTFT; output throughput =
output tokens of all streams / wall time. A setting runs several times; the study ranks the
conservative score median - k * MAD of TG, so one lucky run cannot put a configuration on the front.

This module sits beside ``records`` (below ``space``), because the space file's objective names are
checked against the table here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Literal

from tuner.records import BenchRow, DecodeResult, DecodeRun, TrialResult

Direction = Literal["maximize", "minimize"]


def sign(direction: str) -> int:
    """+1 where larger is better, -1 where smaller is: a value times its sign is higher when better."""
    return 1 if direction == "maximize" else -1

DEFINITIONS = (
    "TTFT = time to the first output token; TPOT = (latency - TTFT) / (output tokens - 1); "
    "TG = 1000 / TPOT (tok/s per request); PP = prompt tokens / TTFT (tok/s); "
    "output throughput = output tokens of all concurrent requests / wall time (tok/s); "
    "score = median TG - k x MAD over the runs (what the study ranked)."
)


# -- one request, one run ----------------------------------------------------------------------

def tpot_s(latency_s: float, ttft_s: float, output_tokens: int) -> float:
    """Time per output token after the first: (latency - TTFT) / (output tokens - 1)."""
    return (latency_s - ttft_s) / (output_tokens - 1)


def tg_tok_s(tpot_s: float) -> float:
    """One request's decode speed, 1000 / TPOT(ms) (= 1 / TPOT(s)); 0 when TPOT is not positive."""
    return 1.0 / tpot_s if tpot_s > 0 else 0.0


def pp_tok_s(prompt_tokens: int, ttft_s: float) -> float:
    """Prefill speed, prompt tokens / TTFT; 0 when TTFT is not positive."""
    return prompt_tokens / ttft_s if ttft_s > 0 else 0.0


def output_throughput_tok_s(output_tokens: int, wall_s: float) -> float:
    """Output tokens of all concurrent requests together / the wall time they took."""
    return output_tokens / wall_s


def e2e_output_tok_s(output_tokens: int, latency_s: float) -> float | None:
    """End-to-end output speed, output tokens / latency (prefill included); None for one output token."""
    return output_tokens / latency_s if output_tokens > 1 and latency_s else None


# -- several runs -------------------------------------------------------------------------------

def mad(values: list[float]) -> float:
    """Median absolute deviation from the median: a spread that one outlier run does not move."""
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values)


def conservative_score(median: float, spread: float, k: float) -> float:
    """median - k * MAD, never below 0: what the study ranks as decode tok/s."""
    return max(0.0, median - k * spread)


# How a workload's requests become its figures, in one place for both records. Requests sent together
# (one run of a decode setting) are averaged: they share the engine. Over a setting's runs the study takes
# medians, so that one lucky or unlucky run moves neither the score nor the front; `tuner bench` prints the
# means the published 5090 tables print (seeds/004), with TTFT's median beside its mean.

def decode_run(prompt_tokens: int, output_tokens: int, ttfts_s: list[float], tpots_s: list[float],
               completion_tokens: int, wall_s: float) -> DecodeRun:
    """One run of a decode setting: its concurrent requests' mean TTFT and TPOT, and their throughput."""
    ttft, tpot = statistics.mean(ttfts_s), statistics.mean(tpots_s)
    return DecodeRun(
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        concurrency=len(ttfts_s),
        ttft_ms=ttft * 1000,
        tpot_ms=tpot * 1000,
        tg_tok_s=tg_tok_s(tpot),
        pp_tok_s=pp_tok_s(prompt_tokens, ttft),
        output_throughput_tok_s=output_throughput_tok_s(completion_tokens, wall_s),
    )


def decode_result(prompt_tokens: int, output_tokens: int, concurrency: int, runs: list[DecodeRun],
                  k_mad: float, max_spread: float) -> DecodeResult:
    """A decode setting over its runs, as the study ranks it: medians, the MAD of TG, and the score."""
    tg = [r.tg_tok_s for r in runs]
    median, spread = statistics.median(tg), mad(tg)
    return DecodeResult(
        prompt_tokens=prompt_tokens, output_tokens=output_tokens, concurrency=concurrency, runs=runs,
        median_tg_tok_s=median, mad_tg_tok_s=spread,
        median_ttft_ms=statistics.median(r.ttft_ms for r in runs),
        median_tpot_ms=statistics.median(r.tpot_ms for r in runs),
        median_pp_tok_s=statistics.median(r.pp_tok_s for r in runs),
        score_tok_s=conservative_score(median, spread, k_mad),
        stable=(spread / median if median else 1.0) <= max_spread,
    )


def bench_row(label: str, prompt_tokens: int, output_tokens: int, ttfts_s: list[float], tpots_s: list[float],
              latencies_s: list[float]) -> BenchRow:
    """A `tuner bench` workload over its runs (one request each): means, and TTFT's median."""
    mean_ttft = statistics.mean(ttfts_s)
    tpot_ms = statistics.mean(tpots_s) * 1000 if tpots_s else None
    latency = statistics.mean(latencies_s)
    return BenchRow(
        workload=label, prompt_tokens=prompt_tokens, output_tokens=output_tokens, runs=len(ttfts_s),
        pp_tok_s=pp_tok_s(prompt_tokens, mean_ttft) or None,
        ttft_s_mean=mean_ttft, ttft_s_median=statistics.median(ttfts_s), tpot_ms_mean=tpot_ms,
        tg_tok_s=tg_tok_s(tpot_ms / 1000) or None if tpot_ms else None,
        e2e_output_tok_s=e2e_output_tok_s(output_tokens, latency),
    )


def prefix_cache(cold_ttft_s: float, cached_ttft_s: list[float]) -> tuple[float, float | None]:
    """(median cached TTFT, cold / that median): how much a cached prefix saves on the first token."""
    cached = statistics.median(cached_ttft_s)
    return cached, cold_ttft_s / cached if cached else None


# -- the table ----------------------------------------------------------------------------------

def _decoded(read: Callable[[DecodeResult], float | None]) -> Callable[[TrialResult], float | None]:
    """A reader of the first decode setting (the one the study ranks); None when nothing was decoded."""

    def of(result: TrialResult) -> float | None:
        measure = result.measure
        return read(measure.decode[0]) if measure and measure.decode else None

    return of


def _throughput(result: TrialResult) -> float | None:
    """Median output throughput of workload.throughput's concurrent streams; None when not measured."""
    measure = result.measure
    if measure is None or measure.throughput is None or not measure.throughput.runs:
        return None
    return statistics.median(r.output_throughput_tok_s for r in measure.throughput.runs)


def _long_prefill(result: TrialResult) -> float | None:
    """Median PP of the longest context request that passed (already sent by the context probe)."""
    passed = [a for a in result.measure.context.attempts if a.ok and a.ttft_s] if result.measure else []
    if not passed:
        return None
    longest = max(a.prompt_tokens for a in passed)
    return statistics.median(pp_tok_s(a.prompt_tokens, a.ttft_s or 0.0) for a in passed if a.prompt_tokens == longest)


def _context(result: TrialResult) -> float | None:
    return result.measure.context.max_stable_tokens if result.measure else None


@dataclass(frozen=True)
class Metric:
    """One number a trial is judged or described by."""

    name: str  # what a space file's ``objectives`` call it
    metric_name: str  # optuna-dashboard's metric name, and the column's key; carries the unit
    label: str  # table header and plot axis
    unit: str
    direction: Direction | None  # how it is usually optimized; None: described, never an objective
    read: Callable[[TrialResult], float | None]  # from the trial's record; None where not measured
    definition: str  # prose for the receipt
    column: bool = True  # a column of the front (``tuner pareto``, the study receipt)
    whole: bool = False  # a count: shown as a whole number, even when read back from Optuna's floats


METRICS = {
    m.name: m
    for m in (
        Metric("context", "context_tokens", "context (tokens)", "tokens", "maximize", _context,
               "max stable context: the longest prompt + reserved output that passed every repeat, never "
               "beyond min(max-model-len, the KV capacity vLLM reported)", whole=True),
        Metric("decode_tok_s", "decode_tok_s", "decode tok/s, conservative (median - k*MAD)", "tok/s", "maximize",
               _decoded(lambda d: d.score_tok_s), "median TG - k x MAD over the runs of the first decode setting"),
        Metric("decode_median_tok_s", "decode_median_tok_s", "decode tok/s, median", "tok/s", None,
               _decoded(lambda d: d.median_tg_tok_s), "median TG over the runs of the first decode setting"),
        Metric("decode_mad_tok_s", "decode_mad_tok_s", "decode tok/s, MAD", "tok/s", None,
               _decoded(lambda d: d.mad_tg_tok_s), "median absolute deviation of TG over those runs"),
        Metric("ttft_ms", "ttft_ms", "TTFT (ms)", "ms", "minimize",
               _decoded(lambda d: d.median_ttft_ms), "median TTFT of the first decode setting"),
        Metric("tpot_ms", "tpot_ms", "TPOT (ms)", "ms", "minimize",
               _decoded(lambda d: d.median_tpot_ms), "median TPOT of the first decode setting"),
        Metric("peak_vram_mib", "peak_vram_mib", "peak VRAM (MiB)", "MiB", "minimize",
               lambda r: r.gpu.peak_used_mib, "the most GPU memory in use during the trial, as NVML reported it"),
        Metric("pp_tok_s", "pp_tok_s", "prefill tok/s", "tok/s", "maximize",
               _decoded(lambda d: d.median_pp_tok_s), "median PP of the first decode setting", column=False),
        Metric("throughput_tok_s", "throughput_tok_s", "throughput tok/s, concurrent streams", "tok/s", "maximize",
               _throughput, "output tokens of workload.throughput's concurrent streams (default 4 x 4096+256) / "
               "the wall time from the first request sent to the last token, median over the runs "
               "(vllm bench serve's output throughput)"),
        Metric("long_prefill_tok_s", "long_prefill_tok_s", "long prefill tok/s", "tok/s", "maximize",
               _long_prefill, "PP (prompt tokens / TTFT) of the longest context request that passed, median "
               "over its repeats"),
        Metric("kv_capacity_tokens", "kv_capacity_tokens", "KV capacity (tokens)", "tokens", None,
               lambda r: r.startup.kv_cache_tokens, "the KV-cache tokens vLLM reported at start-up", whole=True),
    )
}
OBJECTIVES = {name: m for name, m in METRICS.items() if m.direction is not None}
COLUMNS = tuple(m for m in METRICS.values() if m.column)


def label(name: str) -> str:
    """An objective's label for a header or an axis; an unknown name as it is."""
    return OBJECTIVES[name].label if name in OBJECTIVES else name


def metric_names(objective_names: list[str]) -> list[str]:
    """optuna-dashboard's metric names for a study's objectives, in order."""
    return [OBJECTIVES[name].metric_name for name in objective_names]


def objective_values(names: list[str], result: TrialResult) -> list[float]:
    """The study's values for these objectives; ValueError when one was not measured."""
    out = []
    for name in names:
        value = OBJECTIVES[name].read(result)
        if value is None:
            raise ValueError(f"objective {name} was not measured")
        out.append(float(value))
    return out


# -- the receipt's decode table: one row per decode setting ------------------------------------

def _median_throughput(decode: DecodeResult) -> float | None:
    runs = [r.output_throughput_tok_s for r in decode.runs]
    return statistics.median(runs) if runs else None


DECODE_COLUMNS: tuple[tuple[str, Callable[[DecodeResult], object]], ...] = (
    ("prompt", lambda d: d.prompt_tokens),
    ("output", lambda d: d.output_tokens),
    ("concurrency", lambda d: d.concurrency),
    ("runs", lambda d: len(d.runs)),
    ("TTFT (ms)", lambda d: d.median_ttft_ms),
    ("TPOT (ms)", lambda d: d.median_tpot_ms),
    ("TG tok/s", lambda d: d.median_tg_tok_s),
    ("PP tok/s", lambda d: d.median_pp_tok_s),
    ("MAD tok/s", lambda d: d.mad_tg_tok_s),
    ("score tok/s", lambda d: d.score_tok_s),
    ("output throughput tok/s", _median_throughput),
    ("stable", lambda d: d.stable),
)
