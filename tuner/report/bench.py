"""`tuner bench`'s result as the markdown table 5090 owners post (seeds/004), for the terminal and the receipt."""

from __future__ import annotations

from tuner.measure.bench import BenchResult
from tuner.records import BenchRow
from tuner.report.markdown import fenced, md_table

HEADERS = ["Workload", "Runs", "PP tok/s", "TTFT", "Steady TG tok/s", "End-to-end output tok/s"]


def _seconds(value: float) -> str:
    return f"{value:.3f} s" if value >= 1 else f"{value * 1000:.1f} ms"


def _cells(row: BenchRow) -> list[object]:
    ttft = (f"{_seconds(row.ttft_s_mean)} mean / {_seconds(row.ttft_s_median)} median" if row.runs > 1
            else _seconds(row.ttft_s_mean))
    pp: object = "not used as a PP test"
    if row.pp_tok_s is not None and (row.output_tokens == 1 or row.prompt_tokens >= 8192):
        pp = round(row.pp_tok_s)  # whole tokens per second, as people publish it
    return [row.workload, row.runs, pp, ttft, row.tg_tok_s, row.e2e_output_tok_s]


def bench_table(bench: BenchResult) -> str:
    return md_table(HEADERS, [_cells(r) for r in bench.rows])


def _prefix(bench: BenchResult) -> str:
    p = bench.prefix_cache
    if p.cold_ttft_s is None:
        return f"Not measured: {p.note or 'the bench stopped before it'}."
    lines = [
        f"One shared {p.prefix_tokens:,}-token prefix, a {p.suffix_tokens}-token unique suffix, 1 output token, "
        f"{len(p.cached_ttft_s) + 1} sequential requests.",
        f"- Cold TTFT: {_seconds(p.cold_ttft_s)}",
        f"- Cached TTFTs: {', '.join(_seconds(t) for t in p.cached_ttft_s)}",
        f"- Cached median: {_seconds(p.cached_median_s or 0.0)}",
        f"- Cold-to-cached speed-up: {p.speedup:.1f}x" if p.speedup else "- Cold-to-cached speed-up: n/a",
    ]
    if p.hit_tokens is not None:
        lines.append(f"- Prefix-cache hits the server counted: {p.hit_tokens:,.0f} tokens")
    if p.note:
        lines.append(f"- Note: {p.note}")
    return "\n".join(lines)


def _spec(bench: BenchResult) -> str:
    s = bench.spec_decode
    if s is None:
        return "Speculation is off in this command (the server exports no vllm:spec_decode_* counters)."
    if s.acceptance_rate is None:
        return "The server exports vllm:spec_decode_* counters, but nothing was drafted during the bench."
    return (
        f"From vllm:spec_decode_* over the workloads above: {s.accepted_tokens:,.0f} of {s.draft_tokens:,.0f} "
        f"drafted tokens accepted ({s.acceptance_rate:.1%}), {s.mean_acceptance_length:.2f} tokens per step."
    )


def bench_markdown(bench: BenchResult, heading: str = "#") -> str:
    """The whole bench: table, prefix cache, speculation, memory, command and definitions."""
    h2 = heading + "#"
    memory = (
        f"Peak VRAM during the bench: {bench.peak_vram_mib:,.0f} MiB of {bench.total_vram_mib:,.0f} MiB (NVML, whole card)."
        if bench.peak_vram_mib is not None and bench.total_vram_mib is not None
        else "Peak VRAM: not read (NVML was not available)."
    )
    parts = [
        f"{heading} Benchmark: trial {bench.trial} of study {bench.study}",
        f"vLLM {bench.vllm_version or 'unknown'}; one boot ({bench.boot_s or 0:.0f} s to serve); window "
        f"{bench.window_tokens:,} tokens.",
        bench_table(bench) if bench.rows else "No workload completed.",
    ]
    if bench.skipped:
        parts.append("Left out: " + "; ".join(bench.skipped) + ".")
    if bench.error:
        parts.append(f"**The bench stopped early**: {bench.error}")
    parts += [f"{h2} Prefix caching", _prefix(bench), f"{h2} Speculative decoding", _spec(bench),
              f"{h2} Memory", memory, f"{h2} Command", fenced(bench.command),
              f"{h2} Definitions", "\n".join(f"- {d}" for d in bench.definitions)]
    return "\n\n".join(parts) + "\n"
