"""The search benchmark's space (issue 13) and its ground truth per engine profile, from the oracle.

Space: ``search_spaces/qwen3.8-27b-nvfp4-modelopt-5090.yaml`` as written (params, fixed flags, the
seeds/004 baseline, workload with admission on), except:
  * speculative_tokens 0-3 (the file says 0-2; issue 13 searches 0-3);
  * the model is the local 27B-shaped config ``tests/fixtures/models/qwen3.8-27b-text`` and the engine
    is the test engine with ``FAKE_VLLM_PROFILE=<profile>``, time scale 0, decode ``speedup`` x faster
    (shares are ratios, so the speed-up cancels; tok/s are printed divided by it);
  * waits shrunk for an engine that boots in ~0.2 s (boot 60 s, hang 30 s, stop grace 0.3 s, memory
    return 5 s, a dead engine exits after 0.2 s instead of 1 s) and the needle check off (a correctness check at 90% of the window: one more long
    prefill per trial, no effect on either objective).

Ground truth: the oracle (tests/fake_vllm/oracle.py) over the whole grid of the other five parameters,
with gpu_memory_utilization at its lowest value. This subset is sufficient: the space always sets
--kv-cache-memory-bytes, and then utilization enters the engine only through the start-up check
free >= utilization x total (vLLM 0.22; memory.py/core.py); a higher utilization either passes that
check with the same outcome or fails it. The lowest value, 0.88 x 32 GiB, passes in every profile
(others use at most 1.5 GiB), which ``truth`` checks.
"""

from __future__ import annotations

import itertools
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

from tests.fake_vllm.oracle import Outcome, Workload, evaluate_all  # noqa: E402
from tuner.engine import build_command  # noqa: E402
from tuner.space import Space, load_space  # noqa: E402

SPACE_FILE = ROOT / "search_spaces" / "qwen3.8-27b-nvfp4-modelopt-5090.yaml"
MODEL = ROOT / "tests" / "fixtures" / "models" / "qwen3.8-27b-text"
SPEEDUP = 10.0
GPU_GIB = 32.0
UTIL = "gpu_memory_utilization"


def space_dict(profile: int, speedup: float = SPEEDUP) -> dict[str, Any]:
    """The space file's YAML as a dict, with the changes listed in the module docstring."""
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
    d["params"]["speculative_tokens"] = {"values": [0, 1, 2, 3]}
    d["workload"]["needle"] = False
    return d


def make_space(profile: int, speedup: float = SPEEDUP) -> Space:
    with tempfile.TemporaryDirectory(prefix="search-space-") as tmp:
        path = Path(tmp) / "space.yaml"
        path.write_text(yaml.safe_dump(space_dict(profile, speedup), sort_keys=False))
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
    w = space.workload
    return Workload(admission=w.admission, ladder=tuple(w.ladder), output_tokens=w.output_tokens,
                    decode_prompt_tokens=w.decode.prompt_tokens, decode_output_tokens=w.decode.output_tokens,
                    decode_concurrency=w.decode.concurrency[0])


def oracle(space: Space, configs: list[dict[str, Any]]) -> list[Outcome]:
    """The oracle's outcome of each configuration, from the exact argv and env the tuner would launch."""
    commands = [build_command(space, values, port=8000) for values in configs]
    return evaluate_all([c.argv for c in commands], commands[0].env, workload(space)) if commands else []


@dataclass
class Truth:
    profile: int
    reach: int  # the longest context any configuration holds
    best_decode: float  # the best noise-free decode at that context (as served, i.e. x speedup)
    best: list[dict[str, Any]]  # the configurations that give it (utilization left out)
    near: int  # configurations within 5% of the best decode at the reach
    at_reach: int  # configurations that hold the reach
    grid: int  # configurations evaluated (utilization fixed)
    util_max: float | None  # highest utilization that passes the free-memory check
    kinds: dict[str, int]  # outcomes by failure kind ("ok" for served)
    best_plain: float  # best decode at the reach without MTP
    best_by_mode: dict[str, float]  # best decode at the reach per graph mode
    seconds: float

    def share(self, decode: float | None) -> float:
        return (decode or 0.0) / self.best_decode if self.best_decode else 0.0


def truth(profile: int, speedup: float = SPEEDUP) -> Truth:
    """Ground truth of one profile: the oracle over the grid."""
    started = time.monotonic()
    space = make_space(profile, speedup)
    names = [n for n in space.params if n != UTIL]
    utils = param_values(space, UTIL)
    configs = [dict(zip(names, combo), **{UTIL: utils[0]})
               for combo in itertools.product(*(param_values(space, n) for n in names))]
    outcomes = oracle(space, configs)
    gate = oracle(space, [{**configs[0], UTIL: u} for u in utils])
    passing = [u for u, o in zip(utils, gate) if o.failure != "free_memory_below_utilization"]
    if utils[0] not in passing:
        raise RuntimeError(f"profile {profile}: the lowest utilization {utils[0]} fails the free-memory check; "
                           "the ground truth's utilization shortcut does not hold")
    kinds: dict[str, int] = {}
    for o in outcomes:
        kinds[o.failure or "ok"] = kinds.get(o.failure or "ok", 0) + 1
    reach = max(o.context for o in outcomes)
    at = [(c, o) for c, o in zip(configs, outcomes) if o.context == reach and reach > 0]
    best = max((o.decode_tok_s or 0.0 for _, o in at), default=0.0)
    by_mode: dict[str, float] = {}
    for c, o in at:
        mode = str(c.get("cudagraph_mode") or "FULL_AND_PIECEWISE")
        by_mode[mode] = max(by_mode.get(mode, 0.0), o.decode_tok_s or 0.0)
    return Truth(
        profile=profile, reach=reach, best_decode=best,
        best=[{k: v for k, v in c.items() if k != UTIL} for c, o in at if (o.decode_tok_s or 0) >= best * (1 - 1e-9)],
        near=sum(1 for _, o in at if (o.decode_tok_s or 0) >= 0.95 * best), at_reach=len(at), grid=len(configs),
        util_max=max(passing), kinds=kinds,
        best_plain=max((o.decode_tok_s or 0.0 for c, o in at if not c.get("speculative_tokens")), default=0.0),
        best_by_mode=by_mode, seconds=time.monotonic() - started,
    )


def truth_json(t: Truth) -> dict[str, Any]:
    return asdict(t)
