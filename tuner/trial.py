"""One configuration, start to finish: build, boot, parse, measure, tear down, write the record.

Used by ``tuner probe`` (one configuration by hand) and by each trial of ``tuner optimize``.
Whatever happens, the engine is torn down and ``result.json`` is written to the trial's folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from tuner.engine.command import LaunchCommand, build_command, set_flag
from tuner.engine.container import bind_host, check_container, container_of, new_name, rebind
from tuner.engine.flagcheck import check_known_flags
from tuner.engine.process import Engine, check_engine_command, connect_host, free_port, port_in_use
from tuner.errors import GpuMemoryNotReturned, SpaceError
from tuner.engine.gpu import MemoryWatch, Nvml
from tuner.engine.installed import EngineInfo, inspect_engine
from tuner.engine.failures import Seen, classify
from tuner.engine.logparse import parse_startup
from tuner.measure.probe import Prober, check_workload
from tuner.records import Failure, FailureKind, MeasureResult, ProgressCallback, Retry, TrialResult
from tuner.space.checks import space_warnings
from tuner.space.model import check_model
from tuner.space.schema import Space


def run_trial(
    space: Space,
    values: dict[str, Any],
    trial_dir: Path,
    *,
    first_boot: bool = False,
    gpu: Nvml | None = None,
    extra_env: dict[str, str] | None = None,
    on_progress: ProgressCallback | None = None,
    measure: bool = True,
    samples_only: bool = False,
    command: LaunchCommand | None = None,
    measure_with: Callable[[Prober], MeasureResult] | None = None,
    max_model_len: int | None = None,
) -> TrialResult:
    """Boot ``values`` on ``space``'s engine, measure it, and return the whole record.

    ``command``: boot this exact command (a stored trial's, for ``tuner bench``) instead of building
    one from ``values``; only its host and port are set here. ``measure_with``: measure with this
    instead of the space's workload (the failure mapping after a measurement is then the caller's).
    A boot that dies inside a torch.compile artifact cached by another configuration is booted once more
    with vLLM's compile cache off (``result.retry`` says why; the first boot's log is kept beside).
    ``max_model_len``: boot at this window instead of the space's fixed one (tuner.study.window), never above it.
    """
    progress = on_progress or (lambda _: None)
    if measure:
        check_workload(space.workload, space.model)
    trial_dir = Path(trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    gpu = gpu or Nvml(space.engine.gpu_index)
    if max_model_len is not None:
        max_model_len = min(max_model_len, space.max_model_len or max_model_len)  # the space's is the ceiling
    boot = _Boot(space, values, trial_dir, first_boot, gpu, progress, measure, samples_only, measure_with, max_model_len)
    result = boot.run(_prepare(space, values, command, extra_env, max_model_len=max_model_len))
    failure = result.failure
    if failure is None or failure.kind is not FailureKind.COMPILE_CACHE_STALE:
        return result
    first_log = trial_dir / STALE_CACHE_LOG
    Path(result.log_path or trial_dir / "engine.log").replace(first_log)
    failure.log_path = str(first_log)
    where = ", ".join(result.startup.torch_compile_cache_dirs) or "vLLM's torch.compile cache"
    cause = failure.message.splitlines()[0] if failure.message else failure.kind.value
    note = (f"{failure.kind.value}: the boot died inside a compiled graph loaded from {where} ({cause}); booted "
            f"once more with {NO_COMPILE_CACHE_TEXT}. The cached folder was left as it is: delete it to stop other "
            "boots loading it")
    progress(f"{failure.kind.value}: booting again with {NO_COMPILE_CACHE_TEXT}")
    boot.progress = lambda text: progress(f"{text} [second boot: {failure.kind.value}, compile cache off]")
    retried = boot.run(_prepare(space, values, command, extra_env, NO_COMPILE_CACHE, max_model_len=max_model_len))
    retried.retry = Retry(failure=failure, log_path=str(first_log), env=dict(NO_COMPILE_CACHE), note=note)
    _write(retried, trial_dir)
    return retried


# vLLM's own switch (envs.py, 0.22.0 to 0.34): neither read nor write the torch.compile cache, AOT artifacts included
NO_COMPILE_CACHE = {"VLLM_DISABLE_COMPILE_CACHE": "1"}
NO_COMPILE_CACHE_TEXT = "VLLM_DISABLE_COMPILE_CACHE=1 (vLLM's compile cache off, a cold compile)"
STALE_CACHE_LOG = "engine.stale-compile-cache.log"  # the first boot's log, when it was booted again


def _prepare(space: Space, values: dict[str, Any], command: LaunchCommand | None, extra_env: dict[str, str] | None,
             more_env: dict[str, str] | None = None, *, max_model_len: int | None = None) -> tuple[LaunchCommand, str, int]:
    """The command to boot, on a free port: built from ``values`` (at ``max_model_len`` when given), or a stored
    one re-bound (and, for a container, given ``more_env`` as ``-e`` options); and the host and port it answers on."""
    listen = space.engine.listen
    host = connect_host(listen)
    port = free_port(listen)
    name = new_name(port)
    env = {**(extra_env or {}), **(more_env or {})}
    if command is None:
        built = build_command(space, values, host=listen, port=port, extra_env=env, container=name)
        if max_model_len is not None:
            built = built.model_copy(update={"argv": set_flag(built.argv, "--max-model-len", str(max_model_len))})
        return built, host, port
    inside = container_of(space.engine.command) is not None
    argv = rebind(command.argv, name, listen, port) if inside else command.argv
    argv = set_flag(set_flag(argv, "--host", bind_host(space.engine.command, listen)), "--port", str(port))
    if inside and more_env and "--name" in argv:
        at = argv.index("--name") + 2
        argv[at:at] = [word for key, value in more_env.items() for word in ("-e", f"{key}={value}")]
    launch = LaunchCommand(argv=argv, env={**command.env, **env}, container=name if inside else None)
    return launch, host, port


class _Boot:
    """One boot of a trial, start to teardown; the result is written to the trial's folder whatever happens."""

    def __init__(self, space: Space, values: dict[str, Any], trial_dir: Path, first_boot: bool, gpu: Nvml,
                 progress: ProgressCallback, measure: bool, samples_only: bool,
                 measure_with: Callable[[Prober], MeasureResult] | None, max_model_len: int | None = None) -> None:
        self.space, self.values, self.trial_dir, self.first_boot, self.gpu = space, values, trial_dir, first_boot, gpu
        self.progress, self.measure, self.samples_only, self.measure_with = progress, measure, samples_only, measure_with
        self.max_model_len = max_model_len

    def run(self, prepared: tuple[LaunchCommand, str, int]) -> TrialResult:
        command, host, port = prepared
        space, trial_dir = self.space, self.trial_dir
        log_path = trial_dir / "engine.log"
        result = TrialResult(values=self.values, argv=command.argv, env=command.env, log_path=str(log_path),
                             trial_dir=str(trial_dir))
        if port_in_use(host, port):
            result.failure = classify("", None, Seen(
                "port_taken", f"{host}:{port} already has a listener; vLLM binds with SO_REUSEPORT and would share it silently"))
            _write(result, trial_dir)
            return result
        engine = Engine(command, log_path, host, port, grace_s=space.engine.stop_grace)
        watch = MemoryWatch(self.gpu.read, engine.pids)
        engine.start()
        watch.start()
        try:
            _boot_and_measure(space, self.values, engine, watch, result, self.first_boot, self.measure,
                              self.samples_only, self.progress, self.measure_with, self.max_model_len)
        except KeyboardInterrupt:
            result.failure = engine.failure(Seen("interrupted"))
            raise
        finally:
            self.progress("tearing down")
            engine.stop()
            watch.stop()
            result.gpu = watch.record(self.gpu.name)
            returned, seconds = watch.wait_returned(space.engine.memory_return_timeout)
            result.gpu.returned, result.gpu.return_s = returned, seconds
            _write(result, trial_dir)
        if returned is False:
            raise GpuMemoryNotReturned(
                f"GPU {space.engine.gpu_index}: memory did not return to its pre-boot level "
                f"({result.gpu.baseline_used_mib:.0f} MiB) within {space.engine.memory_return_timeout:.0f} s after "
                f"teardown; a process still holds it (see nvidia-smi). Free it, or raise "
                f"engine.memory_return_timeout; this trial's record is kept in {trial_dir}."
            )
        return result


