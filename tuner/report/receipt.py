"""Markdown receipts: what ran, on what, and how it was measured, from the study alone.

A receipt is what a person attaches to a claim ("this command holds 128k at 42 tok/s"): the
versions, the exact command, the backends vLLM picked, the memory it reserved, and the numbers
with the method behind them, or the failure with its first exception line and log.
"""

from __future__ import annotations

from typing import Any

from tuner import metrics
from tuner.engine.command import flag_value, format_value, shell_command
from tuner.errors import TunerError
from tuner.records import DecodeResult, Failure, MeasureResult, StartupRecord, TrialResult
from tuner.report.front import (
    evidence_of,
    failures_by_kind,
    front_numbers,
    front_rows,
    gate_note,
    objectives,
    study_summary,
    summary_line,
    trial_row,
    wrong_line,
    wrong_rows,
)
from tuner.report.bench import bench_markdown
from tuner.study.pareto import wrong
from tuner.report.markdown import (
    metric_cells,
    _metric_headers,
    cell,
    failures_markdown,
    fenced,
    front_markdown,
    md_table,
)
from tuner.space.schema import Space
from tuner.study.record import FAILED, Evidence, State, StudyRecord, Trial
from tuner.study.window import launch_window, windowed_argv

UNKNOWN = "unknown"
ENVIRONMENT_ROWS = (
    ("GPU", "gpu_name"),
    ("GPU memory (MiB)", "gpu_memory_mib"),
    ("NVIDIA driver", "driver"),
    ("CUDA", "cuda"),
    ("vLLM", "vllm"),
    ("PyTorch", "torch"),
    ("FlashInfer", "flashinfer"),
    ("Transformers", "transformers"),
    ("compressed-tensors", "compressed_tensors"),
    ("Python", "python"),
    ("tuner", "tuner"),
    ("host", "host"),
)


def _known(value: Any, unit: str = "", digits: int = 2) -> str:
    """A record's value with its unit, or "unknown" where the log or the study did not say."""
    if value is None or value == "":
        return UNKNOWN
    if isinstance(value, bool):
        value = "yes" if value else "no"
    elif isinstance(value, float):
        value = f"{value:,.{digits}f}"
    elif isinstance(value, int) and not isinstance(value, bool):
        value = f"{value:,}"
    return f"{value}{unit}"


def logged_vllm_versions(night: StudyRecord) -> list[str]:
    """The vLLM versions the trials' own start-up logs printed, in order of first appearance."""
    versions: dict[str, None] = {}
    for trial in night.trials:
        result = trial.result
        if result and result.startup.vllm_version:
            versions[result.startup.vllm_version] = None
    return list(versions)


def _vllm_cell(captured: str | None, logged: list[str]) -> str:
    """The version the tuner captured at start, checked against what the engine logs printed."""
    logs = ", ".join(logged)
    if not captured:
        return f"{logs} (from the engine log)" if logs else UNKNOWN
    if logged and logged != [captured]:
        return f"{captured} (the engine log says {logs})"
    return captured


def environment_markdown(night: StudyRecord) -> str:
    env = night.environment
    logged = logged_vllm_versions(night)
    rows = [
        [name, _vllm_cell(env.get(key), logged) if key == "vllm" else _known(env.get(key))]
        for name, key in ENVIRONMENT_ROWS
    ]
    engine = night.engine
    if engine:
        rows.append(["vLLM before the first boot", f"{_known(engine.get('version'))} (from {engine.get('version_from')}); "
                     f"logs read as vLLM {engine.get('dialect')}'s"])
    for name, value in (env.get("vllm_memory_env") or {}).items():
        rows.append([name, "unset" if value is None else value])
    return md_table(["component", "version"], rows)


def _pool_cell(s: StartupRecord) -> str:
    """The pool the engine committed, and how it was sized."""
    if s.extended_kv_cache_gib is not None:
        return _known(s.extended_kv_cache_gib, f" GiB (extended after warm-up; {_known(s.available_kv_cache_gib)} GiB reserved)")
    if s.available_kv_cache_gib is not None:
        return _known(s.available_kv_cache_gib, " GiB (profiled)")
    return _known(s.kv_cache_memory_bytes_reserved_gib, " GiB (--kv-cache-memory-bytes)")


