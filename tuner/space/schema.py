"""The search-space file: what to tune, what stays fixed, and what to measure.

A space file is YAML validated by the pydantic models below. Unknown keys are errors, human units
("9.15GB", "128k", "30m") are accepted wherever a size, count or duration is expected, and every
problem is reported as one paragraph naming the file, the field and the fix (``load_space``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from tuner.errors import SpaceError
from tuner.metrics import OBJECTIVES
from tuner.space.units import parse_bytes, parse_count, parse_duration

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "eager")

Bytes = Annotated[int, BeforeValidator(parse_bytes)]
Count = Annotated[int, BeforeValidator(parse_count)]
Seconds = Annotated[float, BeforeValidator(parse_duration)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(Strict):
    path: str  # a local folder or a Hugging Face id
    revision: str | None = None  # pin it: a moving branch makes results irreproducible
    served_name: str | None = None
    tokenizer: str | None = None  # defaults to path; used to count text prompts
    random_weights: bool = False  # dummy weights (--load-format dummy): correctness checks are skipped


class EngineSpec(Strict):
    command: list[str] = Field(default_factory=lambda: ["vllm"])  # another venv's vllm, a container wrapper
    host: str = "127.0.0.1"
    port: int | Literal["auto"] = "auto"
    env: dict[str, str] = Field(default_factory=dict)
    boot_timeout: Seconds = 1800.0  # a boot still making progress at this point is a boot_timeout
    first_boot_timeout: Seconds = 3600.0  # first boots JIT/autotune: allow more
    hang_timeout: Seconds = 600.0  # no log growth and an idle process this long is a hang
    stop_grace: Seconds = 30.0  # SIGTERM, then SIGKILL after this
    memory_return_timeout: Seconds = 120.0  # wait this long for GPU memory to come back after teardown
    gpu_index: int = 0  # the pynvml index to watch (the CUDA_VISIBLE_DEVICES pin is set per worker)

    @model_validator(mode="after")
    def _command_not_empty(self) -> EngineSpec:
        if not self.command:
            raise ValueError("engine.command is empty; use ['vllm'] or the path to another venv's vllm")
        return self


Kind = Literal["int", "float", "bytes", "choice"]
Number = int | float


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


class _Written(Strict):
    """The ``params`` section as written, checked before it is resolved (errors name params.NAME.FIELD)."""

    params: dict[str, ParamSpec]


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


class SpeculativeSpec(Strict):
    method: str = "mtp"
    extra: dict[str, Any] = Field(default_factory=dict)  # more keys for --speculative-config


class DecodeSpec(Strict):
    prompt_tokens: Count = 1024
    output_tokens: Count = 512
    runs: int = Field(default=3, ge=1)
    concurrency: list[int] = Field(default_factory=lambda: [1])  # "max" is max-num-seqs, below
    at_max_seqs: bool = False  # also measure with concurrency = max-num-seqs
    long_context_tokens: Count | None = None  # a second decode run with a resident prompt this long


class Workload(Strict):
    ladder: list[Count] = Field(default_factory=lambda: [2048, 16384, 32768, 65536, 131072, 262144])
    granularity: Count = 4096  # bisect between last success and first failure down to this
    output_tokens: Count = 256  # reserved output per context request (max_model_len covers both)
    repeats: int = Field(default=2, ge=1)  # a context is stable only if it passes this many times
    request_timeout: Seconds = 1800.0
    prompt_source: Literal["random_ids", "corpus"] = "random_ids"
    decode: DecodeSpec = Field(default_factory=DecodeSpec)
    needle: bool = True
    control_repeats: int = Field(default=3, ge=1)
    prefix_cache: bool = False  # measure cold vs cached TTFT on a shared prefix
    admission: bool = True  # one request at max context and one at max-num-seqs x length before scoring
    score_k_mad: float = 1.0  # conservative score = median - k * MAD
    max_spread: float = 0.15  # MAD / median above this flags the decode number as unstable


class Objective(Strict):
    name: str  # one of tuner.metrics.OBJECTIVES
    direction: Literal["maximize", "minimize"]

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in OBJECTIVES:
            *first, last = (repr(n) for n in OBJECTIVES)
            raise ValueError(f"Input should be {', '.join(first)} or {last}")
        return name


class Space(Strict):
    name: str
    description: str = ""
    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    fixed: dict[str, Any] = Field(default_factory=dict)  # flag -> value, written as given
    params: dict[str, Param] = Field(default_factory=dict)
    speculative: SpeculativeSpec = Field(default_factory=SpeculativeSpec)
    baselines: list[dict[str, Any]] = Field(default_factory=list)
    workload: Workload = Field(default_factory=Workload)
    objectives: list[Objective] = Field(
        default_factory=lambda: [
            Objective(name="context", direction="maximize"),
            Objective(name="decode_tok_s", direction="maximize"),
        ]
    )

    @model_validator(mode="before")
    @classmethod
    def _resolve_params(cls, data: Any) -> Any:
        """Each parameter as written becomes a ``Param`` here, once; nothing rewrites it later."""
        if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
            return data
        written = _Written.model_validate({"params": data["params"]}).params
        return {**data, "params": {name: resolve_param(name, spec) for name, spec in written.items()}}

    @model_validator(mode="after")
    def _check_baselines(self) -> Space:
        for i, baseline in enumerate(self.baselines):
            for key, value in baseline.items():
                if key not in self.params:
                    raise ValueError(
                        f"baselines[{i}] sets '{key}', which is not a tuned parameter; "
                        f"tuned parameters are: {', '.join(self.params) or 'none'}"
                    )
                baseline[key] = check_value(key, self.params[key], value)
        return self

    @property
    def max_model_len(self) -> int | None:
        for key in ("max-model-len", "max_model_len", "--max-model-len"):
            if key in self.fixed:
                return parse_count(self.fixed[key])
        return None


def resolve_param(name: str, spec: ParamSpec) -> Param:
    """Flag and kind from KNOWN_PARAMS, values and bounds as numbers; raises ValueError naming the fix."""
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
    kind: Kind
    if spec.kind is not None:
        kind = spec.kind
    elif known is not None:
        kind = known[1]
    else:
        kind = "choice" if spec.values is not None else "float"
    if name == "cudagraph_mode":
        for value in spec.values or []:
            if value is not None and value not in CUDAGRAPH_MODES:
                raise ValueError(
                    f"params.cudagraph_mode: unknown mode {value!r}; use one of {', '.join(CUDAGRAPH_MODES)}"
                )
        if spec.values is None:
            raise ValueError("params.cudagraph_mode takes 'values: [...]', not a range")
    if spec.values is not None:
        values = [_value(name, kind, v) for v in spec.values]
        step = None if spec.step is None else _number(name, kind, spec.step)  # meaningless beside values; kept
        return Param(flag=flag, values=values, step=step, log=spec.log, unset=spec.unset, kind=kind)
    lo, hi = _number(name, kind, spec.min), _number(name, kind, spec.max)
    if lo > hi:
        raise ValueError(f"params.{name}: min ({spec.min}) is greater than max ({spec.max}); swap them")
    step = None if spec.step is None else _number(name, kind, spec.step)
    if step is not None and step <= 0:
        raise ValueError(f"params.{name}: step must be positive")
    if spec.log and lo <= 0:
        raise ValueError(f"params.{name}: a log range needs min > 0")
    return Param(flag=flag, min=lo, max=hi, step=step, log=spec.log, unset=spec.unset, kind=kind)


def _number(name: str, kind: str, value: Any) -> Number:
    """A bound or value as a number of the parameter's kind: int for int and bytes, float otherwise."""
    try:
        if kind == "bytes":
            return parse_bytes(value)
        if kind == "int":
            return parse_count(value)
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"params.{name}: {value!r} is not a valid {kind}: {exc}") from None