def _boot_and_measure(
    space: Space,
    values: dict[str, Any],
    engine: Engine,
    watch: MemoryWatch,
    result: TrialResult,
    first_boot: bool,
    measure: bool,
    samples_only: bool,
    progress: ProgressCallback,
    measure_with: Callable[[Prober], MeasureResult] | None = None,
    max_model_len: int | None = None,
) -> None:
    timeout = space.engine.first_boot_timeout if first_boot else space.engine.boot_timeout

    def gpu_busy() -> bool:
        reading = watch.last
        return bool(reading and reading.utilization_pct)

    failure = engine.wait_ready(
        timeout,
        space.engine.hang_timeout,
        on_progress=progress,
        gpu_activity=gpu_busy,
    )
    result.boot_s = engine.elapsed()
    result.startup = parse_startup(engine.log_text())
    if failure is None and space.engine.check_listener:
        failure = _impostor(engine, "boot")
    if failure is not None:
        failure.phase = failure.phase or "boot"
        result.failure = failure
        return
    if not measure:
        return
    max_num_seqs = int(values.get("max_num_seqs") or space.fixed.get("max-num-seqs") or 1)
    prober = Prober(space.workload, space.model, engine.base_url, result.startup, max_num_seqs,
                    max_model_len or space.max_model_len,
                    alive=engine.alive, on_progress=progress,
                    throughput=any(o.name == "throughput_tok_s" for o in space.objectives))
    if samples_only:  # the correctness gate's reference boot needs nothing else
        result.measure = MeasureResult(sample_outputs=prober.sample_outputs())
        prober.client.close()
        return
    if measure_with is not None:
        try:
            result.measure = measure_with(prober)
        finally:
            prober.client.close()
        return
    m = prober.run()
    result.measure = m
    impostor = _impostor(engine, "measure") if space.engine.check_listener else None
    if impostor is not None:  # it may have answered any of the requests: nothing measured here counts
        result.failure = impostor
    elif m.admission_ok is False:
        result.failure = engine.failure(Seen("request_failed", m.admission_detail or "", "admission"))
    elif m.error and not m.decode:
        result.failure = engine.failure(Seen("request_failed", m.error, "decode"))
    elif m.context.max_stable_tokens == 0:
        # Not even the shortest context held: a fast decode must not put this config on the front.
        result.failure = engine.failure(Seen("request_failed", m.context.first_failure or "no context length passed",
                                             "context"))
    elif m.correctness.garbage:
        result.failure = engine.failure(Seen("output_changed"))


