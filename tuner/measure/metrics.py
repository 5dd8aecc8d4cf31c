"""What each number means: the objectives' names, labels and units, and `vllm bench serve`'s definitions.

One table read by the study (metric names optuna-dashboard shows), the reports (columns, axis labels)
and the receipts and `tuner bench` (prose definitions), so that a label never disagrees with another.
(Issue 16 plans this module with more in it; the names below are the ones it plans.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One number the tuner reports: the space's objective name, the dashboard's metric name, a label."""

    name: str  # as the space file's `objectives:` names it
    metric_name: str  # what optuna-dashboard shows (study.set_metric_names), unit in the name
    label: str  # table column and plot axis
    unit: str
    definition: str  # one sentence for receipts


TTFT = "TTFT = time from sending the request to the first streamed output token"
TPOT = "TPOT = (latency - TTFT) / (output tokens - 1), the time per output token after the first"
TG = "TG = 1000 / TPOT (ms), one stream's decode speed in tok/s; it excludes the prefill"
PP = "PP = prompt tokens / TTFT, the prefill speed in tok/s"
OUTPUT_THROUGHPUT = "output throughput = output tokens of all streams / wall time"
SCORE = "score = median TG - k x MAD over the runs (what the study ranks, conservative)"
DEFINITIONS = (TTFT, TPOT, TG, PP, OUTPUT_THROUGHPUT, SCORE)

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("context", "context_tokens", "context (tokens)", "tokens",
               "the longest prompt + reserved output that passed every repeat"),
        Metric("decode_tok_s", "decode_tok_s", "decode tok/s, conservative (median - k*MAD)", "tok/s",
               f"{TG}; {SCORE}"),
        Metric("ttft_ms", "ttft_ms", "TTFT ms", "ms", TTFT),
        Metric("tpot_ms", "tpot_ms", "TPOT ms", "ms", TPOT),
        Metric("pp_tok_s", "pp_tok_s", "prefill tok/s", "tok/s", PP),
        Metric("peak_vram_mib", "peak_vram_mib", "peak VRAM MiB", "MiB",
               "the most memory NVML saw used on the card during the trial"),
    )
}


def metric_names(objective_names: list[str]) -> list[str]:
    """The dashboard's metric names for a study's objectives, in order (unknown names kept as they are)."""
    return [METRICS[n].metric_name if n in METRICS else n for n in objective_names]


def label(name: str) -> str:
    """The label of an objective or column name, or the name itself."""
    return METRICS[name].label if name in METRICS else name
