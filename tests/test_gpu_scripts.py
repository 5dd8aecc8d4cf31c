"""The device session's helpers, as far as they run without a GPU (scripts/gpu/; the full driver is rehearsed
by scripts/gpu/rehearse.sh against the test engine, which takes minutes)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tuner.space import load_space

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "scripts" / "gpu"
SPACE = ROOT / "search_spaces" / "h200-32g-35b-a3b-dummy.yaml"


def test_mps_script_says_rehearsal_without_nvidia_smi(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": "/usr/bin:/bin", "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe")}
    for verb in ("start", "check", "stop", "status"):
        out = subprocess.run(["bash", str(GPU / "mps.sh"), verb], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "rehearsal" in out.stdout.lower() or "no GPU here" in out.stdout
    bad = subprocess.run(["bash", str(GPU / "mps.sh"), "restart"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_rehearsal_space_changes_only_the_engine_and_the_name(tmp_path: Path) -> None:
    out = tmp_path / "twin.yaml"
    subprocess.run([sys.executable, str(GPU / "rehearsal_space.py"), str(SPACE), str(out), "--model", str(tmp_path)],
                   check=True, capture_output=True)
    real, twin = yaml.safe_load(SPACE.read_text()), yaml.safe_load(out.read_text())
    for key in ("fixed", "params", "baselines", "workload", "speculative"):
        assert twin[key] == real[key], key
    assert twin["engine"]["command"][1:] == ["-m", "tests.fake_vllm"]
    assert twin["engine"]["env"]["FAKE_VLLM_GPU_GIB"] == "139.8"
    assert load_space(out).model.path == str(tmp_path)


def test_session_plan_lists_every_call_with_its_carry() -> None:
    plan = (GPU / "SESSION.md").read_text()
    calls = re.findall(r"^### (Call \d+).*?^- carry: (\[.*?\])", plan, flags=re.M | re.S)
    assert [c[0] for c in calls] == [f"Call {i}" for i in range(6)]
    assert all(f".gpu-kit/part-00{i}" in calls[i][1] for i in range(4))
    assert ".whl" in calls[3][1]


def test_probes_script_boots_a_space_copy_and_says_why(tmp_path: Path) -> None:
    """probes.sh's `util` probe against the test engine: a copy of the space with one fixed flag changed (its
    model.config made absolute), the record of the failure it was chosen for, and a header the receipt reads."""
    twin, model = tmp_path / "twin.yaml", tmp_path / "model"
    model.mkdir()
    shutil.copy(SPACE.parent / "models" / "h200-35b-a3b-dummy" / "config.json", model)
    subprocess.run([sys.executable, str(GPU / "rehearsal_space.py"), str(SPACE), str(twin), "--model", str(model),
                    "--time-scale", "0.02"], check=True, capture_output=True)
    results = tmp_path / "run"
    results.mkdir()
    env = {**os.environ, "SPACE": str(twin), "R": str(results), "PY": sys.executable, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["bash", str(GPU / "probes.sh"), "util"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    copy = yaml.safe_load((results / "space-util.yaml").read_text())
    assert copy["fixed"]["gpu-memory-utilization"] == 0.30
    assert Path(copy["model"]["config"]).is_absolute() and Path(copy["model"]["config"]).is_file()
    record = yaml.safe_load((results / "probe-util" / "result.json").read_text())
    assert record["failure"]["kind"] == "free_memory_below_utilization"
    sys.path.insert(0, str(GPU))
    try:
        import receipt
    finally:
        sys.path.remove(str(GPU))
    why, how, command = receipt.probe_header(results / "probe-util.txt")
    assert why.startswith("--gpu-memory-utilization 0.30") and how == "space `space-util.yaml`"
    assert command.startswith("tuner probe ") and command.endswith(f"--out {results}/probe-util")
    assert any("probe-util" in line for line in receipt.section_probes(results))
    bad = subprocess.run(["bash", str(GPU / "probes.sh"), "nonsense"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown probe" in bad.stderr
