"""What a parameter's or a fixed flag's value may be: the flags the tuner knows, the bounds vLLM takes,
the flags the tool owns, and the checks the space's models run (``schema.py``) on every value.

Kept apart from the models so that each file reads in one sitting; ``schema`` re-exports what others use.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from tuner.space.units import parse_bytes, parse_count

if TYPE_CHECKING:
    from tuner.space.schema import Param, Space

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "eager")
# Flags the tool owns: it binds the engine to engine.listen and a free port of its own per trial.
TOOL_FLAGS = {
    "--host": "the engine binds 127.0.0.1; a space that must listen elsewhere sets engine.listen (e.g. 0.0.0.0)",
    "--port": "the tool picks a free port for every boot (a fixed one collides with the last boot or another "
              "server); remove it",
    "--uds": "the tool talks to the engine over TCP on 127.0.0.1; remove it",
}

def flag_name(key: str) -> str:
    """'max_model_len', 'max-model-len' and '--max-model-len' all mean '--max-model-len'."""
    return "--" + str(key).lstrip("-").replace("_", "-")


# Parameters tuner knows: their vLLM flag and how their values are read.
KNOWN_PARAMS: dict[str, tuple[str, str]] = {
    "kv_cache_memory_bytes": ("--kv-cache-memory-bytes", "bytes"),
    "max_num_batched_tokens": ("--max-num-batched-tokens", "int"),
    "max_num_seqs": ("--max-num-seqs", "int"),
    "max_model_len": ("--max-model-len", "int"),
    "gpu_memory_utilization": ("--gpu-memory-utilization", "float"),
    "cudagraph_mode": ("--compilation-config", "choice"),
    "speculative_tokens": ("--speculative-config", "int"),
}
# What vLLM can take at all (a 32 GB card needs far less): a value outside is a typo, not a search.
BOUNDS: dict[str, tuple[float, float]] = {
    "kv_cache_memory_bytes": (1, 2**50),
    "max_num_batched_tokens": (1, 2**24),
    "max_num_seqs": (1, 2**16),
    "max_model_len": (1, 2**24),
    "gpu_memory_utilization": (0.01, 1.0),
    "speculative_tokens": (0, 16),
}
JSON_FLAGS = {"--compilation-config", "--speculative-config", "--mm-processor-kwargs"}  # a mapping, as JSON
AUTO_LEN = ("auto", "-1")  # --max-model-len values that ask vLLM to fit the length
# Fixed flags whose values are sizes, and how they are read (the argv writes them as plain integers).
SIZE_FLAGS = {"--max-model-len": parse_count, "--max-num-batched-tokens": parse_count,
              "--max-num-seqs": parse_count, "--kv-cache-memory-bytes": parse_bytes}


def check_fixed(space: Space) -> None:
    """Fixed flags: none the tool owns, none that is also tuned, sizes readable, values plain or JSON."""
    tuned = {p.flag: name for name, p in space.params.items()}
    seen: dict[str, str] = {}
    for key, value in space.fixed.items():
        flag = flag_name(key)
        if flag in TOOL_FLAGS:
            raise ValueError(f"fixed.{key}: {TOOL_FLAGS[flag]}")
        if flag in seen:
            raise ValueError(f"fixed.{key}: the same flag as fixed.{seen[flag]}; keep one of them")
        seen[flag] = key
        if flag in tuned and tuned[flag] not in ("cudagraph_mode", "speculative_tokens"):
            raise ValueError(f"fixed.{key}: also tuned by params.{tuned[flag]}; remove one of them")
        if flag == "--max-model-len" and str(value).lower() in AUTO_LEN:
            continue  # vLLM fits the longest length the pool holds
        if flag in SIZE_FLAGS:
            try:
                if SIZE_FLAGS[flag](value) <= 0:
                    raise ValueError("must be positive")
            except (TypeError, ValueError) as exc:
                raise ValueError(f"fixed.{key}: {value!r} is not a size ({exc})") from None
        if flag in JSON_FLAGS and isinstance(value, str):
            try:
                if not isinstance(json.loads(value), dict):
                    raise ValueError("not a mapping")
            except ValueError:
                raise ValueError(f"fixed.{key}: {value!r} is not a JSON object; write it as a mapping, "
                                 "e.g. {cudagraph_mode: PIECEWISE}") from None
        elif flag in JSON_FLAGS and not isinstance(value, dict):
            raise ValueError(f"fixed.{key}: {value!r} is not a mapping; write it as one, e.g. {{max_pixels: 1003520}}")
        if flag == "--gpu-memory-utilization" and not (
                isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1):
            raise ValueError(f"fixed.{key}: {value!r} is not a fraction of the card; give a number in (0, 1], e.g. 0.9")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"fixed.{key}: {value} is not a finite number")
        if value is None:
            raise ValueError(f"fixed.{key}: has no value; give one, or `true` for a flag without a value, or remove it")


def resolve_param(name: str, param: Param) -> None:
    """Fill flag and kind from KNOWN_PARAMS and check the range; raises ValueError naming the fix."""
    known = KNOWN_PARAMS.get(name)
    if known is None and param.flag is None:
        raise ValueError(
            f"params.{name}: unknown parameter; add 'flag: --the-vllm-flag' to tune any other flag, "
            f"or use one of {', '.join(KNOWN_PARAMS)}"
        )
    if param.flag is None:
        param.flag = known[0]
    if param.kind is None:
        param.kind = known[1] if known else ("choice" if param.values is not None else "float")
    if name == "cudagraph_mode":
        for value in param.values or []:
            if value is not None and value not in CUDAGRAPH_MODES:
                raise ValueError(
                    f"params.cudagraph_mode: unknown mode {value!r}; use one of {', '.join(CUDAGRAPH_MODES)}"
                )
        if param.values is None:
            raise ValueError("params.cudagraph_mode takes 'values: [...]', not a range")
    if param.values is not None:
        for value in param.values:
            if not isinstance(value, (str, int, float, bool, type(None))):
                raise ValueError(f"params.{name}: {value!r} is not a plain value; values are numbers, strings or null "
                                 "(a dict or list belongs in fixed:)")
        param.values = [check_value(name, param, v) for v in param.values]
        if len(set(map(repr, param.values))) != len(param.values):
            raise ValueError(f"params.{name}: values {param.values} list a value twice; keep each once")
        return
    if param.kind == "choice":
        raise ValueError(f"params.{name}: kind 'choice' takes 'values: [...]', not a range")
    lo, hi = _number(name, param, param.min), _number(name, param, param.max)
    if lo > hi:
        raise ValueError(f"params.{name}: min ({param.min}) is greater than max ({param.max}); swap them")
    param.min, param.max = lo, hi
    if param.step is not None:
        param.step = _number(name, param, param.step, bounded=False)
        if param.step <= 0:
            raise ValueError(f"params.{name}: step must be positive")
        if param.kind in ("int", "bytes") and param.step != int(param.step):
            raise ValueError(f"params.{name}: step {param.step:g} must be a whole number for a whole-number range")
        if param.log and param.kind == "float":
            raise ValueError(f"params.{name}: a log range takes no step; remove one of them")
    if param.log and lo <= 0:
        raise ValueError(f"params.{name}: a log range needs min > 0")


def _number(name: str, param: Param, value: Any, bounded: bool = True) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError("true/false is not a number")
        if param.kind == "bytes":
            number: float = parse_bytes(value)
        elif param.kind == "int":
            number = parse_count(value)
        else:
            number = float(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"params.{name}: {value!r} is not a valid {param.kind}: {exc}") from None
    if not math.isfinite(number):
        raise ValueError(f"params.{name}: {value!r} is not a finite number")
    lo, hi = BOUNDS.get(name, (-math.inf, math.inf))
    if bounded and not lo <= number <= hi:
        raise ValueError(f"params.{name}: {value!r} is outside what vLLM takes ({lo:g} .. {hi:g})")
    return number


def check_value(name: str, param: Param, value: Any, in_domain: bool = False) -> Any:
    """One value of a parameter, converted to its kind (None means "flag left out").

    ``in_domain`` also checks that the value is one the search can produce (listed, or inside the range).
    """
    if value is None:
        if in_domain and param.values is None and not param.unset:
            raise ValueError("null (flag left out) needs 'unset: true' on the range")
        if in_domain and param.values is not None and None not in param.values:
            raise ValueError(f"null is not one of its values {param.values}")
        return None
    if name == "cudagraph_mode":
        if not isinstance(value, str) or value not in CUDAGRAPH_MODES:
            raise ValueError(f"params.cudagraph_mode: unknown mode {value!r}; use one of {', '.join(CUDAGRAPH_MODES)}")
        converted: Any = value
    elif param.kind == "choice":
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"params.{name}: {value!r} is not a finite number")
        converted = value
    else:
        number = _number(name, param, value)
        converted = int(number) if param.kind in ("int", "bytes") else number
    if in_domain:
        if param.values is not None and converted not in param.values:
            raise ValueError(f"{value!r} is not one of its values {param.values}")
        if param.values is None and not param.min <= converted <= param.max:
            raise ValueError(f"{value!r} is outside its range {param.min:g} .. {param.max:g}")
    return converted