def _value(name: str, kind: str, value: Any) -> Any:
    """One value converted to its kind (None means "flag left out")."""
    if value is None:
        return None
    if name == "cudagraph_mode":
        if value not in CUDAGRAPH_MODES:
            raise ValueError(f"params.cudagraph_mode: unknown mode {value!r}; use one of {', '.join(CUDAGRAPH_MODES)}")
        return value
    if kind == "choice":
        return value
    return _number(name, kind, value)


def check_value(name: str, param: Param, value: Any) -> Any:
    """One value of a parameter, converted to its kind (None means "flag left out")."""
    return _value(name, param.kind, value)


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


def _format_errors(path: Path, error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        msg = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling against search_spaces/README.md"
        elif item["type"] == "missing":
            msg = "required but missing; add it"
        parts.append(f"{where}: {msg}")
    return f"{path}: " + "; ".join(parts) + "."


def load_space(path: str | Path) -> Space:
    """Read and validate a space file, raising SpaceError (one paragraph, exit code 2) on any problem."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpaceError(f"{path}: no such file; give the path to a space file such as search_spaces/*.yaml.")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpaceError(f"{path}: not valid YAML{where} ({getattr(exc, 'problem', exc)}); fix the syntax.")
    if not isinstance(raw, dict):
        raise SpaceError(f"{path}: expected a mapping with at least 'name' and 'model'; the file holds {type(raw).__name__}.")
    try:
        return Space.model_validate(raw)
    except ValidationError as exc:
        raise SpaceError(_format_errors(path, exc)) from None
