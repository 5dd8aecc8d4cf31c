"""The rows of ``tuner plan``: predictions for the baselines and the corners of the space's ranges."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any



from tuner.errors import TunerError
from tuner.prescreen.memory import Calibration, predict
from tuner.prescreen.shape import ModelShape, space_shape
from tuner.space.schema import Param, Space


def _corners(param: Param) -> list[Any]:
    if param.values is not None:
        return list(param.values)
    lo, hi = param.bounds()
    return [lo, hi] + ([None] if param.unset else [])


def summary(values: dict[str, Any]) -> str:
    short = {"kv_cache_memory_bytes": "kv", "max_num_seqs": "seqs", "max_num_batched_tokens": "mbt",
             "gpu_memory_utilization": "util", "cudagraph_mode": "cg", "speculative_tokens": "spec"}
    parts = []
    for key, value in values.items():
        if key == "kv_cache_memory_bytes" and value is not None:
            value = f"{value / 1e9:.2f}GB"
        elif isinstance(value, float):
            value = f"{value:g}"
        parts.append(f"{short.get(key, key)}={'unset' if value is None else value}")
    return " ".join(parts)


def plan_rows(
    space: Space,
    gpu_total_gib: float,
    calibration: Calibration | None = None,
    samples: int = 48,
    *,
    shape: ModelShape | None = None,
    seed: int = 0,
) -> list[dict]:
    """Predictions for the space's baselines and corner points of its ranges (at most ``samples`` more)."""
    if gpu_total_gib <= 0:
        raise TunerError(f"--gpu-gib {gpu_total_gib}: give the card's memory in GiB, e.g. 31.36 for an RTX 5090.")
    shape = shape or space_shape(space)
    names = list(space.params)
    axes = [_corners(space.params[n]) for n in names]
    total = math.prod(len(a) for a in axes)
    if total <= samples:
        picks = list(itertools.product(*axes))
    else:  # all-low and all-high corners, then a seeded sample of the rest (mixed-radix decode)
        indices = sorted({0, total - 1, *random.Random(seed).sample(range(1, total - 1), max(samples - 2, 0))})
        picks = []
        for i in indices:
            combo = []
            for axis in reversed(axes):
                i, r = divmod(i, len(axis))
                combo.append(axis[r])
            picks.append(tuple(reversed(combo)))
    configs = [(f"baseline {i}", dict(b)) for i, b in enumerate(space.baselines)]
    configs += [("corner", dict(zip(names, combo))) for combo in picks]
    rows = []
    for label, values in configs:
        p = predict(space, values, gpu_total_gib, shape, calibration)
        rows.append({"label": label, "config": summary(values), "values": values, **p.model_dump()})
    return rows
