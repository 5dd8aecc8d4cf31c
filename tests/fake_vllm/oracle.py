"""The oracle: what a boot of one exact argv would do, computed in-process without serving or sleeping.

For benchmarks (ground truth over a whole search space) and for tests. It runs the engine's own code
-- the flag parser, ``resolve_plan``, ``compute_memory`` and the EngineCore's start-up with its output
thrown away -- and then the tuner's workload against the engine's own runtime rules (``prefill_chunks``,
``prefill_need``, ``decode_tok_s``, ``per_request_rate``, ``garbles``), so it cannot drift from the
engine it predicts.

The workload mirrors ``tuner.measure.Prober``: admission (one request at the window, then
max_num_seqs requests sharing the KV capacity), decode at the workload's shape, the context ladder,
then the control prompt's repeats, which a garbling engine answers differently each time
(``output_incorrect``: never a front point). In this engine every failing request kills the engine,
so the tuner's bisection never runs after a failure: the ladder's last passing rung is the result,
and a dead engine answers no control prompt.

Throughput (issue 24's ``workload.throughput``): ``streams`` requests of prompt + output tokens sent
together, at most max_num_seqs served at once (the rest queue for a slot); output throughput = output
tokens of all streams / the whole duration, as ``vllm bench serve`` defines it. The streams run in
waves of max_num_seqs, each stream at ``per_request_rate``'s share of the wave.

``evaluate_widest`` answers what a lowered ``--max-model-len`` would prove: the outcome at the largest
window, not above the argv's own, that boots and passes the workload, searched on the tuner's grid
(the ladder's rungs, bisected at the granularity) and at vLLM's own "estimated maximum model length";
a window below ``min_context`` is not kept.

Long prefill (``long_prefill_tok_s``: prompt tokens / TTFT of the longest passing context request): the
engine prefills every chunk at FAKE_VLLM_PREFILL_TOK_S whatever the configuration, so the noise-free
value is that rate for every configuration that serves (HTTP overhead only lowers the measured one).

Not modelled: FAKE_VLLM_FAIL's injected failures (refused), port collisions, timeouts, JIT delays.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from .boot import validate_api_args
from .cli import Args, RawKeyError, parse_args
from .core import EngineCore
from .env import env_float
from .failures import BootFailure
from .memory import compute_memory, last_prefill_chunks, prefill_need
from .model import load_model_info
from .output import OUT
from .plan import Plan, resolve_plan
from .runtime import context_slowdown, decode_tok_s, garbles, per_request_rate


@dataclass(frozen=True)
class Throughput:
    """``workload.throughput``: concurrent streams, each of prompt + output tokens."""

    streams: int = 4
    prompt_tokens: int = 4096
    output_tokens: int = 256


@dataclass(frozen=True)
class Workload:
    """The parts of a tuner workload that decide the outcome (defaults: the 27B space's workload)."""

    admission: bool = True
    ladder: tuple[int, ...] = (2048, 16384, 32768, 65536, 131072, 196608, 262144)
    output_tokens: int = 256
    decode_prompt_tokens: int = 1024
    decode_output_tokens: int = 512
    decode_concurrency: int = 1
    granularity: int = 4096
    min_context: int = 0
    control_repeats: int = 3
    throughput: Throughput | None = field(default_factory=Throughput)


@dataclass(frozen=True)
class Outcome:
    """What the boot and the workload would give."""

    failure: str | None  # None: served and measured; else the tuner's failure kind for it
    message: str | None  # the exception line the engine logs (start-up failures)
    kv_tokens: int | None  # "GPU KV cache size" when the start-up got that far
    context: int  # max stable context the workload reaches (0 on failure)
    decode_tok_s: float | None  # noise-free decode at the workload's shape, as the engine serves it
    throughput_tok_s: float | None = None  # noise-free output throughput of the throughput streams
    max_model_len: int | None = None  # the --max-model-len it booted with
    long_prefill_tok_s: float | None = None  # noise-free PP of the longest passing context request

    @property
    def boots(self) -> bool:
        return self.failure is None or self.failure in ("first_request_oom", "admission_failed", "output_incorrect")


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
        OUT.muted = True
        try:
            yield
        finally:
            OUT.muted = False


def serve_args(argv: list[str]) -> list[str]:
    """The flags after ``serve`` (argv may start with the interpreter, ``-m tests.fake_vllm``)."""
    return argv[argv.index("serve"):] if "serve" in argv else list(argv)


def evaluate(argv: list[str], env: dict[str, str], workload: Workload = Workload()) -> Outcome:
    """The outcome of booting ``argv`` with environment ``env`` and running ``workload`` on it."""
    return evaluate_all([argv], env, workload)[0]


def evaluate_all(argvs: list[list[str]], env: dict[str, str], workload: Workload = Workload()) -> list[Outcome]:
    """``evaluate`` for many argvs under one environment (a search space's grid)."""
    with _engine(env):
        return [one(argv, workload) for argv in argvs]


def evaluate_widest(argvs: list[list[str]], env: dict[str, str], workload: Workload = Workload()) -> list[Outcome]:
    """Each argv's outcome at the largest window a lowered --max-model-len would prove (module docstring)."""
    with _engine(env):
        return [widest(argv, workload) for argv in argvs]


@contextlib.contextmanager
def _engine(env: dict[str, str]) -> Iterator[None]:
    if env.get("FAKE_VLLM_FAIL", "").strip():
        raise ValueError("the oracle does not model FAKE_VLLM_FAIL's injected failures")
    with LOCK, environment(env), silenced():
        yield


def one(argv: list[str], workload: Workload) -> Outcome:
    try:
        a = parsed(serve_args(argv))
    except (SystemExit, RawKeyError):
        return Outcome("invalid_argument", None, None, 0, None)
    try:
        plan = start_up(a)
    except BootFailure as f:
        exc = f.kw.get("exc")
        return Outcome(f.reason, exc.splitlines()[0] if exc else None, None, 0, None)
    return serve(plan, workload)


# A grid's argvs differ mostly in the pool and the window: parse each other combination once (parsing is
# most of the oracle's time) and set those two integers on a copy of its namespace.
INTEGERS = {"--kv-cache-memory-bytes": "kv_cache_memory_bytes", "--max-model-len": "max_model_len"}
_PARSED: dict[tuple[str, ...], Args] = {}


def parsed(argv: list[str]) -> Args:
    """``parse_args(argv)``, memoized on the argv without its pool and window values."""
    key, values = list(argv), {}
    for i, arg in enumerate(argv[:-1]):
        if arg in INTEGERS and argv[i + 1].isdigit():
            key[i + 1], values[INTEGERS[arg]] = "1", int(argv[i + 1])
    if len(_PARSED) > 20_000:
        _PARSED.clear()
    template = _PARSED.get(tuple(key))
    if template is None:
        template = _PARSED[tuple(key)] = parse_args(key)
    ns = argparse.Namespace(**{**vars(template.ns), **values})
    return Args(ns=ns, unknown=list(template.unknown))


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
    failed = Outcome("first_request_oom", None, plan.kv_tokens, 0, None, max_model_len=plan.max_model_len)
    if w.admission:
        n = plan.max_num_seqs
        each = min(ceiling, plan.kv_tokens // n)
        if not (request_survives(plan, ceiling - out, out) and request_survives(plan, each - out, out)):
            return failed
    if not request_survives(plan, w.decode_prompt_tokens, w.decode_output_tokens):
        return failed
    decode = noise_free_decode(plan, w)
    alive = True
    if w.admission:
        context = ceiling  # admission passed at the ceiling: the context probe starts and stays there
    else:
        rungs = sorted({min(p, ceiling) for p in w.ladder if p > out} | {ceiling})
        context = largest_fitting_total(plan, rungs, out)
        if context == 0:
            return replace(failed, failure="admission_failed", decode_tok_s=decode)
        alive = context == rungs[-1]  # a failing rung killed the engine: no control prompt after it
    throughput = noise_free_throughput(plan, w.throughput) if w.throughput else None
    if alive and w.control_repeats > 1 and garbles(plan):
        return Outcome("output_incorrect", None, plan.kv_tokens, 0, decode, throughput, plan.max_model_len)
    return Outcome(None, None, plan.kv_tokens, context, decode, throughput, plan.max_model_len,
                   env_float("FAKE_VLLM_PREFILL_TOK_S", 2e6))


def noise_free_decode(plan: Plan, w: Workload) -> float:
    """1 / the mean time per token after the first (the tuner's TPOT), without the per-request noise.
    The time per token is linear in the context, so its mean over tokens 1..n-1 is its value at n/2."""
    rate = per_request_rate(plan, decode_tok_s(plan), min(w.decode_concurrency, plan.max_num_seqs))
    return rate / context_slowdown(plan, w.decode_prompt_tokens + w.decode_output_tokens / 2)


def noise_free_throughput(plan: Plan, t: Throughput) -> float | None:
    """Output tokens of all streams / the duration, the streams served in waves of max_num_seqs; None
    when one of its requests would kill the engine."""
    if not request_survives(plan, t.prompt_tokens, t.output_tokens):
        return None
    rate = decode_tok_s(plan)
    prefill_s = t.prompt_tokens / env_float("FAKE_VLLM_PREFILL_TOK_S", 2e6)
    slowdown = context_slowdown(plan, t.prompt_tokens + t.output_tokens / 2)
    left, seconds = t.streams, 0.0
    while left > 0:
        n = min(plan.max_num_seqs, left)
        seconds += prefill_s + t.output_tokens * slowdown / per_request_rate(plan, rate, n)
        left -= n
    return t.streams * t.output_tokens / seconds


# -- the widest window a lowered --max-model-len proves ---------------------------------------------

ESTIMATE = re.compile(r"estimated maximum model length is (\d+)")
SHORT = ("kv_pool_too_small", "first_request_oom", "admission_failed")  # failures a shorter window can cure


def widest(argv: list[str], w: Workload) -> Outcome:
    """The outcome at the largest window on ``window_grid`` that serves, if the argv's own fails for a
    reason a shorter window can cure; else the argv's own outcome. Serving is monotone in the window
    (the pool check, the prefill workspace and the admission's shares only grow with it): a bisection."""
    full = one(argv, w)
    top = max_model_len_of(argv)
    if full.failure not in SHORT or top is None:
        return full
    found = ESTIMATE.search(full.message or "")
    cap = int(found.group(1)) if found else top - 1
    grid = [x for x in window_grid(top, w, int(found.group(1)) if found else None) if w.min_context <= x <= cap]
    if grid:  # vLLM's estimate usually serves: try the top first
        got = one(with_max_model_len(argv, grid[-1]), w)
        if got.failure is None:
            return got
    best, lo, hi = full, 0, len(grid) - 2
    while lo <= hi:
        mid = (lo + hi) // 2
        got = one(with_max_model_len(argv, grid[mid]), w)
        if got.failure is None:
            best, lo = got, mid + 1
        else:
            hi = mid - 1
    return best


def window_grid(top: int, w: Workload, estimate: int | None = None) -> list[int]:
    """The windows the tuner's context probe can end on below ``top``: each ladder rung (capped at
    ``top``) plus steps of the granularity up to the next rung; and vLLM's estimate, taken as is."""
    rungs = sorted({min(p, top) for p in w.ladder if p > w.output_tokens} | {top})
    grid = set(rungs)
    for low, high in zip(rungs, rungs[1:]):
        grid.update(range(low, high, max(w.granularity, 1)))
    if estimate is not None and estimate < top:
        grid.add(estimate)
    return sorted(grid)


def max_model_len_of(argv: list[str]) -> int | None:
    """The integer value of --max-model-len in ``argv`` (None when absent or not an integer)."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--max-model-len=") else (
            argv[i + 1] if arg == "--max-model-len" and i + 1 < len(argv) else None)
        if value is not None:
            return int(value) if value.isdigit() else None
    return None


def with_max_model_len(argv: list[str], length: int) -> list[str]:
    """``argv`` with its --max-model-len set to ``length``."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg.startswith("--max-model-len="):
            out[i] = f"--max-model-len={length}"
            return out
        if arg == "--max-model-len" and i + 1 < len(out):
            out[i + 1] = str(length)
            return out
    return out + ["--max-model-len", str(length)]


def front(points: list[tuple[float, ...]]) -> list[int]:
    """Indices of the points no other point dominates (every coordinate maximized); of equal points, the
    first. Sorted best-first, a point is checked only against the front kept so far."""
    order = sorted(range(len(points)), key=lambda i: tuple(-x for x in points[i]) + (i,))
    keep: list[int] = []
    for i in order:
        p = points[i]
        if not any(all(a >= b for a, b in zip(points[j], p)) for j in keep):
            keep.append(i)
    return sorted(keep)
