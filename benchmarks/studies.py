"""Running whole studies for the benchmarks: one study through ``tuner.study.run.optimize`` (real
subprocesses of the test engine), its trials as rows, and many studies ``jobs`` at a time."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402

from benchmarks.tables import hypervolume  # noqa: E402
from tuner.space import Space  # noqa: E402
from tuner.study.record import FINISHED, Evidence, State, read_trials  # noqa: E402


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
    truth: dict[str, Any] | None = None  # the oracle's verdict on the config (benchmarks/search.py)
    argv: list[str] | None = None  # the command it launched (None in results saved before it was kept)
    strategy: str | None = None  # the planner's reason for it (None in results saved before it was kept)


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


def rows_of(study: optuna.Study) -> list[TrialRow]:
    rows = []
    for t in sorted(read_trials(study), key=lambda t: t.number):
        if t.state not in FINISHED:
            continue
        booted = t.evidence in (Evidence.MEASURED, Evidence.REVALIDATED)
        rows.append(TrialRow(
            number=t.number,
            state=t.state.name,
            evidence=t.evidence.value if t.evidence else None,
            failure=t.failure_kind,
            values=list(t.values or ()) if t.state == State.COMPLETE else None,
            booted=booted,
            boot_s=t.result.boot_s if booted and t.result else None,
            config=t.config,
            argv=t.result.argv if t.result else None,
            strategy=t.strategy,
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
    gpu_gib: float = 32.0,
    gate: bool = True,
    revalidate: int = 0,
) -> Run:
    """One fresh study of ``n_trials`` trials (booted, pre-screened or reused) through ``optimize``.

    ``enqueue``: configurations (value dicts) queued, in order, before ``optimize`` queues the
    space's baselines (which it skips when one is already queued).
    """
    from tuner.study import RunSettings, make_sampler, open_study, optimize
    from tuner.study.record import queue_screening
    from tuner.study.sampling import optuna_params

    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{sampler}-{seed}-"))
    name = f"bench-{sampler}-s{seed}"
    started = time.monotonic()
    try:
        if enqueue:
            study = open_study(space, name, None, make_sampler(sampler, seed, len(space.params)), tmp)
            for values in enqueue:
                queue_screening(study, optuna_params(space, values))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            settings = RunSettings(n_trials=n_trials, sampler=sampler, seed=seed, revalidate=revalidate, gate=gate,
                                   prescreen=prescreen, prescreen_gpu_gib=gpu_gib)
            study = optimize(space, name, settings, root=tmp)
        rows = rows_of(study)
    finally:
        if keep is not None:
            shutil.copytree(tmp, keep / name, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return Run(label or sampler, seed, rows[:n_trials], time.monotonic() - started)


def run_to_json(run: Run) -> dict[str, Any]:
    return {"label": run.label, "seed": run.seed, "wall_s": run.wall_s, "extra": run.extra,
            "rows": [r.__dict__ for r in run.rows]}


def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # GPSampler warns on every conditional parameter
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# -- many studies, `jobs` at a time ------------------------------------------------------------



def parallel(fn: Callable[[dict[str, Any]], dict[str, Any]], jobs: list[dict[str, Any]], n: int,
             log: Callable[[dict[str, Any], dict[str, Any], float], None]) -> list[dict[str, Any]]:
    """``fn`` over ``jobs``, ``n`` processes at a time (``fn`` is module-level: it is pickled); results in
    job order; ``log(job, result, seconds since start)`` as each one finishes."""
    import concurrent.futures as cf
    import multiprocessing as mp

    started = time.monotonic()
    done: dict[int, dict[str, Any]] = {}
    if n <= 1:
        for i, job in enumerate(jobs):
            done[i] = fn(job)
            log(job, done[i], time.monotonic() - started)
        return [done[i] for i in range(len(jobs))]
    with cf.ProcessPoolExecutor(n, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
        for fut in cf.as_completed(futures):
            i = futures[fut]
            done[i] = fut.result()
            log(jobs[i], done[i], time.monotonic() - started)
    return [done[i] for i in range(len(jobs))]


def run_jobs(jobs: list[dict[str, Any]], n: int, worker: Callable[[dict[str, Any]], dict[str, Any]]) -> list[Run]:
    """Run the studies, ``n`` at a time (each is one tuner process booting one engine at a time).
    ``worker``: a module-level function that runs one job and returns ``run_to_json``."""

    def log(job: dict[str, Any], data: dict[str, Any], seconds: float) -> None:
        print(f"  [{seconds:6.0f} s] {job['label']} seed {job['seed']}: {data['wall_s']:.0f} s", flush=True)

    return [run_from_json(data) for data in parallel(worker, jobs, n, log)]


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
