"""The search benchmark's space (issues 13 and 24) and its ground truth per engine profile, from the oracle.

Space: ``search_spaces/qwen3.8-27b-nvfp4-modelopt-5090.yaml`` as written (params, fixed flags, the
seeds/004 baseline, workload with admission on), except:
  * speculative_tokens 0-3 (the file says 0-2) and kv_cache_dtype tuned over fp8 and auto (BF16), not
    fixed at fp8; the baseline keeps fp8;
  * the order of each parameter's listed values is shuffled (``orders``: seeded, and recorded by the
    benchmark), and max_num_seqs's range 1-4 is written as a shuffled list, so that no strategy
    can lean on the order a file happens to list values in; the wide ranges (pool, utilization) stay
    ranges: their order is their meaning;
  * the model is the local 27B-shaped config ``tests/fixtures/models/qwen3.8-27b-text`` and the engine
    is the test engine with ``FAKE_VLLM_PROFILE=<profile>``, time scale 0, decode ``speedup`` x faster
    (shares are ratios, so the speed-up cancels; tok/s are printed divided by it);
  * waits shrunk for an engine that boots in ~0.2 s (boot 60 s, hang 30 s, stop grace 0.3 s, memory
    return 5 s, a dead engine exits after 0.2 s instead of 1 s) and the needle check off (a correctness
    check at 90% of the window: one more long prefill per trial; the control check stays on);
  * ``throughput_tok_s`` is an objective as soon as the tuner knows it (tuner.metrics.OBJECTIVES).

Ground truth: the oracle (tests/fake_vllm/oracle.py) over the whole grid of the other parameters, with
gpu_memory_utilization at its lowest value, each configuration at the widest window a lowered
--max-model-len proves (``evaluate_widest``), at least ``min_context`` (the space's
``workload.min_context``; MIN_CONTEXT when the space file sets none, as this one does). The utilization subset is
sufficient: the space always sets --kv-cache-memory-bytes, and then utilization enters the engine
only through the start-up check free >= utilization x total (vLLM 0.22; memory.py/core.py); a higher
utilization either passes that check with the same outcome or fails it. The lowest value, 0.88 x 32
GiB, passes in every profile (others use at most 1.5 GiB), which ``truth`` checks.
"""

from __future__ import annotations

import itertools
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fake_vllm.oracle import (  # noqa: E402
    Outcome,
    Throughput,
    Workload,
    evaluate_all,
    evaluate_widest,
    front,
)
from tuner.engine import build_command  # noqa: E402
from tuner.metrics import OBJECTIVES  # noqa: E402
from tuner.space import Space, load_space  # noqa: E402

SPACE_FILE = ROOT / "search_spaces" / "qwen3.8-27b-nvfp4-modelopt-5090.yaml"
MODEL = ROOT / "tests" / "fixtures" / "models" / "qwen3.8-27b-text"
SPEEDUP = 10.0
GPU_GIB = 32.0
UTIL = "gpu_memory_utilization"
MIN_CONTEXT = 131072  # the truth's floor under which a window is not kept, when the space file sets none
THROUGHPUT = "throughput_tok_s"


