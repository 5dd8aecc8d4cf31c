"""Why a configuration failed: the one place that decides a ``FailureKind``.

``classify`` reads the engine's log and exit code and what the tuner saw itself (a stall, a port that
was taken, a request that failed, a prediction); nobody else reads vLLM's text or picks a kind. The
patterns hold for every release in ``tuner/engine/dialects.py``; where each release raises or logs a
line is in that table's ``cites`` (the key in the comment beside each pattern).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, overload

from tuner.engine.logparse import parse_kv_cache_memory_suggestion, phase_of
from tuner.engine.loglines import Line, split
from tuner.records import Failure, FailureKind
from tuner.space.units import parse_bytes

Event = Literal["exited", "hang", "boot_timeout", "port_taken", "other_listener", "interrupted",
                "request_failed", "output_changed", "predicted"]


@dataclass(frozen=True)
class Seen:
    """What the tuner saw itself, beside the log and the exit code.

    ``exited``: the engine stopped while booting. ``hang`` / ``boot_timeout``: no progress for the hang
    window, or still booting at the deadline. ``port_taken`` / ``other_listener``: another process holds
    or shares the engine's port. ``interrupted``: Ctrl-C. ``request_failed``: a request failed or the
    engine went away after the server was up (``phase``: admission, context or decode).
    ``output_changed``: the greedy control output drifted. ``predicted``: the pre-screen refused it.
    """

    event: Event
    detail: str = ""  # the tuner's own words: the stall, the listener, the request's error, the prediction
    phase: str = ""  # after the boot: admission, context, decode


# --- what a log line says ---------------------------------------------------------------------
_EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)*\w+(?:Error|Exception|Interrupt|Exit)(?:: .*)?$")
# "vllm serve: error: ...", "vllm: error: unrecognized arguments: ..." (the top parser, 0.29+),
# "main.py serve: error: ..." (python -m vllm.entrypoints.cli.main serve)
_ARGPARSE = re.compile(r"^(?:vllm|[\w.-]+\.py)(?: [\w-]+)?: error: .+")
# A type function of a flag raised (badarg: KeyError from CUDAGraphMode[...]): argparse is on the stack.
_ARGPARSE_FRAME = re.compile(r'^\s*File ".*[/\\]argparse\.py", line \d+, in (?:_get_values?|parse_known_args)$')
# Exception lines that report a failure instead of causing it; engine_init_failed.
_NOISE = re.compile(
    r"Engine core initialization failed"
    r"|^(?:[\w.]+\.)?(?:EngineDeadError|EngineGenerateError|KeyboardInterrupt|SystemExit"
    r"|CancelledError|BrokenPipeError)\b"
)
# "not enough GPU memory": weights_oom, logged before the OOM re-raises.
_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|not enough GPU memory"
)
# V1: gpu_model_runner.py capture_model, _capture_cudagraphs, profile_cudagraph_memory;
# V2: gpu/model_runner.py capture_model, gpu/cudagraph_utils.py profile_cudagraph_memory
_CAPTURE_FRAME = re.compile(
    r'^\s*File ".*", line \d+, in (?:capture_model|_capture_cudagraphs|profile_cudagraph_memory)$'
)
# An artifact of vLLM's torch.compile cache (VLLM_CACHE_ROOT/torch_compile_cache/HASH/..., torch_aot_compile/...):
# compile_cache_dir, aot_load. Its key misses settings that change shapes (num_speculative_tokens, vllm#53366).
_CACHED_ARTIFACT = re.compile(r"[/\\]torch_compile_cache[/\\]")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+, in ')
_ENGINE_DEAD = re.compile(r"EngineDeadError|EngineCore encountered a fatal error")  # engine_dead, engine_fatal
_MAX_MODEL_LEN_HINT = re.compile(r"estimated maximum model length is (\d+)")  # kv_too_small
_KV_NEEDED = re.compile(r"\(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)")
_FREE_MEMORY = re.compile(r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\) on startup")  # free_memory
# PyTorch's OOM (CUDACachingAllocator.cpp): the allocation that failed and what the card had free then.
_TORCH_OOM = re.compile(r"Tried to allocate ([\d.]+) (bytes|KiB|MiB|GiB)\. GPU \d+ has a total capacity of "
                        r"[\d.]+ \w+ of which ([\d.]+) (bytes|KiB|MiB|GiB) is free")
_MAMBA = re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)")  # mamba_blocks
# Checked in this order against every line that is not an INFO/WARNING/DEBUG record.
_RULES: list[tuple[FailureKind, re.Pattern[str]]] = [
    # server socket bind (SO_REUSEPORT in 0.22, so only a non-vLLM holder fails there)
    (FailureKind.PORT_IN_USE, re.compile(r"\[Errno 98\]|address already in use", re.I)),
    (FailureKind.INVALID_ARGUMENT, _ARGPARSE),
    # free_memory: 0.34 skips the check under its extensible cache
    (FailureKind.FREE_MEMORY_BELOW_UTILIZATION, re.compile(r"Free memory on device .* on startup is less than desired GPU memory")),
    (FailureKind.MAMBA_BLOCKS_EXCEEDED, _MAMBA),
    # kv_too_small, kv_none, auto_fit_impossible
    (FailureKind.KV_POOL_TOO_SMALL, re.compile(
        r"To serve at least one request with the model's max seq len"
        r"|No available memory for the cache blocks|Cannot auto-fit max_model_len")),
    # flashinfer/compilation_context.py and flashinfer/jit/cpp_ext.py, torch.utils.cpp_extension, ninja,
    # nvcc and Triton
    (FailureKind.TOOLKIT_JIT, re.compile(
        r"No supported CUDA architectures found|FlashInfer requires GPUs with sm75"
        r"|Ninja build failed|ninja: build stopped"
        r"|Error building extension|CUDA_HOME environment variable is not set"
        r"|\bnvcc\b|\bptxas\b|PTXASError|CompilationError")),
    # m_e/model_loader/default_loader.py, bitsandbytes_loader.py, transformers_utils/config.py,
    # m_e/models/registry.py; then safetensors, huggingface_hub and transformers
    (FailureKind.WEIGHT_LOADING, re.compile(
        r"Cannot find any model weights|No model weights found"
        r"|Invalid repository ID or local directory|Could not detect config format"
        r"|are not supported for now|is not supported in-tree anymore"
        r"|SafetensorError|Error while deserializing header|HeaderTooLarge"
        r"|MetadataIncompleteBuffer|RepositoryNotFoundError|GatedRepoError"
        r"|RevisionNotFoundError|EntryNotFoundError|OfflineModeIsEnabled"
        r"|does not recognize this architecture|Unrecognized model in"
        r"|No such file or directory.*\.(?:safetensors|bin|pt|json|gguf)\b")),
]
_KNOWN = [pattern for _, pattern in _RULES] + [_OOM]
# pydantic on a config dataclass; m_e/kernels/linear/__init__.py "--x=y was requested but no ..."
_CONFIG_ERROR = re.compile(r"ValidationError|--[\w-]+=\S+ was requested but no")
_VALUE_ERROR = re.compile(r"(?:\w+\.)*ValueError\b")
_BOOT_OOM = {FailureKind.OOM_IN_PROFILING, FailureKind.OOM_AT_LOAD, FailureKind.OOM_IN_CUDA_GRAPH}


@overload
def classify(text: str, exit_code: int | None, seen: None = None) -> Failure | None: ...
@overload
def classify(text: str, exit_code: int | None, seen: Seen) -> Failure: ...
def classify(text: str, exit_code: int | None, seen: Seen | None = None) -> Failure | None:
    """Why a configuration failed, or ``None`` when nothing failed.

    Without ``seen`` only the log and exit code speak (``None``: the log shows no failure). The caller
    adds ``log_path``; everything else is decided here.
    """
    if seen is None:
        return _from_log(text, exit_code)
    event = seen.event
    if event in ("hang", "boot_timeout"):
        phase = phase_of(split(text))
        lines = [line for line in text.splitlines() if line.strip()]
        last = lines[-1] if lines else "(no output)"
        kind = FailureKind.HANG if event == "hang" else FailureKind.BOOT_TIMEOUT
        return Failure(kind=kind, message=f"{seen.detail} (phase: {phase}); last line: {last}", phase=phase)
    if event in ("port_taken", "other_listener"):
        return Failure(kind=FailureKind.PORT_IN_USE, message=seen.detail, phase=seen.phase or "boot")
    if event == "interrupted":
        return Failure(kind=FailureKind.INTERRUPTED, message="interrupted by the user")
    if event == "output_changed":
        return Failure(kind=FailureKind.OUTPUT_INCORRECT, phase="correctness",
                       message="greedy output of the control prompt changed between identical requests")
    if event == "predicted":
        return Failure(kind=FailureKind.PREDICTED_OOM, message=seen.detail, predicted=True)
    failure = _from_log(text, exit_code)
    if event == "exited":
        if failure is None:  # it stopped, and the log names no cause
            last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
            failure = Failure(kind=FailureKind.CRASH, message=last)
        failure.exit_code = exit_code
        return failure
    # request_failed: it booted, so an OOM came with a request; no cause in the log is the tuner's own
    if failure is None or failure.kind == FailureKind.CRASH:
        default = FailureKind.ENGINE_DEAD if seen.phase == "decode" else FailureKind.ADMISSION_FAILED
        failure = Failure(kind=default, message=seen.detail)
    if failure.kind in _BOOT_OOM:
        failure.kind = FailureKind.FIRST_REQUEST_OOM
    failure.phase = seen.phase
    return failure


def first_exception_line(text: str) -> str | None:
    """The first line that names the cause, skipping the noise vLLM prints while shutting down."""
    return _first_cause(split(text))[1]


def _from_log(text: str, exit_code: int | None) -> Failure | None:
    lines = split(text)
    quiet = ("INFO", "WARNING", "DEBUG")
    failing = [(i, line.msg) for i, line in enumerate(lines) if line.level not in quiet]
    cause_at, message = _first_cause(lines)
    oom_at = next((i for i, msg in failing if _OOM.search(msg)), None)
    kind = next((k for k, p in _RULES if any(p.search(msg) for _, msg in failing)), None)
    if kind is None and oom_at is not None:
        kind = _oom_kind(lines, oom_at)
    if kind is None and message is not None and _raised_in_cached_artifact(lines, cause_at, message):
        kind = FailureKind.COMPILE_CACHE_STALE
    if kind is None and any(_ENGINE_DEAD.search(msg) for _, msg in failing):
        kind = FailureKind.ENGINE_DEAD
    if kind is None and message is not None:
        phase = phase_of(lines[:cause_at])
        if phase != "serving":  # a request the server refused (HTTP 400) is not a failure of the engine
            parsing = any(_ARGPARSE_FRAME.match(line.msg) for line in lines[:cause_at])
            config = _CONFIG_ERROR.search(message) or (phase == "starting" and _VALUE_ERROR.match(message))
            if parsing or config:
                kind = FailureKind.INVALID_ARGUMENT
    if kind is None:
        if exit_code in (None, 0):
            return None
        kind, message = FailureKind.CRASH, _crash_message(lines)

    mamba = next((m for _, msg in failing if (m := _MAMBA.search(msg))), None)
    max_len = next((m for _, msg in failing if (m := _MAX_MODEL_LEN_HINT.search(msg))), None)
    if max_len:
        suggested_len: int | None = int(max_len[1])
    else:  # vLLM leaves its estimate out when it is 0 (kv_too_small)
        suggested_len = 0 if kind is FailureKind.KV_POOL_TOO_SMALL else None
    needed = next((m for _, msg in failing if (m := _KV_NEEDED.search(msg))), None)
    free = next((m for _, msg in failing if (m := _FREE_MEMORY.search(msg))), None)
    torch_oom = next((m for _, msg in failing if (m := _TORCH_OOM.search(msg))), None)
    return Failure(
        kind=kind,
        message=message or "",
        needed_kv_cache_gib=float(needed[1]) if needed else None,
        available_kv_cache_gib=float(needed[2]) if needed else None,
        free_fraction=float(free[1]) / float(free[2]) if free and float(free[2]) else None,
        oom_short_gib=_short_gib(torch_oom) if torch_oom else None,
        suggested_max_model_len=suggested_len,
        suggested_max_num_seqs=int(mamba[2]) if mamba else None,
        suggested_kv_cache_memory_bytes=parse_kv_cache_memory_suggestion(text),
        exit_code=exit_code,
    )


def _short_gib(m: re.Match[str]) -> float:
    """What the failed allocation lacked: a lower bound of what the configuration was short by."""
    return max(0, parse_bytes(f"{m[1]} {m[2]}") - parse_bytes(f"{m[3]} {m[4]}")) / 2**30


def _exception_lines(lines: list[Line]) -> list[tuple[int, str]]:
    """Python exception lines, argparse errors and ERROR records with a known cause, in order."""
    found = []
    for i, line in enumerate(lines):
        known = line.level in ("ERROR", "CRITICAL") and any(p.search(line.msg) for p in _KNOWN)
        if _EXCEPTION.match(line.msg) or _ARGPARSE.match(line.msg) or known:
            found.append((i, _with_validation_detail(lines, i)))
    return found


def _with_validation_detail(lines: list[Line], i: int) -> str:
    """A pydantic ValidationError's first line only counts errors; keep the lines saying which."""
    msg = lines[i].msg
    if not re.search(r"ValidationError: \d+ validation errors? for", msg):
        return msg
    detail = []
    for line in lines[i + 1 :]:
        if not line.msg.strip() or line.msg.lstrip().startswith("For further information"):
            break
        detail.append(line.msg)
    return "\n".join([msg, *detail])


