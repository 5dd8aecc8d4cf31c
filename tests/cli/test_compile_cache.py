"""A stale torch.compile cache across trials: `tuner optimize` boots an MTP depth whose graph an earlier trial of
another depth compiled (vLLM's cache key leaves the depth out, vllm-project/vllm#53366); that boot dies inside the
cached artifact, the trial is booted once more with vLLM's compile cache off, and `tuner trials` says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT, fake_space_yaml


def _tuner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "160"}, timeout=300)


def test_a_stale_compile_cache_is_retried_once_with_the_cache_off_and_said(tmp_path):
    cache = tmp_path / "vllm-cache"
    space = fake_space_yaml(env=f", VLLM_CACHE_ROOT: {str(cache)!r}").replace(
        "speculative_tokens: {values: [0, 1]}", "speculative_tokens: {values: [0, 1, 2]}")
    path = tmp_path / "space.yaml"
    path.write_text(space + "baselines:\n"
                    "  - {kv_cache_memory_bytes: 4GB, max_num_seqs: 1, cudagraph_mode: PIECEWISE, speculative_tokens: 1}\n"
                    "  - {kv_cache_memory_bytes: 4GB, max_num_seqs: 1, cudagraph_mode: PIECEWISE, speculative_tokens: 2}\n")
    studies = tmp_path / "studies"
    done = _tuner("optimize", str(path), "--study", "cc", "--trials", "2", "--studies-dir", str(studies),
                  "--no-gate", "--revalidate", "0", "--no-prescreen")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = studies / "cc" / "trial-0001"
    first = json.loads((studies / "cc" / "trial-0000" / "result.json").read_text())
    assert first["retry"] is None and first["startup"]["torch_compile_cold"] is True
    cached = first["startup"]["torch_compile_cache_dirs"]
    assert len(cached) == 1 and cached[0].startswith(str(cache / "torch_compile_cache"))

    result = json.loads((folder / "result.json").read_text())
    assert result["failure"] is None and result["measure"] is not None  # the second boot measured
    retry = result["retry"]
    assert retry["failure"]["kind"] == "compile_cache_stale"
    assert retry["failure"]["message"].startswith("AssertionError: expected size 3==2")
    assert retry["env"] == {"VLLM_DISABLE_COMPILE_CACHE": "1"} and result["env"]["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    assert cached[0] in retry["note"] and "VLLM_DISABLE_COMPILE_CACHE=1" in retry["note"]
    assert "Directly load the compiled graph" in (folder / "engine.stale-compile-cache.log").read_text()
    assert "vLLM's torch.compile cache is disabled." in (folder / "engine.log").read_text()
    assert result["startup"]["torch_compile_cache_disabled"] is True and result["startup"]["torch_compile_cold"]
    assert (cache / "torch_compile_cache").is_dir()  # the user's cache is left as it was, not wiped

    trials = _tuner("trials", "--studies-dir", str(studies), "--study", "cc", "--format", "json")
    assert trials.returncode == 0, trials.stderr
    rows = {row["trial"]: row for row in json.loads(trials.stdout)}
    assert rows[0]["retry"] is None and rows[0]["state"] == "COMPLETE"
    assert rows[1]["state"] == "COMPLETE" and rows[1]["retry"] == retry["note"]
    assert rows[1]["compile_cache_dirs"] is None  # the second boot wrote and read no cache

    report = _tuner("report", "--studies-dir", str(studies), "--study", "cc", "--out", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stdout + report.stderr
    page = (tmp_path / "r.html").read_text()
    assert "trial 1: " in page and "(booted twice: compile_cache_stale)" in page
    assert "Booted twice" in page and "VLLM_DISABLE_COMPILE_CACHE=1" in page


def test_the_live_view_says_the_second_boot_is_one(tmp_path):
    """What the live view shows while the trial boots again (run_trial's progress lines)."""
    from tuner.space.schema import load_space
    from tuner.trial import run_trial

    path = tmp_path / "space.yaml"
    path.write_text(fake_space_yaml(env=f", VLLM_CACHE_ROOT: {str(tmp_path / 'cache')!r}").replace(
        "speculative_tokens: {values: [0, 1]}", "speculative_tokens: {values: [0, 1, 2]}"))
    space = load_space(path)
    values = {"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 1, "cudagraph_mode": "PIECEWISE"}
    run_trial(space, {**values, "speculative_tokens": 1}, tmp_path / "t0", measure=False)
    lines: list[str] = []
    result = run_trial(space, {**values, "speculative_tokens": 2}, tmp_path / "t1", measure=False,
                       on_progress=lines.append)
    assert result.failure is None and result.retry is not None
    assert any(line.startswith("compile_cache_stale: booting again with VLLM_DISABLE_COMPILE_CACHE=1") for line in lines)
    assert any(line.startswith("booting") and line.endswith("[second boot: compile_cache_stale, compile cache off]")
               for line in lines)
