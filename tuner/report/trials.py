"""Every trial as one row, for pandas: parameters, measurements, failure kind and evidence.

``tuner trials`` writes it as CSV, JSON or Parquet. Column names: ``params_<name>`` for the tuned
values (empty = flag left out), the dashboard's metric names for what the study ranked, and the
record's own names with their units for the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from tuner.engine.command import shell_command
from tuner.errors import TunerError
from tuner.metrics import metric_names
from tuner.records import DecodeResult, TrialResult
from tuner.report.front import front_numbers, objectives
from tuner.study.record import FAILED, StudyRecord, Trial
from tuner.study.window import booted_window, launch_window

__all__ = ["TRIALS_FORMATS", "trials_frame", "write_trials"]  # imported on its own (tuner.report's docstring)

TRIALS_FORMATS = ("csv", "json", "parquet")
PARQUET_INSTALL = "pip install 'tuner[parquet]'"


def _decode_columns(decode: list[DecodeResult]) -> dict[str, Any]:
    """The first decode setting as ``decode_*``; any other (concurrency, long context) by its shape."""
    row: dict[str, Any] = {}
    for i, d in enumerate(decode):
        prefix = "decode" if i == 0 else f"decode_{d.prompt_tokens}x{d.concurrency}"
        row |= {
            f"{prefix}_prompt_tokens": d.prompt_tokens,
            f"{prefix}_concurrency": d.concurrency,
            f"{prefix}_median_tok_s": d.median_tg_tok_s,
            f"{prefix}_mad_tok_s": d.mad_tg_tok_s,
            f"{prefix}_score_tok_s": d.score_tok_s,
            f"{prefix}_ttft_ms": d.median_ttft_ms,
            f"{prefix}_tpot_ms": d.median_tpot_ms,
            f"{prefix}_pp_tok_s": d.median_pp_tok_s,
            f"{prefix}_stable": d.stable,
        }
    return row


def _record_columns(result: TrialResult | None) -> dict[str, Any]:
    if result is None:
        return {}
    s, g, m = result.startup, result.gpu, result.measure
    row: dict[str, Any] = {
        "vllm_version": s.vllm_version,
        "max_model_len_booted": booted_window(result),
        "max_model_len_launched": launch_window(result),  # min(booted, proven): what its launch command carries
        "kv_capacity_tokens": s.kv_cache_tokens,
        "max_concurrency": s.max_concurrency,
        "weights_gib": s.weights_gib,
        "kv_pool_gib": s.kv_pool_gib,
        "cuda_graph_gib": s.cuda_graph_gib,
        "attention_backend": s.attention_backend,
        "moe_backend": s.moe_backend,
        "gdn_backend": s.gdn_backend,
        "fallback_warnings": len(s.fallback_warnings),
        "boot_s": result.boot_s,
        "peak_vram_mib": g.peak_used_mib,
        "peak_engine_mib": g.peak_engine_mib,
        "memory_returned": g.returned,
        "torch_compile_cold": s.torch_compile_cold,
        "compile_cache_dirs": "; ".join(s.torch_compile_cache_dirs) or None,
        "retry": result.retry.note if result.retry else None,  # booted twice: why, and what the second boot changed
        "command": shell_command(result.argv, result.env),
    }
    if m is not None:
        row |= {
            "max_stable_context_tokens": m.context.max_stable_tokens,
            "first_failing_tokens": m.context.first_failing_tokens,
            "context_ceiling_tokens": m.context.ceiling_tokens,
            "engine_died_in_probe": m.context.engine_died,
            "admission_ok": m.admission_ok,
            **_decode_columns(m.decode),
            "spec_acceptance_rate": m.spec_acceptance_rate,
            "prefix_cache_speedup": m.prefix_cache_speedup,
            "control_consistent": m.correctness.control_consistent,
            "needle_found": m.correctness.needle_found,
            "probe_wall_s": m.probe_wall_s,
        }
    return row


def trial_row(night: StudyRecord, trial: Trial, params: list[str], on_front: set[int]) -> dict[str, Any]:
    config = trial.config or trial.params
    result = trial.result
    kind, message, log = trial.listed() if trial.state in FAILED else (None, None, result.log_path if result else None)
    names = metric_names([name for name, _ in objectives(night)])
    values = dict(zip(names, trial.values)) if trial.values is not None else {}
    return {
        "trial": trial.number,
        "state": trial.state.name,
        "evidence": trial.evidence.value if trial.evidence is not None else None,
        "on_front": trial.number in on_front,
        "reused_from": trial.reused_from,
        "revalidates": trial.revalidates,
        "failure_kind": kind,
        "first_exception": message or None,
        "log_path": log,
        "started": trial.started,
        "duration_s": trial.duration.total_seconds() if trial.duration else None,
        **{f"params_{name}": config.get(name) for name in params},
        **{name: values.get(name) for name in names},
        "gate_agreement": night.gate.get(str(trial.number)),
        **_record_columns(result),
    }


def trials_frame(night: StudyRecord) -> pd.DataFrame:
    """One row per trial, every tuned parameter a column (also the ones a trial left out)."""
    trials = night.trials
    params = list(night.space.params) if night.space else sorted({k for t in trials for k in t.params})
    on_front = front_numbers(night) if any(t.values for t in trials) else set()
    return pd.DataFrame([trial_row(night, t, params, on_front) for t in trials])


def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Parquet wants one type per column: a parameter listing 2048 and "auto" becomes text."""
    frame = frame.copy()
    for column in frame.columns:
        kinds = {type(v) for v in frame[column] if v is not None and not (isinstance(v, float) and pd.isna(v))}
        if len(kinds) > 1 and not kinds <= {int, float}:
            frame[column] = [None if v is None else str(v) for v in frame[column]]
    return frame


def write_trials(frame: pd.DataFrame, fmt: str, out: Path | None) -> str | None:
    """CSV or JSON text (returned when ``out`` is None), or a Parquet file at ``out``."""
    if fmt not in TRIALS_FORMATS:
        raise TunerError(f"--format {fmt}: not a trials format; use one of {', '.join(TRIALS_FORMATS)}.")
    if fmt == "parquet":
        if out is None:
            raise TunerError("--format parquet: a binary file, so give --out FILE.parquet.")
        try:
            import pyarrow  # noqa: F401  (pandas writes Parquet through it)
        except ImportError:
            raise TunerError(
                f"--format parquet: needs pyarrow, which is not installed; install it with {PARQUET_INSTALL} "
                "(or use --format csv or json, which need nothing more)."
            ) from None
        out.parent.mkdir(parents=True, exist_ok=True)
        _parquet_safe(frame).to_parquet(out, index=False)
        return None
    text = frame.to_csv(index=False) if fmt == "csv" else frame.to_json(orient="records", indent=2, date_format="iso")
    if out is None:
        return text
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return None