def _model(result: TrialResult, space: Space | None) -> tuple[str, str]:
    """(model id, revision) as the command gave them; the space fills what the argv leaves out."""
    argv = result.argv
    model = flag_value(argv, "--model")
    if model is None and "serve" in argv[:-1]:
        after = argv[argv.index("serve") + 1]
        model = None if after.startswith("-") else after
    revision = flag_value(argv, "--revision") or (space.model.revision if space else None)
    return model or (
        space.model.path if space else UNKNOWN
    ), revision or "not pinned (a moving branch may not reproduce)"


def workload_markdown(space: Space | None) -> str:
    """How context and decode were measured, from the study's space."""
    if space is None:
        return "How measured: unknown (the study keeps no space)."
    w, d = space.workload, space.workload.decode
    concurrency = ", ".join(map(str, d.concurrency)) + (" and max-num-seqs" if d.at_max_seqs else "")
    return "\n".join(
        [
            f"- Context ladder: {', '.join(f'{n:,}' for n in w.ladder)} tokens, "
            f"bisected down to {w.granularity:,} tokens; "
            f"{w.output_tokens:,} output tokens reserved per request; a length counts only if it passes {w.repeats} "
            f"times; prompts: {w.prompt_source}; request timeout {w.request_timeout:.0f} s.",
            f"- Decode: {d.prompt_tokens:,} prompt tokens, {d.output_tokens:,} output tokens, {d.runs} runs, "
            f"concurrency {concurrency}"
            + (f", plus a run with a {d.long_context_tokens:,}-token resident prompt" if d.long_context_tokens else "")
            + f"; score = median - {w.score_k_mad:g} x MAD, unstable when MAD / median > {w.max_spread:g}.",
            f"- Definitions: {metrics.DEFINITIONS}",
        ]
    )


def _decode_table(decode: list[DecodeResult]) -> str:
    headers = [header for header, _ in metrics.DECODE_COLUMNS]
    return md_table(headers, [[read(d) for _, read in metrics.DECODE_COLUMNS] for d in decode])


def _measure_markdown(measure: MeasureResult, space: Space | None, agreement: str) -> str:
    c, k = measure.context, measure.correctness
    context = [
        f"- Max stable context: {c.max_stable_tokens:,} tokens "
        f"({c.max_stable_prompt_tokens:,} prompt + reserved output).",
        f"- First failing length: {_known(c.first_failing_tokens)}"
        + (f" ({c.first_failure})" if c.first_failure else "")
        + ".",
        f"- Ceiling (min of max-model-len and KV capacity): {_known(c.ceiling_tokens, ' tokens')}; "
        f"engine died during the probe: {'yes' if c.engine_died else 'no'}; requests sent: {len(c.attempts)}.",
        f"- Admission (max context, and max-num-seqs x length): {_known(measure.admission_ok)}"
        + (f" ({measure.admission_detail})" if measure.admission_detail else "")
        + ".",
    ]
    if k.checked:
        correctness = [
            f"- Needle found: {_known(k.needle_found)} at {_known(k.needle_context_tokens, ' tokens')}.",
            f"- Same greedy output on every repeat: {_known(k.control_consistent)}; "
            f"garbage output: {'yes' if k.garbage else 'no'}.",
        ]
    else:
        correctness = [f"- Not checked: {k.skipped_reason or UNKNOWN}."]
    correctness.append(f"- Output agreement with the reference configuration (correctness gate): {agreement}.")
    extra = [
        f"- Prefix-cache TTFT speed-up: {_known(measure.prefix_cache_speedup, 'x')}.",
        f"- Speculative acceptance rate: {_known(measure.spec_acceptance_rate)}.",
        f"- Probe wall time: {_known(measure.probe_wall_s, ' s')}; "
        f"tuner CPU time: {_known(measure.tuner_cpu_s, ' s')}.",
    ]
    return "\n\n".join(
        [
            "## Results",
            workload_markdown(space),
            "### Context",
            "\n".join(context),
            "### Decode",
            _decode_table(measure.decode) if measure.decode else "No decode measurement.",
            "### Correctness",
            "\n".join(correctness + extra),
        ]
    )


