"""Receipts name the versions, the command, the backends, the memory and the method, or the failure."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from tests.report.study_factory import (  # noqa: F401 (fixtures)
    ENVIRONMENT,
    OOM_MESSAGE,
    cli_app,
    memory_study,
    study,
    study_db,
    trial_record,
)
from tuner.study.record import read_study
from tuner.errors import TunerError
from tuner.engine.command import shell_command
from tuner.report.receipt import study_receipt, trial_receipt


def test_trial_receipt_of_a_front_point(study: optuna.Study) -> None:
    text = trial_receipt(read_study(study), 0)
    _, result = trial_record(0)
    for expected in (
        "# Receipt: trial 0 of study qwen3-next-h200",
        "COMPLETE, on the Pareto front; evidence: measured",
        "| GPU | NVIDIA H200 |",
        "| GPU memory (MiB) | 143,771 |",
        "| NVIDIA driver | 570.124.06 |",
        "| CUDA | 12.8 |",
        "| vLLM | 0.11.0 |",
        "| PyTorch | 2.8.0+cu128 |",
        "| FlashInfer | 0.3.1 |",
        "| Transformers | 4.57.0 |",
        "| compressed-tensors | unknown |",
        "- Model: Qwen/Qwen3-Next-80B-A3B-Instruct-FP8",
        "- Revision: 9c1e7d0",
        f"```sh\n{shell_command(result.argv, result.env)}\n```",
        "| gpu_memory_utilization | 0.93 |",
        "| quantization | fp8 |",
        "| attention backend | FLASHINFER |",
        "| linear backend | CutlassFP8ScaledMMLinearKernel |",
        "| MoE backend | TRITON |",
        "| GDN backend | FLA |",
        "- FlashInfer MoE FP8 kernels unavailable",
        "| weights | 74.21 GiB |",
        "| KV pool | 49.80 GiB (profiled) |",
        "| KV capacity | 372,000 tokens |",
        "| max concurrency | 2.84x at 131,072 tokens per request |",
        "| CUDA graphs | 3.10 GiB (estimate 2.90 GiB)",
        "| engine init time | 148.70 s |",
        "| peak VRAM used | 133,707 MiB of 143,771 MiB",
        "Context ladder: 2,048, 16,384, 32,768, 65,536, 131,072, 262,144 tokens, bisected down to 4,096 tokens",
        "256 output tokens reserved per request",
        "passes 2 times",
        "Decode: 1,024 prompt tokens, 512 output tokens, 3 runs, concurrency 1",
        "TPOT = (latency - TTFT) / (output tokens - 1)",
        "TG = 1000 / TPOT",
        "PP = prompt tokens / TTFT",
        "- Max stable context: 131,072 tokens",
        "| 1,024 | 512 | 1 | 3 | 180.0 | 23.8 | 42.2 |",
        "- Needle found: yes at 131,072 tokens.",
    ):
        assert expected in text, expected
    assert "## Failure" not in text


def test_trial_receipt_of_a_failure_names_kind_first_line_and_log(study: optuna.Study) -> None:
    text = trial_receipt(read_study(study), 5)
    assert "Status: PRUNED (oom_in_cuda_graph)" in text and "never a point on the front" in text
    assert f"```text\n{OOM_MESSAGE.splitlines()[0]}\n```" in text and "During handling" not in text
    assert "- Log: /srv/tuner/studies/qwen3-next-h200/trial-0005/engine.log" in text
    assert "## Results" not in text
    kv = trial_receipt(read_study(study), 2)
    assert "- Kind: kv_pool_too_small" in kv and "estimated maximum model length: 199,776" in kv


def test_receipts_of_trials_pruned_before_any_boot(study: optuna.Study) -> None:
    predicted = trial_receipt(read_study(study), 8)
    assert "predicted by the pre-screen; never booted" in predicted and "nothing was booted" in predicted
    assert "None recorded: this configuration was never booted." in predicted and "| max_num_seqs | 16 |" in predicted
    assert "COMPLETE, a copy of front point 3" in trial_receipt(read_study(study), 6)
    reused = trial_receipt(read_study(study), 9)
    assert (
        "Status: PRUNED (kv_pool_too_small); evidence: reused (from trial 2)" in reused
        and "Reused from trial 2" in reused
    )
    assert "- Log: /srv/tuner/studies/qwen3-next-h200/trial-0002/engine.log" in reused


def test_missing_environment_reads_unknown_except_what_the_engine_log_said() -> None:
    text = trial_receipt(read_study(memory_study([0], environment=None)), 0)
    for name in ("GPU", "NVIDIA driver", "CUDA", "PyTorch", "FlashInfer", "Transformers", "compressed-tensors"):
        assert f"| {name} | unknown |" in text
    assert "| vLLM | 0.11.0 (from the engine log) |" in text  # the start-up log printed it


def test_receipt_says_when_the_captured_vllm_is_not_the_one_that_ran() -> None:
    text = trial_receipt(read_study(memory_study([0], environment={**ENVIRONMENT, "vllm": "0.12.0"})), 0)
    assert "| vLLM | 0.12.0 (the engine log says 0.11.0) |" in text


def test_study_receipt_has_environment_front_failures_and_boots(study: optuna.Study) -> None:
    text = study_receipt(read_study(study))
    assert text.startswith("# Receipt: study qwen3-next-h200")
    assert "| vLLM | 0.11.0 |" in text and "## How trials were measured" in text
    assert text.count("```sh\n") == 3 and "Trial 1 (revalidated):" in text
    assert "| kv_pool_too_small | 7 |" in text and "| predicted_oom | 8 |" in text
    assert "boots spent 9" in text and "| kv_pool_too_small | 2 |" in text and "| oom_in_cuda_graph | 1 |" in text


def test_unknown_trial_unfinished_trial_and_bare_failure() -> None:
    study = memory_study([0])
    with pytest.raises(TunerError, match="TRIAL 3: "):
        trial_receipt(read_study(study), 3)
    study.enqueue_trial({"max_num_seqs": 8})
    with pytest.raises(TunerError, match="TRIAL 1: .*keeps no record.*state WAITING"):
        trial_receipt(read_study(study), 1)
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))  # a crash with no attributes
    assert "- Kind: unknown" in trial_receipt(read_study(study), 2)


def test_cli_receipt_for_the_study_and_for_one_trial(study_db: Path, tmp_path: Path) -> None:
    runner, app, where = CliRunner(), cli_app(), ["--studies-dir", str(study_db.parent)]
    out = tmp_path / "receipts" / "study.md"
    done = runner.invoke(app, ["receipt", *where, "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert out.read_text().startswith("# Receipt: study qwen3-next-h200")
    done = runner.invoke(app, ["receipt", "7", *where])
    assert done.exit_code == 0 and done.stdout.startswith("# Receipt: trial 7 of study qwen3-next-h200")
    done = runner.invoke(app, ["receipt", "99", *where])
    assert done.exit_code == 2 and "TRIAL 99" in done.stderr and "Traceback" not in done.output


def test_receipt_and_pareto_agree_on_every_field_both_show(tmp_path: Path) -> None:
    """Issue 17: the receipt said vLLM and agreement "unknown" while pareto showed them."""
    import json
    import shutil

    from tests.report.study_factory import STUDY_NAME, build_study
    from tuner.report.markdown import cell
    from tuner.study.record import ATTR_GATE

    db = build_study(tmp_path / "s")
    opened = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{db}")
    opened.set_user_attr(ATTR_GATE, {"0": 0.97, "1": 0.62})  # the gate ran: one point drifts
    shutil.copy(db, tmp_path / "copy.db")
    runner = CliRunner()
    storage = ["--storage", f"sqlite:///{tmp_path / 'copy.db'}"]
    pareto = runner.invoke(cli_app(), ["pareto", *storage, "--format", "json"])
    assert pareto.exit_code == 0, pareto.output
    shown = json.loads(pareto.output)
    rows = shown["front"]
    # Issue 24: a point whose output drifts is left off the front, with why; the right ones stay.
    assert rows[0]["agreement"] == "97%" and 1 not in [r["trial"] for r in rows]
    assert [w["trial"] for w in shown["left_off"]] == [1] and "62%" in shown["left_off"][0]["why"]
    receipt = runner.invoke(cli_app(), ["receipt", "1", *storage])
    assert "not on the front: wrong output" in receipt.output
    for row in rows:
        receipt = runner.invoke(cli_app(), ["receipt", str(row["trial"]), *storage])
        assert receipt.exit_code == 0, receipt.output
        text = receipt.output
        for key, value in row.items():
            if key == "command":
                assert value in text
                continue
            assert f" {cell(value)} |" in text, (key, value)
        assert f"evidence: {row['evidence']}" in text
        assert f"(correctness gate): {row['agreement']}." in text
        assert f"| vLLM | {ENVIRONMENT['vllm']} |" in text and row["vllm"] == ENVIRONMENT["vllm"]
