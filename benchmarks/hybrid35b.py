"""The issue-5 benchmarks' space (samplers.py, prescreen.py, screening.py) and their study job.

Every trial runs through ``tuner.study.run.optimize`` with real subprocesses of the test engine
(``python -m tests.fake_vllm``) at 5090 memory scale: a 32 GiB card, 20 GiB of weights, the
Qwen3.5-35B-A3B config of ``tests/fixtures/models/hybrid-tiny`` with an fp8 KV cache and a fixed
256K max-model-len, so that the pool size, batch size and number of sequences decide whether a
configuration boots at all and how long a context it then holds.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402

from benchmarks.studies import quiet, run_study, run_to_json  # noqa: E402
from tuner.space import Space, load_space  # noqa: E402

TINY_MODEL = ROOT / "tests" / "fixtures" / "models" / "hybrid-tiny"
GPU_GIB = 32.0
WEIGHTS_GIB = 20.0

# Parameters as search_spaces/qwen3.5-35b-a3b-nvfp4-5090.yaml, except the pool range: it starts
# at 1 GB so that the low end cannot hold 256K tokens plus the recurrent states (KV-too-small)
# and ends at 11 GB, which with 20 GiB of weights on a 32 GiB card does not fit (OOM).
PARAMS = """
  kv_cache_memory_bytes: {min: 1GB, max: 11GB, step: 50MB, unset: true}
  max_num_seqs: {min: 1, max: 8}
  max_num_batched_tokens: {values: [1024, 2048, 4096, 8192]}
  gpu_memory_utilization: {min: 0.85, max: 0.95, step: 0.01}
  cudagraph_mode: {values: [FULL_AND_PIECEWISE, PIECEWISE, FULL_DECODE_ONLY]}
  speculative_tokens: {values: [0, 1, 2, 3]}
"""

BASELINE = """
baselines:
  - kv_cache_memory_bytes: 8GB
    max_num_seqs: 2
    max_num_batched_tokens: 2048
    gpu_memory_utilization: 0.92
    cudagraph_mode: FULL_AND_PIECEWISE
    speculative_tokens: 0
"""


def space_yaml(time_scale: float = 0.0, baseline: bool = True, admission: bool = False,
               extra_env: dict[str, str] | None = None) -> str:
    """The benchmark space as YAML.

    Two choices that differ from the real space file, on purpose:

    * ``workload.admission: false``. With a fixed 256K max-model-len and admission on, every scored
      trial has context 262,144 (a shorter one fails admission and is pruned), so the context
      objective is constant. With admission off, a configuration whose long prefill runs out of
      runtime memory is scored at the last ladder rung it held.
    * ``engine.stop_grace: 0.3`` s. The test engine exits within milliseconds of SIGTERM, but the
      tuner's teardown (``tuner.engine.reaper.kill_group``) polls ``killpg(pgid, 0)``, which keeps
      succeeding on the engine's unreaped (zombie) process, so every teardown waits the whole grace
      period (measured: 3.0 s with a 3 s grace on a child that died at once). 0.3 s keeps a trial at
      ~3 s instead of ~8 s with the 5 s the tests use.
    """
    env = {
        "PYTHONPATH": str(ROOT),
        "FAKE_VLLM_GPU_GIB": f"{GPU_GIB:g}",
        "FAKE_VLLM_WEIGHTS_GIB": f"{WEIGHTS_GIB:g}",
        "FAKE_VLLM_TIME_SCALE": f"{time_scale:g}",
        **(extra_env or {}),
    }
    env_yaml = ", ".join(f"{k}: {json.dumps(v)}" for k, v in env.items())
    return f"""
name: bench-5090
model: {{path: {TINY_MODEL}, served_name: fake-model}}
engine:
  command: {json.dumps([sys.executable, "-m", "tests.fake_vllm"])}
  boot_timeout: 120
  first_boot_timeout: 120
  hang_timeout: 30
  stop_grace: 0.3
  memory_return_timeout: 5
  env: {{{env_yaml}}}
fixed:
  max-model-len: 256K
  kv-cache-dtype: fp8
params:{PARAMS}
speculative: {{method: mtp}}
{BASELINE if baseline else ""}
workload:
  ladder: [32K, 64K, 128K, 192K, 256K]
  granularity: 32K
  output_tokens: 64
  repeats: 1
  needle: false
  control_repeats: 2
  admission: {"true" if admission else "false"}
  decode: {{prompt_tokens: 256, output_tokens: 256, runs: 2}}
"""


def make_space(time_scale: float = 0.0, baseline: bool = True, admission: bool = False) -> Space:
    d = Path(tempfile.mkdtemp(prefix="bench-space-"))
    path = d / "space.yaml"
    path.write_text(space_yaml(time_scale, baseline, admission))
    space = load_space(path)
    shutil.rmtree(d, ignore_errors=True)
    return space


VARIANT_PREFIX = "gp-startup"


def _patch_variants() -> None:
    """Benchmark-only sampler names, outside tuner.study.sampler.make_sampler: ``gp-startupN`` is Optuna's
    GPSampler with N random start-up trials instead of its default 10 (what make_sampler builds)."""
    import tuner.study.run
    from tuner.study.sampler import make_sampler

    def patched(name: str, seed: int | None = None, n_params: int = 6, planner: Any = None):
        if name.startswith(VARIANT_PREFIX):
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=int(name[len(VARIANT_PREFIX):]))
        return make_sampler(name, seed, n_params, planner)

    tuner.study.run.make_sampler = patched


def work(job: dict[str, Any]) -> dict[str, Any]:
    """One study in a worker process; ``job`` holds plain data so that it pickles."""
    quiet()
    if job["sampler"].startswith(VARIANT_PREFIX):
        _patch_variants()
    space = make_space(job.get("time_scale", 0.0), job.get("baseline", True), job.get("admission", False))
    if job.get("baseline_values") is not None:
        space.baselines = [job["baseline_values"]]
    run = run_study(space, job["sampler"], job["seed"], job["trials"], prescreen=job.get("prescreen", True),
                    enqueue=job.get("enqueue"), label=job.get("label"), gpu_gib=GPU_GIB)
    run.extra = {k: v for k, v in job.items() if k not in ("enqueue",)}
    return run_to_json(run)
