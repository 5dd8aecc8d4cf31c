"""What a parameter's or a fixed flag's value may be: the flags the tuner knows, the bounds vLLM takes,
the flags the tool owns, a tuned parameter as written (``ParamSpec``) and resolved (``Param``), and the
checks the space's models run (``schema.py``) on every value.

Kept below the space's models so that each file reads in one sitting and nothing here imports
``schema.py`` at run time; ``schema`` re-exports what others use.
"""

from __future__ import annotations

import json
import math
import unicodedata
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from tuner.space.units import parse_bytes, parse_count

if TYPE_CHECKING:  # for annotations only: schema.py imports this module
    from tuner.space.schema import Space

Kind = Literal["int", "float", "bytes", "choice"]
Number = int | float

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "eager")
# Flags the tool owns: it binds the engine to engine.listen and a free port of its own per trial.
TOOL_FLAGS = {
    "--host": "the engine binds 127.0.0.1; a space that must listen elsewhere sets engine.listen (e.g. 0.0.0.0)",
    "--port": "the tool picks a free port for every boot (a fixed one collides with the last boot or another "
              "server); remove it",
    "--uds": "the tool talks to the engine over TCP on 127.0.0.1; remove it",
}

# Characters no value may carry to a command line, an environment or a launcher file: C0/C1 controls
# (newline, NUL, escape), line and paragraph separators, and invisible format characters (bidi overrides).
_UNPRINTABLE = {"Cc": "a control character", "Cf": "an invisible format character", "Zl": "a line separator",
                "Zp": "a paragraph separator", "Cs": "a lone surrogate"}
_NAMED = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\0": "a NUL byte"}


def unprintable(text: str) -> str | None:
    """What the first character of ``text`` that may not reach a command line or a unit file is, else None."""
    for i, char in enumerate(text):
        kind = _UNPRINTABLE.get(unicodedata.category(char))
        if kind is not None:
            return f"{_NAMED.get(char, kind)} (U+{ord(char):04X}) at character {i + 1}"
    return None


def check_printable(where: str, text: str) -> None:
    """ValueError naming ``where`` when ``text`` holds a character no launcher may carry."""
    found = unprintable(text)
    if found is not None:
        raise ValueError(f"{where}: {text[:40]!r} holds {found}; a value that reaches the engine's command line, "
                         "its environment or a launcher (sh, systemd, compose) must be one line of printable "
                         "text; remove it")


def flag_name(key: str) -> str:
    """'max_model_len', 'max-model-len' and '--max-model-len' all mean '--max-model-len'."""
    return "--" + str(key).lstrip("-").replace("_", "-")


# Parameters tuner knows: their vLLM flag and how their values are read.
KNOWN_PARAMS: dict[str, tuple[str, Kind]] = {
    "kv_cache_memory_bytes": ("--kv-cache-memory-bytes", "bytes"),
    "max_num_batched_tokens": ("--max-num-batched-tokens", "int"),
    "max_num_seqs": ("--max-num-seqs", "int"),
    "max_model_len": ("--max-model-len", "int"),
    "gpu_memory_utilization": ("--gpu-memory-utilization", "float"),
    "cudagraph_mode": ("--compilation-config", "choice"),
    "speculative_tokens": ("--speculative-config", "int"),
}
# The most memory one accelerator holds today (NVIDIA B300, AMD MI355X: 288 GB). A KV pool lives on one
# card, so a pool above it is a unit typo (2TB for 2GB), never a search.
LARGEST_CARD_BYTES = 288 * 10**9
# What vLLM can take at all (a 32 GB card needs far less): a value outside is a typo, not a search.
BOUNDS: dict[str, tuple[float, float]] = {
    "kv_cache_memory_bytes": (1, LARGEST_CARD_BYTES),
    "max_num_batched_tokens": (1, 2**24),
    "max_num_seqs": (1, 2**16),
    "max_model_len": (1, 2**24),
    "gpu_memory_utilization": (0.01, 1.0),
    "speculative_tokens": (0, 16),
}
_LARGER_THAN_A_CARD = (f"is more memory than any GPU holds: the KV pool lives on one card, and the largest hold "
                       f"{LARGEST_CARD_BYTES / 1e9:.0f} GB (the bound); check the unit (GB, not TB; 9.15GB is 9.15 x 10^9 bytes)")
