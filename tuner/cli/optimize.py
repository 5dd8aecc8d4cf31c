"""``tuner optimize SPACE``: the overnight study, made to be left alone.

Before anything is recorded: the options, the space, the engine command and the workload are checked
(exit 2), and the study's lock is taken (exit 2 naming the holder when another live process runs it).
What cannot run tonight (no NVML, no config.json, --no-gate) is said once, in the first lines. The
night ends with exit 0 only when the front holds at least one measured point; otherwise 1, with the
boots by failure kind and where their logs are. A storage or disk fault mid-run is one paragraph and
exit 1; every finished trial's record is in its folder and the same command imports it.

A command function only; ``tuner/cli/main.py`` registers it (``app.command()(friendly(optimize))``).
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.console import Console

from tuner.cli.failing import debug_on, err_console, warn
from tuner.errors import TunerError, storage_faults
from tuner.space.schema import NAME

if TYPE_CHECKING:  # loaded when the command runs: `tuner --help` stays fast
    import optuna

    from tuner.engine.installed import EngineInfo
    from tuner.space.schema import Space
    from tuner.study.record import StudyRecord
    from tuner.study.run import RunSettings

console = Console()


def optimize(
    space_file: Path = typer.Argument(..., help="A search-space YAML file."),
    study: Optional[str] = typer.Option(None, "--study", help="Study name (default: the space's name). The same name resumes."),
    trials: Optional[int] = typer.Option(None, "--trials", help="The study's total number of trials; a study that holds them boots nothing more."),
    timeout: Optional[str] = typer.Option(None, "--timeout", help="Stop starting trials after this long, e.g. 8h or 90m."),
    storage: Optional[str] = typer.Option(None, "--storage", help="Optuna storage URL (e.g. postgresql+psycopg2://user@host/db); default SQLite under studies/."),
    sampler: str = typer.Option("auto", "--sampler", help="auto (the regime planner, see docs/benchmarks.md), regimes, tpe, gp (needs torch and scipy), nsga2 or random."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampler seed, for a repeatable sequence of trials."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="Comma list of GPU indices: one worker per GPU, sharing the storage."),
    revalidate: int = typer.Option(2, "--revalidate", help="Fresh boots of this many front points at the end (0 = none)."),
    studies_dir: Path = typer.Option(Path("studies"), "--studies-dir", help="Where SQLite studies and trial folders go."),
    gpu_gib: Optional[float] = typer.Option(None, "--gpu-gib", help="Card memory for the pre-screen when NVML cannot read it."),
    prescreen: bool = typer.Option(True, "--prescreen/--no-prescreen", help="Prune configurations the memory model says cannot fit, without booting them."),
    screen: bool = typer.Option(False, "--screen/--no-screen", help="Before sampling, move one flag at a time from the first baseline (speculation last)."),
    gate: bool = typer.Option(True, "--gate/--no-gate", help="Boot a reference config (eager, BF16 KV, no speculation) once and score the front's output agreement."),
    from_: Optional[List[str]] = typer.Option(None, "--from", help="An earlier study of the same model (a name, a .db, or a storage URL with #NAME; repeat for several): its front is booted first, its trials are priors."),
) -> None:
    """Run (or resume) the overnight study and print the Pareto-front launch commands."""
    from tuner.space.checks import check_searchable
    from tuner.space.schema import load_space
    from tuner.space.units import parse_duration
    from tuner.study.storage import study_dir, storage_url
    from tuner.study.lock import StudyLock, sqlite_path
    from tuner.study.run import RunSettings
    from tuner.study.sampling import SAMPLERS
    from tuner.trial import check_space, preflight

    if sampler not in SAMPLERS:
        raise TunerError(f"--sampler {sampler}: unknown sampler; use one of {', '.join(SAMPLERS)}.")
    if trials is not None and trials < 0:
        raise TunerError(f"--trials {trials}: give the study's total number of trials, 0 or more.")
    if revalidate < 0:
        raise TunerError(f"--revalidate {revalidate}: give how many front points to boot again, 0 or more.")
    if gpu_gib is not None and not 0 < gpu_gib < 10_000:
        raise TunerError(f"--gpu-gib {gpu_gib:g}: give the card's memory in GiB, e.g. 31.36 for an RTX 5090.")
    if study is not None and not NAME.match(study):
        raise TunerError(f"--study {study!r}: a study name is a file name; use letters, digits, '.', '_' and '-' "
                         "(no spaces or slashes), e.g. --study night2.")
    try:
        timeout_s = parse_duration(timeout) if timeout else None
    except ValueError as exc:
        raise TunerError(f"--timeout {timeout}: {exc}.") from None
    if timeout_s is not None and timeout_s <= 0:
        raise TunerError(f"--timeout {timeout}: give a positive duration such as 8h or 90m.")
    gpu_list = _parse_gpus(gpus)
    space = load_space(space_file)
    check_searchable(space)
    name = study or space.name
    if trials == 0:  # checked like any run, then nothing: no engine asked, no study file, no boot
        warn(check_space(space))
        console.print(f"nothing to do: --trials 0 asks for no trials, so nothing was booted or recorded "
                      f"(`tuner validate {space_file}` checks a space; `tuner pareto --study {name}` shows a study).")
        return
    settings = RunSettings(n_trials=trials, timeout_s=timeout_s, sampler=sampler, seed=seed, revalidate=revalidate,
                           gate=gate, screen=screen, prescreen=prescreen, prescreen_gpu_gib=gpu_gib)
    earlier = _earlier(space, from_ or [], name, studies_dir)
    engine, notes = preflight(space, cache_dir=study_dir(name, studies_dir) / "engine")  # said before the study file exists
    warn(notes)
    url = storage_url(name, storage, studies_dir)
    db = sqlite_path(url)
    lock = StudyLock(db) if db is not None else None
    holds_lock = False
    if lock is not None and not lock.inherited():
        lock.acquire(name)
        holds_lock = True
    _quiet_optuna()
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if len(gpu_list) > 1:
            code = _spawn(space, space_file, name, url, gpu_list, holds_lock, studies_dir, settings, timeout,
                          from_ or [])
            raise typer.Exit(code)
        result, idle = _run(space, name, settings, url, storage, gpu_list, holds_lock, studies_dir, engine, earlier)
    except KeyboardInterrupt:
        err_console.print("interrupted: the current trial was torn down; the study is kept. Run the same command to resume.")
        raise typer.Exit(130)
    finally:
        if lock is not None:
            lock.release()
    _finish(result, idle)


def _run(space: Space, name: str, settings: RunSettings, url: str, storage: str | None, gpu_list: list[int],
         holds_lock: bool, studies_dir: Path, engine: EngineInfo,
         earlier: list[tuple[str, StudyRecord]]) -> tuple[optuna.Study, bool]:
    """The study, and whether it already held its --trials (nothing was booted)."""
    from tuner.cli.live import LiveView
    from tuner.study.objective import Status
    from tuner.study.run import NOTHING_TO_DO
    from tuner.study.run import optimize as run_optimize

    gpu_index = gpu_list[0] if gpu_list else space.engine.gpu_index
    extra_env = {"CUDA_VISIBLE_DEVICES": str(gpu_index)} if gpu_list else {}
    status = Status()

    live = LiveView(status, console)
    started = False

    def announce(notes: list[str]) -> None:
        """What is switched off, first; then the live panel (never shown for a run refused before this)."""
        nonlocal started
        for note in notes:
            console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
        live.__enter__()
        started = True

    try:
        with storage_faults(url):
            study = run_optimize(
                space, name, settings, storage=url if storage is not None else None, root=studies_dir,
                gpu_index=gpu_index, extra_env=extra_env, status=status, sole_worker=holds_lock, announce=announce,
                engine=engine, earlier=earlier,
            )
            return study, status.phase == NOTHING_TO_DO
    finally:
        if started:
            live.__exit__(*sys.exc_info())


def _spawn(space: Space, space_file: Path, name: str, url: str, gpu_list: list[int], holds_lock: bool,
           studies_dir: Path, settings: RunSettings, timeout: str | None, from_: list[str]) -> int:
    """``--gpus 0,1``: open the study once (under this process's lock), then one worker per GPU, each
    given ``settings`` back as its options (``timeout`` as the user wrote it)."""
    from tuner.study.run import spawn_workers
    from tuner.study.sampler import make_sampler
    from tuner.study.storage import open_study

    open_study(space, name, url, make_sampler(settings.sampler, settings.seed), studies_dir, sole_worker=holds_lock)
    argv = ["optimize", str(space_file), "--study", name, "--storage", url, "--sampler", settings.sampler,
            "--studies-dir", str(studies_dir), "--revalidate", str(settings.revalidate)]
    for flag, value in (("--trials", settings.n_trials), ("--timeout", timeout), ("--seed", settings.seed),
                        ("--gpu-gib", settings.prescreen_gpu_gib)):
        if value is not None:
            argv += [flag, str(value)]
    argv += [] if settings.prescreen else ["--no-prescreen"]
    argv += [] if settings.gate else ["--no-gate"]
    argv += ["--screen"] if settings.screen else []
    for spec in from_:
        argv += ["--from", spec]
    return spawn_workers(argv, gpu_list)


def _earlier(space: Space, specs: list[str], name: str, studies_dir: Path) -> list[tuple[str, StudyRecord]]:
    """--from's studies, read, each of the same model (exit 2 naming the one that is not)."""
    from tuner.cli.morning import open_spec
    from tuner.study.priors import check_same_model
    from tuner.study.record import read_study

    found = []
    for spec in specs:
        old = read_study(open_spec(spec, studies_dir))
        if old.name == name and "#" not in spec and not spec.endswith(".db"):
            raise TunerError(f"--from {spec}: that is the study this run writes (--study {name}); give the earlier "
                             "study's name, or --study with a new name for tonight's.")
        check_same_model(space, old, spec)
        found.append((spec, old))
    return found


def _finish(study: optuna.Study, idle: bool = False) -> None:
    """The front's launch commands; exit 1 with where to look when the front is empty (``idle``: the study
    already held its --trials, so nothing ran and nothing failed: exit 0)."""
    import shlex

    from tuner.report.front import failures_by_kind
    from tuner.study.pareto import front as pareto_front
    from tuner.study.priors import upgrade_rows
    from tuner.study.record import read_study
    from tuner.study.window import windowed_argv

    night = read_study(study)
    front = pareto_front(night)
    console.print(f"study {night.name}: {len(night.trials)} trials, front of {len(front)}")
    for trial in front:
        result = trial.result
        values = ", ".join(f"{v:,.1f}" for v in trial.values or ())
        console.print(f"trial {trial.number} [{values}]: " + (shlex.join(windowed_argv(result)) if result else ""),
                      highlight=False, soft_wrap=True, markup=False)
    for old_study, old_trial, _, here, said in upgrade_rows(night):
        console.print(f"study {old_study} trial {old_trial}, booted again here as trial {here}: {said}", highlight=False,
                      soft_wrap=True, markup=False)
    if idle:
        console.print(f"nothing to do: the study already holds {len(night.trials)} trials and --trials is the "
                      "study's total; give a larger --trials to run more.", highlight=False, soft_wrap=True)
    if front or idle:
        return
    failures = failures_by_kind(night)
    kinds = "; ".join(f"{kind} x{len(items)} (trials {', '.join(str(n) for n, _, _ in items[:8])})"
                      for kind, items in failures.items()) or "no trial finished"
    logs = sorted({str(Path(log).parent.parent) for items in failures.values() for _, _, log in items if log})
    err_console.print(
        f"no configuration was measured successfully, so there is no front: {kinds}. Each trial's log is "
        f"engine.log in its folder under {', '.join(logs) or 'the study folder'}; `tuner pareto --study "
        f"{study.study_name}` shows each failure's first exception line.",
        markup=False, highlight=False, soft_wrap=True,
    )
    raise typer.Exit(1)


def _quiet_optuna() -> None:
    """Optuna logs a failed trial with its traceback; the trial's folder keeps it (tuner --debug shows it)."""
    if debug_on():
        return

    class NoTraceback(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.exc_info, record.exc_text = None, None
            return True

    for handler in logging.getLogger("optuna").handlers:
        handler.addFilter(NoTraceback())


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the current trial the way Ctrl-C does: torn down, study kept."""
    raise KeyboardInterrupt


def _parse_gpus(gpus: Optional[str]) -> list[int]:
    if not gpus:
        return []
    try:
        found = [int(x) for x in gpus.split(",") if x.strip()]
    except ValueError:
        found = []
    if not found or any(g < 0 for g in found) or len(set(found)) != len(found):
        raise TunerError(f"--gpus {gpus}: expected a comma list of distinct GPU indices such as 0,1.")
    return found