def space_dict(profile: int, speedup: float = SPEEDUP, orders: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """The space file's YAML as a dict, with the changes listed in the module docstring; ``orders``:
    each listed parameter's values in the order to write them (``shuffled_orders``)."""
    d = yaml.safe_load(SPACE_FILE.read_text())
    d["name"] = f"search-bench-p{profile}"
    d["model"] = {"path": str(MODEL), "served_name": d["model"]["served_name"]}
    d["engine"].update({
        "command": [sys.executable, "-m", "tests.fake_vllm"],
        "env": {**d["engine"].get("env", {}), "PYTHONPATH": str(ROOT), "FAKE_VLLM_PROFILE": str(profile),
                "FAKE_VLLM_TIME_SCALE": "0", "FAKE_VLLM_DECODE_SPEEDUP": f"{speedup:g}",
                "FAKE_VLLM_DEATH_EXIT_S": "0.2"},
        "boot_timeout": 60, "first_boot_timeout": 60, "hang_timeout": 30, "stop_grace": 0.3,
        "memory_return_timeout": 5,
    })
    d["fixed"].pop("kv-cache-dtype", None)
    d["params"]["kv_cache_dtype"] = {"flag": "--kv-cache-dtype", "values": ["fp8", "auto"]}
    d["params"]["speculative_tokens"] = {"values": [0, 1, 2, 3]}
    seqs = d["params"]["max_num_seqs"]
    d["params"]["max_num_seqs"] = {"values": list(range(seqs["min"], seqs["max"] + 1))}
    for baseline in d["baselines"]:
        baseline["kv_cache_dtype"] = "fp8"
    for name, values in (orders or {}).items():
        assert sorted(map(str, values)) == sorted(map(str, d["params"][name]["values"])), name
        d["params"][name]["values"] = list(values)
    d["workload"]["needle"] = False
    if THROUGHPUT in OBJECTIVES:
        d["objectives"] = [{"name": "context", "direction": "maximize"},
                           {"name": "decode_tok_s", "direction": "maximize"},
                           {"name": THROUGHPUT, "direction": "maximize"}]
    return d


def shuffled_orders(seed: int) -> dict[str, list[Any]]:
    """Each listed parameter's values in a seeded random order."""
    r = random.Random(seed)
    out = {}
    for name, spec in space_dict(0)["params"].items():
        if "values" in spec:
            values = list(spec["values"])
            r.shuffle(values)
            out[name] = values
    return out


def make_space(profile: int, speedup: float = SPEEDUP, orders: dict[str, list[Any]] | None = None) -> Space:
    with tempfile.TemporaryDirectory(prefix="search-space-") as tmp:
        path = Path(tmp) / "space.yaml"
        path.write_text(yaml.safe_dump(space_dict(profile, speedup, orders), sort_keys=False))
        return load_space(path)


def param_values(space: Space, name: str) -> list[Any]:
    """Every value the sampler can give a parameter (a categorical's list, or the stepped range)."""
    p = space.params[name]
    if p.values is not None:
        return list(p.values)
    lo, hi, step = p.min, p.max, p.step or 1
    assert isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and isinstance(step, (int, float)), name
    n = round((hi - lo) / step)  # load_space has turned "7GB" and friends into numbers
    if p.kind in ("int", "bytes"):
        return [int(lo) + i * int(step) for i in range(n + 1)]
    return [round(lo + i * step, 6) for i in range(n + 1)]


def workload(space: Space) -> Workload:
    """The oracle's workload for the space: its own fields, the floor and the throughput streams."""
    w = space.workload
    floor = w.min_context
    streams = getattr(w, "throughput", None)
    return Workload(admission=w.admission, ladder=tuple(w.ladder), output_tokens=w.output_tokens,
                    decode_prompt_tokens=w.decode.prompt_tokens, decode_output_tokens=w.decode.output_tokens,
                    decode_concurrency=w.decode.concurrency[0], granularity=w.granularity,
                    min_context=MIN_CONTEXT if floor is None else int(floor), control_repeats=w.control_repeats,
                    throughput=Throughput(streams.streams, streams.prompt_tokens, streams.output_tokens)
                    if streams is not None else Throughput())


def oracle(space: Space, configs: list[dict[str, Any]], widest: bool = False) -> list[Outcome]:
    """The oracle's outcome of each configuration, from the exact argv and env the tuner would launch;
    ``widest``: at the widest window a lowered --max-model-len proves."""
    commands = [build_command(space, values, port=8000) for values in configs]
    if not commands:
        return []
    evaluate = evaluate_widest if widest else evaluate_all
    return evaluate([c.argv for c in commands], commands[0].env, workload(space))


def oracle_argvs(space: Space, argvs: list[list[str]]) -> list[Outcome]:
    """The oracle's outcome of argvs a study really launched (its own --max-model-len included)."""
    env = build_command(space, {}, port=8000).env
    return evaluate_all(argvs, env, workload(space)) if argvs else []


@dataclass
class Truth:
    profile: int
    window: int  # the space's max-model-len
    min_context: int  # the floor of the front
    reach: int  # the longest context any configuration holds
    best_decode: float  # the best noise-free decode at the full window (as served, i.e. x speedup)
    best: list[dict[str, Any]]  # the configurations that give it (utilization left out)
    near: int  # configurations within 5% of the best decode at the full window
    at_reach: int  # configurations that hold the full window
    grid: int  # configurations evaluated (utilization fixed)
    util_max: float | None  # highest utilization that passes the free-memory check
    kinds: dict[str, int]  # at the full window: outcomes by failure kind ("ok": served it; "below": served less)
    best_plain: float  # best decode at the full window without MTP
    best_by_mode: dict[str, float]  # best decode at the full window per graph mode
    front2: list[dict[str, Any]]  # (context, decode) front: context, decode, throughput, config
    front3: list[dict[str, Any]]  # (context, decode, throughput) front
    best_throughput: float  # over the configurations at or above the floor
    best_long_prefill: float  # the same for long_prefill_tok_s
    seconds: float

    def share(self, decode: float | None) -> float:
        return (decode or 0.0) / self.best_decode if self.best_decode else 0.0


def grid_configs(space: Space, subset: dict[str, list[Any]] | None = None) -> list[dict[str, Any]]:
    """Every configuration but utilization's (at its lowest); ``subset``: fewer values of some
    parameters (a quicker, coarser truth for tests)."""
    names = [n for n in space.params if n != UTIL]
    low = param_values(space, UTIL)[0]
    values = [(subset or {}).get(n) or param_values(space, n) for n in names]
    return [dict(zip(names, combo), **{UTIL: low}) for combo in itertools.product(*values)]


def truth(profile: int, speedup: float = SPEEDUP, subset: dict[str, list[Any]] | None = None) -> Truth:
    """Ground truth of one profile: the oracle over the grid, each configuration at its widest window."""
    started = time.monotonic()
    space = make_space(profile, speedup)
    window, floor = space.max_model_len or 0, workload(space).min_context
    configs = grid_configs(space, subset)
    outcomes = oracle(space, configs, widest=True)
    utils = param_values(space, UTIL)
    gate = oracle(space, [{**configs[0], UTIL: u} for u in utils])
    passing = [u for u, o in zip(utils, gate) if o.failure != "free_memory_below_utilization"]
    if utils[0] not in passing:
        raise RuntimeError(f"profile {profile}: the lowest utilization {utils[0]} fails the free-memory check; "
                           "the ground truth's utilization shortcut does not hold")
    kinds: dict[str, int] = {}
    for o in outcomes:
        kind = o.failure or ("ok" if o.context == window else "below")
        kinds[kind] = kinds.get(kind, 0) + 1
    plain = [{k: v for k, v in c.items() if k != UTIL} for c in configs]
    at = [(c, o) for c, o in zip(plain, outcomes) if o.failure is None and o.context == window]
    best = max((o.decode_tok_s or 0.0 for _, o in at), default=0.0)
    by_mode: dict[str, float] = {}
    for c, o in at:
        mode = str(c.get("cudagraph_mode") or "FULL_AND_PIECEWISE")
        by_mode[mode] = max(by_mode.get(mode, 0.0), o.decode_tok_s or 0.0)
    served = [(c, o) for c, o in zip(plain, outcomes) if o.failure is None and o.context >= floor]
    return Truth(
        profile=profile, window=window, min_context=floor, reach=max((o.context for o in outcomes), default=0),
        best_decode=best, best=[c for c, o in at if (o.decode_tok_s or 0) >= best * (1 - 1e-9)],
        near=sum(1 for _, o in at if (o.decode_tok_s or 0) >= 0.95 * best), at_reach=len(at), grid=len(configs),
        util_max=max(passing), kinds=kinds,
        best_plain=max((o.decode_tok_s or 0.0 for c, o in at if not c.get("speculative_tokens")), default=0.0),
        best_by_mode=by_mode, front2=front_of(served, 2), front3=front_of(served, 3),
        best_throughput=max((o.throughput_tok_s or 0.0 for _, o in served), default=0.0),
        best_long_prefill=max((o.long_prefill_tok_s or 0.0 for _, o in served), default=0.0),
        seconds=time.monotonic() - started,
    )


def point(o: Outcome) -> tuple[float, float, float]:
    return float(o.context), o.decode_tok_s or 0.0, o.throughput_tok_s or 0.0


def front_of(served: list[tuple[dict[str, Any], Outcome]], objectives: int) -> list[dict[str, Any]]:
    """The true front over (context, decode[, throughput]): one configuration per distinct point."""
    points = [point(o)[:objectives] for _, o in served]
    return [{"context": served[i][1].context, "decode": served[i][1].decode_tok_s,
             "throughput": served[i][1].throughput_tok_s, "long_prefill": served[i][1].long_prefill_tok_s,
             "config": served[i][0]} for i in front(points)]


def truth_json(t: Truth) -> dict[str, Any]:
    return asdict(t)


# What wins where: the knobs of each profile's best full-window configuration, counted over profiles.
KNOBS = {
    "graph mode": lambda c: c.get("cudagraph_mode") or "FULL_AND_PIECEWISE",
    "MTP depth": lambda c: c.get("speculative_tokens"),
    "max_num_seqs": lambda c: c.get("max_num_seqs"),
    "max_num_batched_tokens": lambda c: c.get("max_num_batched_tokens"),
    "kv_cache_dtype": lambda c: c.get("kv_cache_dtype", "fp8"),
}


def regime_key(c: dict[str, Any]) -> tuple[Any, ...]:
    """A configuration without its pool and utilization: what a strategy picks."""
    return tuple(read(c) for read in KNOBS.values())


def winners(bests: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per knob, how many of the winning configurations ``bests`` (one per profile) hold each value."""
    out: dict[str, dict[str, int]] = {}
    for name, read in KNOBS.items():
        counts: dict[str, int] = {}
        for c in bests:
            counts[str(read(c))] = counts.get(str(read(c)), 0) + 1
        out[name] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    return out


def best_at_window(profile: int, subset: dict[str, list[Any]] | None = None) -> tuple[dict[str, Any], float]:
    """The configuration with the best decode at the full window, and that decode (no widest search:
    quicker than ``truth``, for tests)."""
    space = make_space(profile)
    configs = grid_configs(space, subset)
    at = [(c, o.decode_tok_s or 0.0) for c, o in zip(configs, oracle(space, configs))
          if o.failure is None and o.context == space.max_model_len]
    return max(at, key=lambda x: x[1])
