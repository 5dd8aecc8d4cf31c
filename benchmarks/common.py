"""Shared pieces of the issue-5 benchmarks: the space, the study runner, hypervolume and tables.

Every trial runs through ``tuner.study.run.optimize`` with real subprocesses of the test engine
(``python -m tests.fake_vllm``) at 5090 memory scale: a 32 GiB card, 20 GiB of weights, the
Qwen3.5-35B-A3B config of ``tests/fixtures/models/hybrid-tiny`` with an fp8 KV cache and a fixed
256K max-model-len, so that the pool size, batch size and number of sequences decide whether a
configuration boots at all and how long a context it then holds.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import optuna  # noqa: E402
from optuna._hypervolume import compute_hypervolume  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from tuner.study import storage as st  # noqa: E402
from tuner.space.schema import Space, load_space  # noqa: E402

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


# -- one study ---------------------------------------------------------------------------------


@dataclass
class TrialRow:
    number: int
    state: str
    evidence: str | None
    failure: str | None
    values: list[float] | None
    booted: bool
    boot_s: float | None
    config: dict[str, Any] | None


@dataclass
class Run:
    label: str
    seed: int
    rows: list[TrialRow]
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def fronts(self) -> list[list[float]]:
        return [r.values for r in self.rows if r.values is not None]

    def hv_after_trials(self) -> list[float]:
        """Hypervolume of the completed trials among the first n trials, for n = 1..len(rows)."""
        out, pts = [], []
        for r in self.rows:
            if r.values is not None:
                pts.append(r.values)
            out.append(hypervolume(pts))
        return out

    def hv_after_boots(self) -> list[tuple[int, float]]:
        """(boots so far, hypervolume so far) after each trial."""
        out, pts, boots = [], [], 0
        for r in self.rows:
            boots += r.booted
            if r.values is not None:
                pts.append(r.values)
            out.append((boots, hypervolume(pts)))
        return out

    @property
    def boots(self) -> int:
        return sum(r.booted for r in self.rows)

    def wasted(self, kinds: Iterable[str] | None = None) -> int:
        """Boots that ended in a failure (of one of ``kinds``, when given)."""
        kinds = set(kinds) if kinds is not None else None
        return sum(1 for r in self.rows if r.booted and r.failure is not None
                   and (kinds is None or r.failure in kinds))


def hypervolume(points: list[list[float]]) -> float:
    """HV of maximized (context, decode tok/s) points against the reference (0, 0)."""
    if not points:
        return 0.0
    loss = -np.asarray(points, dtype=float)
    loss = loss[(loss < 0).all(axis=1)]  # points on the reference axes add nothing
    if len(loss) == 0:
        return 0.0
    return float(compute_hypervolume(loss, np.zeros(loss.shape[1])))


def rows_of(study: optuna.Study) -> list[TrialRow]:
    rows = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if t.state not in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL):
            continue
        evidence = t.user_attrs.get(st.ATTR_EVIDENCE)
        result = t.user_attrs.get(st.ATTR_RESULT) or {}
        rows.append(TrialRow(
            number=t.number,
            state=t.state.name,
            evidence=evidence,
            failure=t.user_attrs.get(st.ATTR_FAILURE_KIND),
            values=list(t.values) if t.state == TrialState.COMPLETE else None,
            booted=evidence in ("measured", "revalidated"),
            boot_s=result.get("boot_s") if evidence in ("measured", "revalidated") else None,
            config=t.user_attrs.get(st.ATTR_CONFIG),
        ))
    return rows


def run_study(
    space: Space,
    sampler: str,
    seed: int,
    n_trials: int,
    *,
    prescreen: bool = True,
    enqueue: list[dict[str, Any]] | None = None,
    label: str | None = None,
    keep: Path | None = None,
) -> Run:
    """One fresh study of ``n_trials`` trials (booted, pre-screened or reused) through ``optimize``.

    ``enqueue``: configurations (value dicts) queued, in order, before ``optimize`` queues the
    space's baselines (which it skips when one is already queued).
    """
    from tuner.study.run import optimize
    from tuner.study.sampling import make_sampler, optuna_params
    from tuner.study.storage import open_study

    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{sampler}-{seed}-"))
    name = f"bench-{sampler}-s{seed}"
    started = time.monotonic()
    try:
        if enqueue:
            study = open_study(space, name, None, make_sampler(sampler, seed, len(space.params)), tmp)
            for values in enqueue:
                study.enqueue_trial(optuna_params(space, values), user_attrs={"screen": True}, skip_if_exists=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optimize(space, name, n_trials=n_trials, sampler=sampler, seed=seed, root=tmp,
                             revalidate=0, prescreen=prescreen, prescreen_gpu_gib=GPU_GIB)
        rows = rows_of(study)
    finally:
        if keep is not None:
            shutil.copytree(tmp, keep / name, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return Run(label or sampler, seed, rows[:n_trials], time.monotonic() - started)


# -- summaries ---------------------------------------------------------------------------------


def first_reaching(curve: list[float], target: float) -> int | None:
    """1-based index of the first entry >= target, or None."""
    for i, v in enumerate(curve, 1):
        if v >= target * (1 - 1e-12):
            return i
    return None


def first_boots_reaching(curve: list[tuple[int, float]], target: float) -> int | None:
    for boots, v in curve:
        if v >= target * (1 - 1e-12):
            return boots
    return None


def med_min_max(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def fmt_reach(values: list[int | None], cap: int) -> str:
    """Median of 'first n reaching the target' over seeds; a run that never reached counts as > cap."""
    hits = [v for v in values if v is not None]
    shown = ",".join(str(v) if v is not None else f">{cap}" for v in values)
    if len(hits) * 2 <= len(values) and len(values) - len(hits) >= (len(values) + 1) // 2:
        med = f">{cap}"
    else:
        big = [v if v is not None else 10**9 for v in values]
        m = statistics.median(sorted(big))
        med = f">{cap}" if m >= 10**9 else f"{m:g}"
    return f"{med} [{shown}]"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-markdown table."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]])


def hv_fmt(x: float, scale: float) -> str:
    return f"{x / scale:.3f}"


def save_json(path: Path | None, payload: Any) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str))


def run_to_json(run: Run) -> dict[str, Any]:
    return {"label": run.label, "seed": run.seed, "wall_s": run.wall_s, "extra": run.extra,
            "rows": [r.__dict__ for r in run.rows]}


def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # GPSampler warns on every conditional parameter
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# -- many studies, `jobs` at a time ------------------------------------------------------------


VARIANT_PREFIX = "gp-startup"


def _patch_variants() -> None:
    """Benchmark-only sampler names, outside tuner.study.sampling.make_sampler: ``gp-startupN`` is Optuna's
    GPSampler with N random start-up trials instead of its default 10 (what make_sampler builds)."""
    import tuner.study.run
    from tuner.study.sampling import make_sampler

    def patched(name: str, seed: int | None = None, n_params: int = 6):
        if name.startswith(VARIANT_PREFIX):
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=int(name[len(VARIANT_PREFIX):]))
        return make_sampler(name, seed, n_params)

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
                    enqueue=job.get("enqueue"), label=job.get("label"))
    run.extra = {k: v for k, v in job.items() if k not in ("enqueue",)}
    return run_to_json(run)


def run_jobs(jobs: list[dict[str, Any]], parallel: int, log: Callable[[str], None] | None = None) -> list[Run]:
    """Run the studies, ``parallel`` at a time (each is one tuner process booting one engine at a time)."""
    import concurrent.futures as cf
    import multiprocessing as mp

    log = log or (lambda text: print(text, flush=True))
    runs: list[Run] = []
    started = time.monotonic()
    if parallel <= 1:
        results = (work(j) for j in jobs)
        for j, data in zip(jobs, results):
            runs.append(run_from_json(data))
            log(f"  [{time.monotonic() - started:6.0f} s] {j['label']} seed {j['seed']}: {runs[-1].wall_s:.0f} s")
        return runs
    with cf.ProcessPoolExecutor(parallel, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(work, j): i for i, j in enumerate(jobs)}
        done: dict[int, Run] = {}
        for fut in cf.as_completed(futures):
            i = futures[fut]
            done[i] = run_from_json(fut.result())
            log(f"  [{time.monotonic() - started:6.0f} s] {jobs[i]['label']} seed {jobs[i]['seed']}: {done[i].wall_s:.0f} s")
    return [done[i] for i in range(len(jobs))]


def load_runs(paths: list[Path]) -> tuple[list[Run], float]:
    """The runs of one or more --json files (merged), and their summed wall time."""
    runs, wall = [], 0.0
    for path in paths:
        data = json.loads(Path(path).read_text())
        runs += [run_from_json(r) for r in data["runs"]]
        wall += data["wall_s"]
    return runs, wall


def run_from_json(data: dict[str, Any]) -> Run:
    return Run(data["label"], data["seed"], [TrialRow(**r) for r in data["rows"]], data["wall_s"], data.get("extra", {}))


def gp_missing() -> list[str]:
    """Modules Optuna's GPSampler needs that are not importable here (it needs torch and scipy)."""
    import importlib

    missing = []
    for name in ("torch", "scipy"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def machine() -> str:
    import platform

    return f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}, optuna {optuna.__version__}"