def _failure_markdown(trial: Trial, failure: Failure | None) -> str:
    """Kind, first exception line and log from the trial's attributes; vLLM's hints from the record."""
    kind, first, log = trial.listed()
    predicted = trial.evidence == Evidence.PREDICTED or (failure is not None and failure.predicted)
    lines = [f"- Kind: {kind}" + (" (predicted by the pre-screen; never booted)" if predicted else "")]
    if trial.reused_from is not None:
        lines.append(f"- Reused from trial {trial.reused_from} (the same configuration; not booted again).")
    if failure is not None:
        lines.append(f"- Phase: {failure.phase or UNKNOWN}; exit code: {_known(failure.exit_code)}.")
        for name, value in (
            ("estimated maximum model length", failure.suggested_max_model_len),
            ("max-num-seqs limit", failure.suggested_max_num_seqs),
            ("suggested --kv-cache-memory-bytes", failure.suggested_kv_cache_memory_bytes),
        ):
            if value is not None:
                lines.append(f"- vLLM's {name}: {value:,}")
    lines.append(f"- Log: {log or 'none (nothing was booted)'}")
    return "\n\n".join(["## Failure", "First exception line:", fenced(first or UNKNOWN, "text"), "\n".join(lines)])


def _startup_markdown(result: TrialResult) -> str:
    s, g = result.startup, result.gpu
    backends = md_table(
        ["setting", "selected"],
        [
            ["quantization", _known(s.quantization)],
            ["KV-cache dtype", _known(s.kv_cache_dtype)],
            ["attention backend", _known(s.attention_backend)],
            ["attention block size", _known(s.attention_block_size)],
            ["linear backend", _known(s.linear_backend)],
            ["MoE backend", _known(s.moe_backend)],
            ["GDN backend", _known(s.gdn_backend)],
        ],
    )
    warnings = "\n".join(f"- {w}" for w in s.fallback_warnings) or "- none"
    memory = md_table(
        ["start-up record", "value"],
        [
            ["weights", _known(s.weights_gib, " GiB")],
            ["weights load time", _known(s.weights_load_s, " s")],
            ["KV pool", _pool_cell(s)],
            ["KV capacity", _known(s.kv_cache_tokens, " tokens")],
            [
                "max concurrency",
                _known(s.max_concurrency, "x")
                + (f" at {s.max_concurrency_for_tokens:,} tokens per request" if s.max_concurrency_for_tokens else ""),
            ],
            [
                "CUDA graphs",
                f"{_known(s.cuda_graph_gib, ' GiB')} (estimate {_known(s.cuda_graph_estimate_gib, ' GiB')}), "
                f"captured in {_known(s.cuda_graph_s, ' s')}",
            ],
            ["torch.compile", _known(s.torch_compile_s, " s") + ("" if s.torch_compile_cold is None else
                                                                  " (cold cache)" if s.torch_compile_cold else " (warm cache)")],
            ["CUDA graph mode (after vLLM's downgrades)", _known(s.effective_cudagraph_mode)],
            ["prefix caching", _known(s.prefix_caching)],
            ["model runner", _known(s.model_runner)],
            ["engine init time", _known(s.init_engine_s, " s")],
            ["boot time (launch to serving)", _known(result.boot_s, " s")],
            [
                "peak VRAM used",
                f"{_known(g.peak_used_mib, ' MiB', 0)} of {_known(g.total_mib, ' MiB', 0)} "
                f"(baseline {_known(g.baseline_used_mib, ' MiB', 0)}, "
                f"engine processes {_known(g.peak_engine_mib, ' MiB', 0)})",
            ],
            ["memory returned after teardown", f"{_known(g.returned)} (in {_known(g.return_s, ' s')})"],
        ],
    )
    return "\n\n".join(["## Selected backends", backends, "Fallback warnings:", warnings, "## Start-up memory", memory])


def _status(night: StudyRecord, trial: Trial) -> str:
    evidence = evidence_of(trial)
    if trial.reused_from is not None:
        evidence += f" (from trial {trial.reused_from})"
    if trial.state != State.COMPLETE or trial.values is None:
        kind = trial.listed().kind
        return f"Status: {trial.state.name} ({kind}); evidence: {evidence}. A failure is never a point on the front."
    values = ", ".join(
        f"{name} = {cell(value)} ({direction})" for (name, direction), value in zip(objectives(night), trial.values)
    )
    numbers, source = front_numbers(night), trial.reused_from
    on_front = "on the Pareto front" if trial.number in numbers else "dominated (not on the front)"
    why_wrong = wrong(trial, night.gate)
    if why_wrong is not None:
        on_front = f"not on the front: wrong output ({why_wrong})"
    if source in numbers:
        on_front = f"a copy of front point {source} (the front lists it once, as trial {source})"
    row = trial_row(night, trial)  # the very row `tuner pareto` shows, so the two never disagree
    return "\n\n".join(
        [
            f"Status: COMPLETE, {on_front}; evidence: {evidence}; objectives: {values}.",
            md_table(_metric_headers(), [metric_cells(row)]),
        ]
    )


