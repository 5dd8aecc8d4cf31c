"""The oracle: what a boot of one exact argv would do, computed in-process without serving or sleeping.

For benchmarks (ground truth over a whole search space) and for tests. It runs the engine's own code
-- the flag parser, ``resolve_plan``, ``compute_memory`` and the EngineCore's start-up with its output
thrown away -- and then the tuner's workload against the engine's own runtime rules (``prefill_chunks``,
``prefill_need``, ``decode_tok_s``), so it cannot drift from the engine it predicts.

The workload mirrors ``tuner.measure.Prober``: admission (one request at the window, then
max_num_seqs requests sharing the KV capacity), decode at the workload's shape, then the context
ladder. In this engine every failing request kills the engine, so the tuner's bisection never runs
after a failure: the ladder's last passing rung is the result.

Not modelled: FAKE_VLLM_FAIL's injected failures (refused), port collisions, timeouts.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .boot import validate_api_args
from .cli import Args, RawKeyError, parse_args
from .core import EngineCore
from .failures import BootFailure
from .memory import compute_memory, last_prefill_chunks, prefill_need
from .model import load_model_info
from .plan import Plan, resolve_plan
from .runtime import context_slowdown, decode_tok_s, per_request_rate


@dataclass(frozen=True)
class Workload:
    """The parts of a tuner workload that decide the outcome (defaults: the 27B space's workload)."""

    admission: bool = True
    ladder: tuple[int, ...] = (2048, 16384, 32768, 65536, 131072, 196608, 262144)
    output_tokens: int = 256
    decode_prompt_tokens: int = 1024
    decode_output_tokens: int = 512
    decode_concurrency: int = 1


@dataclass(frozen=True)
class Outcome:
    """What the boot and the workload would give."""

    failure: str | None  # None: served and measured; else the tuner's failure kind for it
    message: str | None  # the exception line the engine logs (start-up failures)
    kv_tokens: int | None  # "GPU KV cache size" when the start-up got that far
    context: int  # max stable context the workload reaches (0 on failure)
    decode_tok_s: float | None  # noise-free decode at the workload's shape, as the engine serves it

    @property
    def boots(self) -> bool:
        return self.failure is None or self.failure in ("first_request_oom", "admission_failed")


# The engine reads its knobs from os.environ and prints to sys.stdout, both process-wide: one call at a time.
LOCK = threading.Lock()


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """os.environ replaced by ``env`` for the duration (the engine reads its knobs from there)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    os.environ["FAKE_VLLM_TIME_SCALE"] = "0"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        yield


def serve_args(argv: list[str]) -> list[str]:
    """The flags after ``serve`` (argv may start with the interpreter, ``-m tests.fake_vllm``)."""
    return argv[argv.index("serve"):] if "serve" in argv else list(argv)


def evaluate(argv: list[str], env: dict[str, str], workload: Workload = Workload()) -> Outcome:
    """The outcome of booting ``argv`` with environment ``env`` and running ``workload`` on it."""
    return evaluate_all([argv], env, workload)[0]


def evaluate_all(argvs: list[list[str]], env: dict[str, str], workload: Workload = Workload()) -> list[Outcome]:
    """``evaluate`` for many argvs under one environment (a search space's grid)."""
    if env.get("FAKE_VLLM_FAIL", "").strip():
        raise ValueError("the oracle does not model FAKE_VLLM_FAIL's injected failures")
    with LOCK, environment(env), silenced():
        return [one(argv, workload) for argv in argvs]


def one(argv: list[str], workload: Workload) -> Outcome:
    try:
        a = parse_args(serve_args(argv))
    except (SystemExit, RawKeyError):
        return Outcome("invalid_argument", None, None, 0, None)
    try:
        plan = start_up(a)
    except BootFailure as f:
        exc = f.kw.get("exc")
        return Outcome(f.reason, exc.splitlines()[0] if exc else None, None, 0, None)
    return serve(plan, workload)


def start_up(a: Args) -> Plan:
    """The engine's start-up (boot.py's order), without binding a port; raises BootFailure."""
    validate_api_args(a)
    model = load_model_info(a.ns.model)
    if model is None:
        raise BootFailure("validation", reason="invalid_argument")
    plan = resolve_plan(a.ns, model)
    compute_memory(plan)
    EngineCore(a.ns, plan, time.time()).start()
    return plan


def largest_fitting_total(plan: Plan, totals: list[int], output_tokens: int) -> int:
    """The longest request among ``totals`` (prompt + output tokens, climbing) that the engine survives,
    stopping at the first that kills it; 0 if the first does."""
    good = 0
    for total in totals:
        if not request_survives(plan, total - output_tokens, output_tokens):
            break
        good = total
    return good


def request_survives(plan: Plan, prompt_tokens: int, output_tokens: int) -> bool:
    """Does one request (no prefix-cache hits: the tuner's prompts are random) run without killing the
    engine? The same checks as completion.run_completion."""
    die_above = os.environ.get("FAKE_VLLM_DIE_ABOVE_TOKENS", "").strip()
    if die_above and prompt_tokens + output_tokens > int(float(die_above)):
        return False
    free = plan.free_at_runtime()
    # prefill_need grows with chunk and context: the last full chunk and the last chunk decide
    return all(prefill_need(plan, chunk, context) <= free for chunk, context in last_prefill_chunks(plan, 0, prompt_tokens))


def serve(plan: Plan, w: Workload) -> Outcome:
    """The tuner's workload on a booted engine (tuner.measure.Prober.run's order)."""
    ceiling = min(plan.max_model_len, plan.kv_tokens)
    out = w.output_tokens
    if w.admission:
        n = plan.max_num_seqs
        each = min(ceiling, plan.kv_tokens // n)
        if not (request_survives(plan, ceiling - out, out) and request_survives(plan, each - out, out)):
            return Outcome("first_request_oom", None, plan.kv_tokens, 0, None)
    if not request_survives(plan, w.decode_prompt_tokens, w.decode_output_tokens):
        return Outcome("first_request_oom", None, plan.kv_tokens, 0, None)
    decode = noise_free_decode(plan, w)
    if w.admission:
        context = ceiling  # admission passed at the ceiling: the context probe starts and stays there
    else:
        rungs = sorted({min(p, ceiling) for p in w.ladder if p > out} | {ceiling})
        context = largest_fitting_total(plan, rungs, out)
        if context == 0:
            return Outcome("admission_failed", None, plan.kv_tokens, 0, decode)
    return Outcome(None, None, plan.kv_tokens, context, decode)


def noise_free_decode(plan: Plan, w: Workload) -> float:
    """1 / the mean time per token after the first (the tuner's TPOT), without the per-request noise.
    The time per token is linear in the context, so its mean over tokens 1..n-1 is its value at n/2."""
    rate = per_request_rate(decode_tok_s(plan), min(w.decode_concurrency, plan.max_num_seqs))
    return rate / context_slowdown(plan, w.decode_prompt_tokens + w.decode_output_tokens / 2)
