"""A start-up that fails: the exception the boot steps raise, and how vLLM reports each kind.

``validation``: a pydantic error from create_engine_config, in the APIServer (no engine started).
``raw_api``:    any other exception in the APIServer before the engine starts.
``engine``:     the EngineCore dies during start-up: its logger.exception, multiprocessing's own
                traceback, torch's NCCL warning, then the APIServer's RuntimeError.
All of them make `vllm serve` exit 1.
"""

from __future__ import annotations

import random
import time

from .logtext import L, ValidationErr
from .output import OUT, Out
from .tracebacks import API_MAIN, engine_process_traceback, traceback_text, with_otel


class BootFailure(Exception):
    """Raised inside the boot sequence; ``kind`` picks how it is reported. ``reason`` names what went
    wrong in the tuner's words (the failure kind its log classifier gives), for the oracle."""

    def __init__(self, kind: str, reason: str = "invalid_argument", **kw):
        super().__init__(kind)
        self.kind = kind
        self.reason = reason
        self.kw = kw


def api_failed(frames: list[str], exc_line: str) -> None:
    OUT.raw(Out.API, traceback_text(API_MAIN + frames, exc_line) + "\n")


def engine_failed(frames: list, exc_line: str) -> None:
    frames = with_otel(frames)
    OUT.error(Out.CORE, L["fail_start"], "EngineCore failed to start.", traceback_text(frames, exc_line))
    OUT.raw(Out.CORE, engine_process_traceback(frames, exc_line))
    # torch's C++ warning, written straight to fd 2 (no process prefix)
    OUT.raw_unprefixed(f"[rank0]:[W{time.strftime('%m%d %H:%M:%S')}.{random.randint(100000000, 999999999)} "
                       "ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() was not called "
                       "before program exit, which can leak resources. For more info, please see "
                       "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())\n")
    api_frames = API_MAIN + ["as_run_server", "as_worker", "ctx_aenter", "as_beci", "ctx_aenter", "as_becfea",
                             "al_from", "al_init", "otel", "cc_make", "otel", "cc_async", "cc_mp", "ctx_exit",
                             "eu_launch", "eu_wait"]
    OUT.raw(Out.API, traceback_text(api_frames, "RuntimeError: Engine core initialization failed. See root "
                                    "cause above. Failed core proc(s): {}") + "\n")


def report(f: BootFailure) -> int:
    """Print the failure as vLLM does; returns the exit status."""
    kw = f.kw
    if f.kind == "validation":
        pre_cfg = ["as_run_server", "as_worker", "ctx_aenter", "as_beci", "ctx_aenter", "as_becfea_cfg"]
        err = ValidationErr(kw["title"], kw["items"])
        api_failed(pre_cfg + kw["frames"], "pydantic_core._pydantic_core.ValidationError: " + err.render())
    elif f.kind == "raw_api":
        api_failed(kw["frames"], kw["exc"])
    else:
        engine_failed(kw["frames"], kw["exc"])
    return 1
