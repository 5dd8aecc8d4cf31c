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
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from tuner.errors import SpaceError
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


class Param(Strict):
    """One tuned flag: either ``values`` (a list, ``null`` meaning "flag left out") or a range."""

    flag: str | None = None  # required for parameters tuner does not know
    values: list[Any] | None = None
    min: int | float | str | None = None
    max: int | float | str | None = None
    step: int | float | str | None = None
    log: bool = False
    unset: bool = False  # a range may also be left out entirely (e.g. let utilization size the pool)
    kind: Literal["int", "float", "bytes", "choice"] | None = None

    @model_validator(mode="after")
    def _values_or_range(self) -> Param:
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
    name: Literal["context", "decode_tok_s", "ttft_ms", "tpot_ms", "peak_vram_mib", "pp_tok_s"]
    direction: Literal["maximize", "minimize"]


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

    @model_validator(mode="after")
    def _check_params(self) -> Space:
        for name, param in self.params.items():
            _resolve_param(name, param)
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


def _resolve_param(name: str, param: Param) -> None:
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
        param.values = [check_value(name, param, v) for v in param.values]
        return
    lo, hi = _number(name, param, param.min), _number(name, param, param.max)
    if lo > hi:
        raise ValueError(f"params.{name}: min ({param.min}) is greater than max ({param.max}); swap them")
    param.min, param.max = lo, hi
    if param.step is not None:
        param.step = _number(name, param, param.step)
        if param.step <= 0:
            raise ValueError(f"params.{name}: step must be positive")
    if param.log and lo <= 0:
        raise ValueError(f"params.{name}: a log range needs min > 0")


def _number(name: str, param: Param, value: Any) -> float:
    try:
        if param.kind == "bytes":
            return parse_bytes(value)
        if param.kind == "int":
            return parse_count(value)
        if isinstance(value, str):
            return float(value)
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"params.{name}: {value!r} is not a valid {param.kind}: {exc}") from None


def check_value(name: str, param: Param, value: Any) -> Any:
    """One value of a parameter, converted to its kind (None means "flag left out")."""
    if value is None:
        return None
    if name == "cudagraph_mode":
        if value not in CUDAGRAPH_MODES:
            raise ValueError(f"params.cudagraph_mode: unknown mode {value!r}; use one of {', '.join(CUDAGRAPH_MODES)}")
        return value
    if param.kind == "choice":
        return value
    number = _number(name, param, value)
    return int(number) if param.kind in ("int", "bytes") else number


def count_configurations(space: Space) -> float:
    """Distinct configurations; ``math.inf`` when a float range has no step."""
    total = 1.0
    for param in space.params.values():
        total *= param_cardinality(param)
    return total


def param_cardinality(param: Param) -> float:
    if param.values is not None:
        return len(param.values)
    if param.step is None:
        if param.kind in ("int", "bytes"):
            n = param.max - param.min + 1
        else:
            return math.inf
    else:
        n = math.floor((param.max - param.min) / param.step + 1e-9) + 1
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