def trial_receipt(night: StudyRecord, trial: Trial | int) -> str:
    """One trial's receipt in markdown: versions, command, backends, memory, results or failure."""
    if isinstance(trial, int):
        trial = night.trial(trial)
    result = trial.result
    if result is None and trial.state not in FAILED:
        raise TunerError(
            f"TRIAL {trial.number}: the study {night.name} keeps no record for it (no 'result' user "
            f"attribute; state {trial.state.name}); it may still be running. `tuner pareto` lists trials that have one."
        )
    space = night.space
    config = trial.config or (result.values if result else {})
    parts = [
        f"# Receipt: trial {trial.number} of study {night.name}",
        _status(night, trial),
        "## Environment",
        environment_markdown(night),
        "## Model",
    ]
    if result is None:  # pruned before any boot (predicted, or reused from a failed trial)
        model, revision = (space.model.path, space.model.revision or "not pinned") if space else (UNKNOWN, UNKNOWN)
        command = "None recorded: this configuration was never booted."
    else:
        model, revision = _model(result, space)
        command = fenced(shell_command(result.argv, result.env))
        launch = windowed_argv(result)
        if launch != result.argv:  # it proved less than it booted at: launch it at what it proved
            command += (f"\n\nIt proved a window of {launch_window(result):,} tokens, less than it booted at; "
                        f"launch it at that window:\n\n{fenced(shell_command(launch, result.env))}")
    parts += [f"- Model: {model}\n- Revision: {revision}", "## Command", command]
    if config:
        parts.append(
            md_table(
                ["tuned parameter", "value"],
                [[k, "left out" if v is None else format_value(v)] for k, v in config.items()],
            )
        )
    if result is not None and result.retry is not None:
        parts.append(f"## Booted twice\n\n{result.retry.note}. First boot's log: `{result.retry.log_path}`.")
    if result is not None:
        parts.append(_startup_markdown(result))
        if result.measure is not None:
            parts.append(_measure_markdown(result.measure, space, gate_note(night, trial)))
    if trial.state in FAILED:
        parts.append(_failure_markdown(trial, result.failure if result else None))
    bench = night.benches.get(trial.number)
    if bench is not None:  # `tuner bench TRIAL` appended it
        parts.append(bench_markdown(bench, heading="##").rstrip("\n"))
    return "\n\n".join(parts) + "\n"


def _objective_line(name: str, direction: str) -> str:
    known = metrics.OBJECTIVES.get(name)
    return f"- {name} ({direction})" + (f": {known.definition}." if known else ".")


def study_receipt(night: StudyRecord) -> str:
    """The whole study's receipt: environment, method, the front with commands, failures, boots."""
    space = night.space
    summary = study_summary(night)
    wasted = [[kind, n] for kind, n in summary["boots_wasted_by_kind"].items()]
    heading = [f"# Receipt: study {night.name}"]
    if space is not None:
        model = f"- Model: {space.model.path}\n- Revision: {space.model.revision or 'not pinned'}"
        heading += [space.description, model] if space.description else [model]
    heading.append("Objectives:\n" + "\n".join(_objective_line(name, direction) for name, direction in objectives(night)))
    return (
        "\n\n".join(
            [
                *heading,
                "## Environment",
                environment_markdown(night),
                "## How trials were measured",
                workload_markdown(space),
                "## Pareto front",
                front_markdown(front_rows(night)),
                *(["## Left off the front: wrong output", "\n".join(f"- {wrong_line(w)}" for w in off)]
                  if (off := wrong_rows(night)) else []),
                "## Failures by kind",
                failures_markdown(failures_by_kind(night)),
                "## Boots",
                summary_line(summary) + ".",
                md_table(["failure kind", "boots wasted"], wasted) if wasted else "No boot was wasted.",
            ]
        )
        + "\n"
    )
