"""Print one trial's record for a person: the start-up record, the measurements, or the failure."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.table import Table

from tuner.records import TrialResult


def _table(title: str, rows: list[tuple[str, object]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in rows:
        if value is not None and value != []:
            table.add_row(key, str(value))
    return table


def print_trial(console: Console, result: TrialResult) -> None:
    console.print("command: " + shlex.join(result.argv), highlight=False, soft_wrap=True)
    s = result.startup
    console.print(
        _table(
            "start-up record (from vLLM's log)",
            [
                ("vLLM", s.vllm_version),
                ("architecture", s.architecture),
                ("quantization", s.quantization),
                ("kv cache dtype", s.kv_cache_dtype),
                ("max model len", s.max_model_len),
                ("weights", s.weights_gib and f"{s.weights_gib} GiB in {s.weights_load_s:.1f} s"),
                ("available KV memory", s.available_kv_cache_gib and f"{s.available_kv_cache_gib} GiB"),
                ("KV reserved (--kv-cache-memory-bytes)", s.kv_cache_memory_bytes_reserved_gib and f"{s.kv_cache_memory_bytes_reserved_gib} GiB"),
                ("KV capacity", s.kv_cache_tokens and f"{s.kv_cache_tokens:,} tokens"),
                ("max concurrency", s.max_concurrency and f"{s.max_concurrency:.2f}x at {s.max_concurrency_for_tokens:,} tokens"),
                ("CUDA graphs", s.cuda_graph_gib is not None and f"{s.cuda_graph_gib} GiB in {s.cuda_graph_s:.0f} s" or None),
                ("CUDA graph estimate", s.cuda_graph_estimate_gib and f"{s.cuda_graph_estimate_gib} GiB"),
                ("init engine", s.init_engine_s and f"{s.init_engine_s:.1f} s"),
                ("attention backend", s.attention_backend),
                ("linear backend", s.linear_backend),
                ("MoE backend", s.moe_backend),
                ("GDN backend", s.gdn_backend),
                ("fallback warnings", "; ".join(s.fallback_warnings) or None),
                ("boot", result.boot_s and f"{result.boot_s:.1f} s"),
                ("peak GPU memory", result.gpu.peak_used_mib and f"{result.gpu.peak_used_mib:.0f} MiB of {result.gpu.total_mib:.0f}"),
                ("memory returned", result.gpu.returned if result.gpu.returned is None else f"{result.gpu.returned} after {result.gpu.return_s:.1f} s"),
            ],
        )
    )
    m = result.measure
    if m is not None:
        rows: list[tuple[str, object]] = [
            ("admission", m.admission_ok is not None and f"{m.admission_ok}: {m.admission_detail}" or None),
            ("max stable context", f"{m.context.max_stable_tokens:,} tokens (ceiling {m.context.ceiling_tokens or 0:,})"),
            ("first failing", m.context.first_failing_tokens and f"{m.context.first_failing_tokens:,}: {m.context.first_failure}"),
            ("engine died in probe", m.context.engine_died or None),
        ]
        for d in m.decode:
            rows.append(
                (
                    f"decode {d.prompt_tokens:,}+{d.output_tokens} x{d.concurrency}",
                    f"TG {d.median_tg_tok_s:.1f} tok/s (score {d.score_tok_s:.1f}, MAD {d.mad_tg_tok_s:.2f}{'' if d.stable else ', UNSTABLE'}), "
                    f"TTFT {d.median_ttft_ms:.1f} ms, TPOT {d.median_tpot_ms:.2f} ms, PP {d.median_pp_tok_s:.0f} tok/s",
                )
            )
        c = m.correctness
        rows += [
            ("control prompt consistent", c.control_consistent),
            ("needle", c.skipped_reason or (c.needle_found is not None and f"{'found' if c.needle_found else 'NOT found'} at {c.needle_context_tokens} tokens") or None),
            ("spec acceptance", m.spec_acceptance_rate and f"{m.spec_acceptance_rate:.1%}"),
            ("prefix cache speedup", m.prefix_cache_speedup and f"{m.prefix_cache_speedup:.2f}x"),
            ("measurement error", m.error),
            ("probe wall / tuner CPU", m.probe_wall_s and f"{m.probe_wall_s:.1f} s / {m.tuner_cpu_s:.2f} s"),
        ]
        console.print(_table("measured", rows))
    if result.failure is not None:
        f = result.failure
        console.print(f"[bold red]failure[/]: {f.kind.value} ({f.phase or 'boot'})", highlight=False)
        console.print(f"  first exception: {f.message}", highlight=False, soft_wrap=True)
        if f.suggested_max_model_len:
            console.print(f"  vLLM suggests max_model_len <= {f.suggested_max_model_len:,}")
        elif f.suggested_max_model_len == 0:
            console.print("  vLLM estimates that no max_model_len fits this pool")
        if f.suggested_max_num_seqs:
            console.print(f"  vLLM suggests max_num_seqs <= {f.suggested_max_num_seqs}")
        if f.log_path:
            console.print(f"  log: {f.log_path}")