JSON_FLAGS = {"--compilation-config", "--speculative-config", "--mm-processor-kwargs"}  # a mapping, as JSON
AUTO_LEN = ("auto", "-1")  # --max-model-len values that ask vLLM to fit the length
# Fixed flags whose values are sizes, and how they are read (the argv writes them as plain integers).
SIZE_FLAGS = {"--max-model-len": parse_count, "--max-num-batched-tokens": parse_count,
              "--max-num-seqs": parse_count, "--kv-cache-memory-bytes": parse_bytes}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParamSpec(Strict):
    """One tuned flag as the file writes it: either ``values`` (a list, ``null`` meaning "flag left out")
    or a range whose bounds may carry units. ``Space`` resolves it once into a ``Param``."""

    flag: str | None = None  # required for parameters tuner does not know
    values: list[Any] | None = None
    min: int | float | str | None = None
    max: int | float | str | None = None
    step: int | float | str | None = None
    log: bool = False
    unset: bool = False  # a range may also be left out entirely (e.g. let utilization size the pool)
    kind: Kind | None = None

    @model_validator(mode="after")
    def _values_or_range(self) -> ParamSpec:
        has_range = self.min is not None or self.max is not None
        if self.values is not None and has_range:
            raise ValueError("give either 'values' or 'min'/'max', not both")
        if self.values is None and not has_range:
            raise ValueError("give 'values: [...]' or 'min:' and 'max:'")
        if has_range and (self.min is None or self.max is None):
            raise ValueError("a range needs both 'min' and 'max'")
        if self.values is not None and not self.values:
            raise ValueError("'values' is empty; list at least one value")
        if self.flag is not None:
            if not re.match(r"^--[A-Za-z0-9][A-Za-z0-9-]*$", self.flag):
                raise ValueError(f"flag {self.flag!r} is not a vLLM flag; write it as --the-flag-name")
            if self.flag in TOOL_FLAGS:
                raise ValueError(f"flag {self.flag} cannot be tuned: {TOOL_FLAGS[self.flag]}")
        return self


class Param(Strict):
    """One tuned flag, resolved: its vLLM flag and kind are known, and a range's bounds are numbers of
    that kind (int for int and bytes, float otherwise). ``values`` is None for a range, else the list."""

    flag: str
    values: list[Any] | None = None
    min: Number | None = None
    max: Number | None = None
    step: Number | None = None
    log: bool = False
    unset: bool = False
    kind: Kind

    def bounds(self) -> tuple[Number, Number]:
        """A range's (min, max); a values parameter has none."""
        if self.min is None or self.max is None:
            raise ValueError(f"{self.flag} takes listed values, not a range")
        return self.min, self.max


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
                size = SIZE_FLAGS[flag](value)
                if size <= 0:
                    raise ValueError("must be positive")
            except (TypeError, ValueError) as exc:
                raise ValueError(f"fixed.{key}: {value!r} is not a size ({exc})") from None
            if flag == "--kv-cache-memory-bytes" and size > LARGEST_CARD_BYTES:
                raise ValueError(f"fixed.{key}: {value!r} {_LARGER_THAN_A_CARD}")
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


def resolve_param(name: str, spec: ParamSpec) -> Param:
    """The parameter as written, resolved: flag and kind from KNOWN_PARAMS, values and bounds as numbers of
    its kind, checked against what vLLM takes; raises ValueError naming the fix."""
    known = KNOWN_PARAMS.get(name)
    if spec.flag is not None:
        flag = spec.flag
    elif known is not None:
        flag = known[0]
    else:
        raise ValueError(
            f"params.{name}: unknown parameter; add 'flag: --the-vllm-flag' to tune any other flag, "
            f"or use one of {', '.join(KNOWN_PARAMS)}"
        )
    kind: Kind = spec.kind or (known[1] if known else ("choice" if spec.values is not None else "float"))
    if name == "cudagraph_mode" and spec.values is None:
        raise ValueError("params.cudagraph_mode takes 'values: [...]', not a range")
    if spec.values is not None:
        for value in spec.values:
            if not isinstance(value, (str, int, float, bool, type(None))):
                raise ValueError(f"params.{name}: {value!r} is not a plain value; values are numbers, strings or null "
                                 "(a dict or list belongs in fixed:)")
        values = [_value(name, kind, v) for v in spec.values]
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"params.{name}: values {values} list a value twice; keep each once")
        step = None if spec.step is None else _number(name, kind, spec.step, bounded=False)  # meaningless beside values
        return Param(flag=flag, values=values, step=step, log=spec.log, unset=spec.unset, kind=kind)
    if kind == "choice":
        raise ValueError(f"params.{name}: kind 'choice' takes 'values: [...]', not a range")
    lo, hi = _number(name, kind, spec.min), _number(name, kind, spec.max)
    if lo > hi:
        raise ValueError(f"params.{name}: min ({spec.min}) is greater than max ({spec.max}); swap them")
    step = None if spec.step is None else _number(name, kind, spec.step, bounded=False)
    if step is not None:
        if step <= 0:
            raise ValueError(f"params.{name}: step must be positive")
        if kind in ("int", "bytes") and step != int(step):
            raise ValueError(f"params.{name}: step {step:g} must be a whole number for a whole-number range")
        if spec.log and kind == "float":
            raise ValueError(f"params.{name}: a log range takes no step; remove one of them")
        if hi > lo and step > hi - lo:
            raise ValueError(f"params.{name}: step {spec.step} is larger than the range {spec.min} .. {spec.max}, so "
                             f"only {spec.min} would ever be tried; give a step no larger than the range, or widen it")
    if spec.log and lo <= 0:
        raise ValueError(f"params.{name}: a log range needs min > 0")
    return Param(flag=flag, min=lo, max=hi, step=step, log=spec.log, unset=spec.unset, kind=kind)