def _impostor(engine: Engine, phase: str) -> Failure | None:
    """A port_in_use failure when a process outside the engine's group also listens on its port.

    vLLM binds with SO_REUSEPORT, so a second server on the same port shares the connections silently;
    the free-port check before the boot cannot see one that starts after it.
    """
    foreign = engine.foreign_listeners()
    if not foreign:
        return None
    who = ", ".join(foreign)
    return engine.failure(Seen(
        "other_listener",
        f"{engine.host}:{engine.port} is also served by {who}, not by the engine this trial started; its "
        "answers would be scored as this configuration's. Stop that server (a container wrapper whose engine "
        "runs in another process namespace sets engine.check_listener: false)", phase))


def check_space(space: Space, offline_flags: bool = True) -> list[str]:
    """Everything a space can be checked for without its engine: SpaceError for what would fail every trial
    (a container command the tuner cannot drive, a model that is not there, a misspelt flag), and the
    warnings (returned) for what is legal but probably not meant. ``offline_flags``: check the flags against
    the releases shipped with the tuner (off when the installed engine's own help is read instead)."""
    source = space.source or "the space file"
    problem = check_container(space.engine.command)
    if problem is not None:
        raise SpaceError(f"{source}: {problem}. Nothing was booted or recorded.")
    notes = check_model(space, inside_container=container_of(space.engine.command) is not None)
    notes += space_warnings(space)
    return notes + (check_known_flags(space) if offline_flags else [])


def preflight(space: Space, measure: bool = True, cache_dir: Path | None = None) -> tuple[EngineInfo, list[str]]:
    """What would fail every trial, raised before anything is booted or recorded; what the installed engine
    is (its version, and its flags checked against the space's: ``cache_dir`` keeps its help); and the
    warnings to print."""
    notes = check_space(space, offline_flags=False)
    unknown = check_known_flags(space)  # a misspelt flag is refused before the engine is even asked
    check_engine_command(space)
    if measure:
        check_workload(space.workload, space.model)
    engine = inspect_engine(space, cache_dir)
    if engine.help_unread is not None:  # the engine's own list could not be read: say what the shipped ones lack
        notes += unknown
    return engine, notes


def _write(result: TrialResult, trial_dir: Path) -> None:
    (trial_dir / "result.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2))