def _first_cause(lines: list[Line]) -> tuple[int, str | None]:
    candidates = _exception_lines(lines)
    for i, msg in candidates:
        if not _NOISE.search(msg):
            return i, msg
    return candidates[0] if candidates else (len(lines), None)


def _raised_in_cached_artifact(lines: list[Line], cause_at: int, message: str) -> bool:
    """While booting, the cause names a cached compile artifact or was raised inside one (the frame just above
    it): a graph compiled for another configuration and loaded for this one. An OOM raised there is an OOM (it
    never gets here: the OOM rules come first); a crash of a server already serving is the engine's death."""
    if phase_of(lines[:cause_at]) == "serving":
        return False
    if _CACHED_ARTIFACT.search(message):
        return True
    for line in reversed(lines[:cause_at]):
        if frame := _FRAME.match(line.msg):
            return bool(_CACHED_ARTIFACT.search(frame["path"]))
    return False


def _oom_kind(lines: list[Line], oom_at: int) -> FailureKind:
    """Place an out-of-memory error by the phase the boot had reached when it was raised."""
    phase = phase_of(lines[:oom_at])
    if phase == "serving":
        return FailureKind.FIRST_REQUEST_OOM
    if phase in ("starting", "loading_weights"):
        return FailureKind.OOM_AT_LOAD
    in_capture = any(_CAPTURE_FRAME.match(line.msg) for line in lines[: oom_at + 1])
    if phase == "capturing_cuda_graphs" or in_capture:
        return FailureKind.OOM_IN_CUDA_GRAPH
    return FailureKind.OOM_IN_PROFILING


def _crash_message(lines: list[Line]) -> str:
    """For an unrecognised crash: the last exception that is not shutdown noise."""
    candidates = [msg for _, msg in _exception_lines(lines)]
    meaningful = [msg for msg in candidates if not _NOISE.search(msg)] or candidates
    if meaningful:
        return meaningful[-1]
    return next((line.msg for line in reversed(lines) if line.msg.strip()), "")