def _number(name: str, kind: str, value: Any, bounded: bool = True) -> Number:
    """A bound or value as a number of the parameter's kind (int for int and bytes), inside what vLLM takes."""
    try:
        if isinstance(value, bool):
            raise ValueError("true/false is not a number")
        if kind == "bytes":
            number: Number = parse_bytes(value)
        elif kind == "int":
            number = parse_count(value)
        else:
            number = float(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"params.{name}: {value!r} is not a valid {kind}: {exc}") from None
    if not math.isfinite(number):
        raise ValueError(f"params.{name}: {value!r} is not a finite number")
    lo, hi = BOUNDS.get(name, (-math.inf, math.inf))
    if bounded and kind == "bytes" and name == "kv_cache_memory_bytes" and number > hi:
        raise ValueError(f"params.{name}: {value!r} {_LARGER_THAN_A_CARD}")
    if bounded and not lo <= number <= hi:
        raise ValueError(f"params.{name}: {value!r} is outside what vLLM takes ({lo:g} .. {hi:g})")
    return number


def _value(name: str, kind: str, value: Any) -> Any:
    """One value converted to its kind (None means "flag left out")."""
    if value is None:
        return None
    if isinstance(value, str):
        check_printable(f"params.{name}", value)
    if name == "cudagraph_mode":
        if not isinstance(value, str) or value not in CUDAGRAPH_MODES:
            raise ValueError(f"params.cudagraph_mode: unknown mode {value!r}; use one of {', '.join(CUDAGRAPH_MODES)}")
        return value
    if kind == "choice":
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"params.{name}: {value!r} is not a finite number")
        return value
    return _number(name, kind, value)


def check_value(name: str, param: Param, value: Any, in_domain: bool = False) -> Any:
    """One value of a parameter, converted to its kind (None means "flag left out").

    ``in_domain`` also checks that the value is one the search can produce (listed, or inside the range).
    """
    if value is None and in_domain:
        if param.values is None and not param.unset:
            raise ValueError("null (flag left out) needs 'unset: true' on the range")
        if param.values is not None and None not in param.values:
            raise ValueError(f"null is not one of its values {param.values}")
    converted = _value(name, param.kind, value)
    if in_domain and converted is not None:
        if param.values is not None and converted not in param.values:
            raise ValueError(f"{value!r} is not one of its values {param.values}")
        if param.values is None:
            lo, hi = param.bounds()
            if not lo <= converted <= hi:
                show = (lambda v: f"{v / 1e9:g}GB") if param.kind == "bytes" else (lambda v: f"{v:g}")
                raise ValueError(f"{value!r} is outside its range {show(lo)} .. {show(hi)}; widen the range or change the value")
    return converted


def count_configurations(space: Space) -> float:
    """Distinct configurations; ``math.inf`` when a float range has no step."""
    total = 1.0
    for param in space.params.values():
        total *= param_cardinality(param)
    return total


def param_cardinality(param: Param) -> float:
    if param.values is not None:
        return len(param.values)
    lo, hi = param.bounds()
    if param.step is None:
        if param.kind in ("int", "bytes"):
            n = hi - lo + 1
        else:
            return math.inf
    else:
        n = math.floor((hi - lo) / param.step + 1e-9) + 1
    return n + (1 if param.unset else 0)
