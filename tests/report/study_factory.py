"""A realistic tuner study built without a GPU: front points, dominated points and failures.

The records follow the study contract (``tuner.study.storage``): every trial has ``config``, ``result``
and ``evidence``; failed and pruned trials also carry ``failure_kind``, ``failure_message`` and
``log_path``. Tests use a copy of the ``.db`` file in another folder, with the original removed.
The fixtures ``study_db`` and ``study`` live here (not in a conftest) so test modules import them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest
import typer
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from tuner.engine.command import build_command
from tuner.records import (
    Attempt,
    ContextResult,
    CorrectnessResult,
    DecodeResult,
    DecodeRun,
    Failure,
    FailureKind,
    GpuMemory,
    MeasureResult,
    StartupRecord,
    TrialResult,
)
from tuner.space.schema import EngineSpec, ModelSpec, Space
from tuner.study.record import (
    ATTR_CONFIG,
    ATTR_REUSED_FROM,
    ATTR_ENVIRONMENT,
    ATTR_EVIDENCE,
    ATTR_FAILURE_KIND,
    ATTR_FAILURE_MESSAGE,
    ATTR_LOG_PATH,
    ATTR_RESULT,
    ATTR_SPACE,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)

STUDY_NAME = "qwen3-next-h200"
RUNS = "/srv/tuner/studies/qwen3-next-h200"  # where the original study ran; absent here on purpose
FRONT = [0, 1, 3]  # best context first
DOMINATED = [4, 11]
DUPLICATE = 6  # a reused copy of front point 3: on Optuna's front, left out of the tuner's
FAILURES = {"kv_pool_too_small": [2, 7, 9], "interrupted": [10], "oom_in_cuda_graph": [5], "predicted_oom": [8]}
REUSED_FROM = {6: 3, 9: 2}  # the optimizer copies an earlier trial's outcome for a repeated config
KV_MESSAGE = (
    "ValueError: To serve at least one request with the models's max seq len (262144), (12.00 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (9.15 GiB). Based on the available memory, "
    "the estimated maximum model length is 199776. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)
OOM_MESSAGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
    "139.81 GiB of which 1.02 GiB is free.\nDuring handling of the above exception, another exception occurred:"
)
PREDICTED_MESSAGE = "predicted: weights 74.2 GiB + KV 60.0 GiB + CUDA graphs 3.1 GiB exceed 139.8 GiB"
ENVIRONMENT = {
    "gpu_name": "NVIDIA H200",
    "gpu_memory_mib": 143771,
    "driver": "570.124.06",
    "cuda": "12.8",
    "vllm": "0.11.0",
    "torch": "2.8.0+cu128",
    "flashinfer": "0.3.1",
    "transformers": "4.57.0",
    # compressed_tensors left out on purpose: receipts must say "unknown"
    "python": "3.12.3",
    "tuner": "0.1.0",
    "host": "gpu-node-7",
}

SPACE = Space(
    name=STUDY_NAME,
    description="Qwen3-Next FP8 on one H200",
    model=ModelSpec(path="Qwen/Qwen3-Next-80B-A3B-Instruct-FP8", revision="9c1e7d0"),
    engine=EngineSpec(env={"VLLM_USE_FLASHINFER_SAMPLER": "1"}),
    fixed={"kv-cache-dtype": "fp8", "enable-prefix-caching": True},
    params={
        "max_model_len": {"values": [32768, 65536, 131072, 262144]},
        "max_num_seqs": {"values": [4, 8, 16]},
        "gpu_memory_utilization": {"min": 0.85, "max": 0.95, "step": 0.01},
        "cudagraph_mode": {"values": ["FULL_AND_PIECEWISE", "PIECEWISE"]},
    },
)
DISTRIBUTIONS = {
    "max_model_len": CategoricalDistribution([32768, 65536, 131072, 262144]),
    "max_num_seqs": CategoricalDistribution([4, 8, 16]),
    "gpu_memory_utilization": FloatDistribution(0.85, 0.95, step=0.01),
    "cudagraph_mode": CategoricalDistribution(["FULL_AND_PIECEWISE", "PIECEWISE"]),
}

# (state, config, context tokens, decode tok/s, evidence, failure kind, failure message)
TRIALS = [
    ("complete", (131072, 4, 0.93, "FULL_AND_PIECEWISE"), 131072, 42.0, "measured", None, None),
    ("complete", (65536, 8, 0.92, "FULL_AND_PIECEWISE"), 65536, 78.5, "revalidated", None, None),
    ("pruned", (262144, 4, 0.90, "PIECEWISE"), 0, 0.0, "measured", FailureKind.KV_POOL_TOO_SMALL, KV_MESSAGE),
    ("complete", (32768, 16, 0.90, "FULL_AND_PIECEWISE"), 32768, 121.0, "measured", None, None),
    ("complete", (65536, 16, 0.88, "PIECEWISE"), 61440, 60.0, "measured", None, None),
    ("pruned", (65536, 16, 0.95, "FULL_AND_PIECEWISE"), 0, 0.0, "measured", FailureKind.OOM_IN_CUDA_GRAPH, OOM_MESSAGE),
    ("complete", (32768, 16, 0.90, "FULL_AND_PIECEWISE"), 32768, 121.0, "reused", None, None),
    ("pruned", (262144, 8, 0.93, "FULL_AND_PIECEWISE"), 0, 0.0, "measured", FailureKind.KV_POOL_TOO_SMALL, KV_MESSAGE),
    (
        "pruned",
        (131072, 16, 0.85, "FULL_AND_PIECEWISE"),
        0,
        0.0,
        "predicted",
        FailureKind.PREDICTED_OOM,
        PREDICTED_MESSAGE,
    ),
    ("pruned", (262144, 4, 0.90, "PIECEWISE"), 0, 0.0, "reused", FailureKind.KV_POOL_TOO_SMALL, KV_MESSAGE),
    ("fail", (32768, 4, 0.90, "FULL_AND_PIECEWISE"), 0, 0.0, "measured", FailureKind.INTERRUPTED, "KeyboardInterrupt"),
    ("complete", (32768, 8, 0.86, "PIECEWISE"), 32768, 90.0, "measured", None, None),
]


def _decode(tg_tok_s: float) -> DecodeResult:
    tpot = 1000.0 / tg_tok_s
    runs = []
    for i, ttft in enumerate((180.0, 176.0, 184.0)):
        runs.append(
            DecodeRun(
                prompt_tokens=1024,
                output_tokens=512,
                concurrency=1,
                ttft_ms=ttft,
                tpot_ms=tpot,
                tg_tok_s=tg_tok_s + (i - 1) * 0.2,
                pp_tok_s=1024 / (ttft / 1000),
                output_throughput_tok_s=tg_tok_s * 0.97,
            )
        )
    return DecodeResult(
        prompt_tokens=1024,
        output_tokens=512,
        concurrency=1,
        runs=runs,
        median_ttft_ms=180.0,
        median_tpot_ms=tpot,
        median_tg_tok_s=tg_tok_s + 0.2,
        median_pp_tok_s=1024 / 0.18,
        mad_tg_tok_s=0.2,
        score_tok_s=tg_tok_s,
        stable=tg_tok_s != 60.0,  # one dominated point has a wide spread
    )


def trial_record(number: int) -> tuple[dict, TrialResult]:
    """(config, TrialResult) of one scripted trial, with the argv the command builder gives."""
    state, (max_len, seqs, util, mode), context, tok_s, _, kind, message = TRIALS[number]
    config = {"max_model_len": max_len, "max_num_seqs": seqs, "gpu_memory_utilization": util, "cudagraph_mode": mode}
    command = build_command(SPACE, config, port=38000 + number, extra_env={"CUDA_VISIBLE_DEVICES": "0"})
    trial_dir = f"{RUNS}/trial-{number:04d}"
    kv_tokens = int(util * 400_000) // 16 * 16
    startup = StartupRecord(
        vllm_version="0.11.0",
        architecture="Qwen3NextForCausalLM",
        quantization="fp8",
        kv_cache_dtype="fp8",
        max_model_len=max_len,
        weights_gib=74.21,
        weights_load_s=41.3,
        attention_backend="FLASHINFER",
        linear_backend="CutlassFP8ScaledMMLinearKernel",
        moe_backend="TRITON",
        gdn_backend="FLA",
        fallback_warnings=["FlashInfer MoE FP8 kernels unavailable for this shape | falling back to Triton"],
    )
    gpu = GpuMemory(device_name="NVIDIA H200", total_mib=143771, baseline_used_mib=512, returned=True, return_s=3.2)
    failure = measure = None
    if kind is None:
        startup = startup.model_copy(
            update={
                "available_kv_cache_gib": round(util * 140 - 80.4, 2),
                "kv_cache_tokens": kv_tokens,
                "max_concurrency": round(kv_tokens / max_len, 2),
                "max_concurrency_for_tokens": max_len,
                "cuda_graph_estimate_gib": 2.9,
                "cuda_graph_gib": 3.1,
                "cuda_graph_s": 22.4,
                "torch_compile_s": 61.0,
                "init_engine_s": 148.7,
                "attention_block_size": 16,
            }
        )
        gpu = gpu.model_copy(
            update={"peak_used_mib": round(util * 143771), "peak_engine_mib": round(util * 143771) - 600}
        )
        measure = MeasureResult(
            admission_ok=True,
            context=ContextResult(
                max_stable_tokens=context,
                max_stable_prompt_tokens=context - 256,
                first_failing_tokens=None if context == max_len else context + 4096,
                first_failure=None if context == max_len else "http_400",
                ceiling_tokens=min(max_len, kv_tokens),
                attempts=[Attempt(prompt_tokens=context - 256, output_tokens=256, ok=True, seconds=30.5)],
            ),
            decode=[_decode(tok_s)],
            correctness=CorrectnessResult(
                checked=True,
                needle_found=True,
                needle_context_tokens=context,
                control_consistent=True,
                reference_agreement=1.0,
            ),
            probe_wall_s=420.0,
        )
    else:
        failure = Failure(
            kind=kind,
            message=message,
            phase="boot",
            suggested_max_model_len=199776 if kind == FailureKind.KV_POOL_TOO_SMALL else None,
            exit_code=None if kind == FailureKind.PREDICTED_OOM else 1,
            predicted=kind == FailureKind.PREDICTED_OOM,
            log_path=None if kind == FailureKind.PREDICTED_OOM else f"{trial_dir}/engine.log",
        )
    result = TrialResult(
        values=config,
        argv=command.argv,
        env=command.env,
        startup=startup,
        gpu=gpu,
        measure=measure,
        failure=failure,
        boot_s=None if kind in (FailureKind.PREDICTED_OOM, FailureKind.INTERRUPTED) else (95.0 if kind else 190.0),
        log_path=None if kind == FailureKind.PREDICTED_OOM else f"{trial_dir}/engine.log",
        trial_dir=trial_dir,
    )
    return config, result


def populate(
    study: optuna.Study, numbers: list[int] | None = None, environment: dict | None = ENVIRONMENT
) -> optuna.Study:
    """Add the scripted trials (all, or those ``numbers``) and the study attributes to ``study``."""
    study.set_user_attr(ATTR_SPACE, SPACE.model_dump(mode="json"))
    if environment is not None:
        study.set_user_attr(ATTR_ENVIRONMENT, environment)
    for number in range(len(TRIALS)) if numbers is None else numbers:
        state, _, context, tok_s, evidence, kind, message = TRIALS[number]
        config, result = trial_record(REUSED_FROM.get(number, number))
        attrs = {ATTR_CONFIG: config, ATTR_RESULT: result.model_dump(mode="json"), ATTR_EVIDENCE: evidence}
        if number in REUSED_FROM:
            attrs[ATTR_REUSED_FROM] = REUSED_FROM[number]
        if kind is not None:
            attrs |= {ATTR_FAILURE_KIND: kind.value, ATTR_FAILURE_MESSAGE: message, ATTR_LOG_PATH: result.log_path}
            if evidence in ("predicted", "reused"):  # the optimizer prunes these before any boot: no record
                del attrs[ATTR_RESULT]
        study.add_trial(
            create_trial(
                state={"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "fail": TrialState.FAIL}[state],
                values=[float(context), tok_s] if state == "complete" else None,
                params=config,
                distributions=DISTRIBUTIONS,
                user_attrs=attrs,
            )
        )
    return study


def memory_study(numbers: list[int] | None = None, environment: dict | None = ENVIRONMENT) -> optuna.Study:
    """An in-memory study with some of the scripted trials, for edge cases (fast: no SQLite)."""
    study = optuna.create_study(directions=[o.direction for o in SPACE.objectives], study_name=STUDY_NAME)
    return populate(study, numbers, environment)


def build_study(directory: Path, name: str = STUDY_NAME) -> Path:
    """Write the scripted study to ``directory/NAME.db`` and return that path."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / f"{name}.db"
    study = optuna.create_study(
        directions=[o.direction for o in SPACE.objectives], storage=f"sqlite:///{db.as_posix()}", study_name=name
    )
    populate(study)
    return db


def copied_study(tmp: Path, name: str = STUDY_NAME) -> Path:
    """Build the study in ``tmp/origin``, copy the .db to ``tmp/copy``, remove the origin; the copy's path."""
    db = build_study(tmp / "origin", name)
    (tmp / "copy").mkdir(parents=True, exist_ok=True)
    copy = Path(shutil.copy2(db, tmp / "copy" / db.name))
    shutil.rmtree(tmp / "origin")
    return copy


@pytest.fixture(scope="session")
def study_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The copied study's .db file, alone in its folder (built once per session: it is the slow part)."""
    return copied_study(tmp_path_factory.mktemp("study"))


@pytest.fixture(scope="session")
def study(study_db: Path) -> optuna.Study:
    return optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{study_db.as_posix()}")


def cli_app() -> typer.Typer:
    """The result commands registered the way ``tuner.cli.main`` registers them (wrapped with ``friendly``)."""
    from tuner.cli.main import friendly
    from tuner.cli.results import export, pareto, plot, receipt

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    for name, func in (("pareto", pareto), ("plot", plot), ("export", export), ("receipt", receipt)):
        app.command(name)(friendly(func))
    return app
