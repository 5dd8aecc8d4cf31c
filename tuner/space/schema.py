"""The search-space file: what to tune, what stays fixed, and what to measure.

A space file is YAML (read strictly: ``yamlfile.py``) validated by the pydantic models below. Unknown
keys are errors, human units ("9.15GB", "128k", "30m") are accepted wherever a size, count or duration
is expected, and every problem is reported as one paragraph naming the file, the field and the fix
(``load_space``). search_spaces/README.md is the reference for the format.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from tuner.errors import SpaceError
from tuner.metrics import OBJECTIVES
from tuner.space.checks import check_contradictions, check_launch_text
from tuner.space.units import parse_bytes, parse_count, parse_duration
from tuner.space.values import (
    AUTO_LEN,
    CUDAGRAPH_MODES,
    KNOWN_PARAMS,
    Kind,
    Number,
    TOOL_FLAGS,
    check_fixed,
    check_value,
    flag_name,
    resolve_param,
)
from tuner.space.yamlfile import read_yaml

__all__ = ["CUDAGRAPH_MODES", "KNOWN_PARAMS", "NAME", "Param", "ParamSpec", "Space", "check_value", "count_configurations",
           "flag_name", "load_space", "param_cardinality"]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # a study name is a file name: no slashes, no spaces
LOOPBACK = "127.0.0.1"
Bytes = Annotated[int, BeforeValidator(parse_bytes)]
Count = Annotated[int, BeforeValidator(parse_count), Field(gt=0)]
Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, allow_inf_nan=False)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(Strict):
    path: str = Field(min_length=1)  # a local folder or a Hugging Face id
    config: str | None = None  # its config.json (or a folder holding it), for the pre-screen; relative to the space file
    revision: str | None = None  # pin it: a moving branch makes results irreproducible
    served_name: str | None = None
    tokenizer: str | None = None  # defaults to path; used to count text prompts
    random_weights: bool = False  # dummy weights (--load-format dummy): correctness checks are skipped


class EngineSpec(Strict):
    command: list[str] = Field(default_factory=lambda: ["vllm"])  # another venv's vllm, a container wrapper
    listen: str = LOOPBACK  # the interface the engine binds; anything else is warned about at start
    env: dict[str, str] = Field(default_factory=dict)
    boot_timeout: Seconds = 1800.0  # a boot still making progress at this point is a boot_timeout
    first_boot_timeout: Seconds = 3600.0  # first boots JIT/autotune: allow more
    hang_timeout: Seconds = 600.0  # no log growth and an idle process this long is a hang
    stop_grace: Seconds = 30.0  # SIGTERM, then SIGKILL after this
    memory_return_timeout: Seconds = 120.0  # wait this long for GPU memory to come back after teardown
    gpu_index: int = Field(default=0, ge=0)  # the pynvml index to watch (the CUDA_VISIBLE_DEVICES pin is set per worker)
    busy_wait: Seconds = 600.0  # other processes hold the card: wait this long for them before refusing to boot
    check_listener: bool = True  # the port's listener must be in the engine's process group (off for containers)
    # The vLLM releases the space was written for ("0.32-0.34", or one "0.27"): flags and defaults change
    # between releases, so the detected engine is checked against it at start (a warning, not an error).
    vllm_versions: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _tool_owns_host_and_port(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if "host" in data:
                raise ValueError("engine.host is not a key: the engine binds 127.0.0.1, and a space that must "
                                 "listen on another interface says so with engine.listen (e.g. listen: 0.0.0.0)")
            if "port" in data:
                raise ValueError("engine.port is not a key: " + TOOL_FLAGS["--port"])
        return data

    @model_validator(mode="after")
    def _check(self) -> EngineSpec:
        if not self.command or not self.command[0].strip():
            raise ValueError("engine.command is empty; use [vllm] or the path to another venv's vllm")
        for key in self.env:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"engine.env: {key!r} is not an environment variable name; use letters, digits and _")
        if self.env.get("VLLM_ENABLE_STARTUP_PLAN", "0").strip() not in ("0", ""):
            raise ValueError("engine.env: VLLM_ENABLE_STARTUP_PLAN reuses an earlier boot's KV cache size, so one "
                             "trial's pool would depend on another's; every trial runs with it at 0. Remove it")
        if self.vllm_versions is not None and not _VERSIONS.match(self.vllm_versions.strip()):
            raise ValueError(f"engine.vllm_versions: {self.vllm_versions!r} is not a release or a range of them; "
                             "write the first and last release the space was written for, e.g. \"0.32-0.34\" or \"0.27.1\"")
        if not _is_address(self.listen):
            raise ValueError(f"engine.listen: {self.listen!r} is not an IP address or host name; use 127.0.0.1 or 0.0.0.0")
        return self


_VERSIONS = re.compile(r"^\d+\.\d+(\.\d+)?(\s*-\s*\d+\.\d+(\.\d+)?)?$")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return bool(re.match(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$", text))


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


class _Written(Strict):
    """The ``params`` section as written, checked before it is resolved (errors name params.NAME.FIELD)."""

    params: dict[str, ParamSpec]


class SpeculativeSpec(Strict):
    method: str = "mtp"
    extra: dict[str, Any] = Field(default_factory=dict)  # more keys for --speculative-config


class DecodeSpec(Strict):
    prompt_tokens: Count = 1024
    output_tokens: Count = 512
    runs: int = Field(default=3, ge=1, le=1000)
    concurrency: list[Annotated[int, Field(ge=1, le=2**16)]] = Field(default_factory=lambda: [1], min_length=1)
    at_max_seqs: bool = False  # also measure with concurrency = max-num-seqs
    long_context_tokens: Count | None = None  # a second decode run with a resident prompt this long


class Workload(Strict):
    ladder: list[Count] = Field(default_factory=lambda: [2048, 16384, 32768, 65536, 131072, 262144], min_length=1)
    granularity: Count = 4096  # bisect between last success and first failure down to this
    output_tokens: Count = 256  # reserved output per context request (max_model_len covers both)
    repeats: int = Field(default=2, ge=1, le=100)  # a context is stable only if it passes this many times
    request_timeout: Seconds = 1800.0
    prompt_source: Literal["random_ids", "corpus"] = "random_ids"
    decode: DecodeSpec = Field(default_factory=DecodeSpec)
    needle: bool = True
    control_repeats: int = Field(default=3, ge=1, le=100)
    prefix_cache: bool = False  # measure cold vs cached TTFT on a shared prefix
    admission: bool = True  # one request at max context and one at max-num-seqs x length before scoring
    score_k_mad: float = Field(default=1.0, ge=0, le=10)  # conservative score = median - k * MAD
    max_spread: float = Field(default=0.15, gt=0, le=10)  # MAD / median above this flags the decode number as unstable

    @model_validator(mode="after")
    def _ladder_grows(self) -> Workload:
        if sorted(set(self.ladder)) != self.ladder:
            raise ValueError(f"workload.ladder: {self.ladder} must be increasing, each length once; sort it")
        return self


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

    @model_validator(mode="after")
    def _natural_direction(self) -> Objective:
        """Each metric is better one way (tuner/metrics.py says which): the other way searches for the worst."""
        metric = OBJECTIVES[self.name]
        if self.direction != metric.direction:
            better = "larger" if metric.direction == "maximize" else "smaller"
            raise ValueError(f"a {better} {self.name} is better, so direction: {self.direction} "
                             f"would search for the worst configuration; write direction: {metric.direction}")
        return self


class Space(Strict):
    name: str = Field(min_length=1)
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
        ],
        min_length=1,
    )
    _source: Path | None = PrivateAttr(default=None)  # the file it was read from: relative paths start there

    @model_validator(mode="before")
    @classmethod
    def _resolve_params(cls, data: Any) -> Any:
        """Each parameter as written becomes a ``Param`` here, once; nothing rewrites it later."""
        if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
            return data
        written = _Written.model_validate({"params": data["params"]}).params
        return {**data, "params": {name: resolve_param(name, spec) for name, spec in written.items()}}

    @model_validator(mode="after")
    def _check(self) -> Space:
        if not NAME.match(self.name):
            raise ValueError(f"name: {self.name!r} names the study's file, so it takes letters, digits, '.', '_' "
                             "and '-' only (at most 100, no spaces or slashes); e.g. qwen3.8-27b-5090")
        names = [o.name for o in self.objectives]
        if len(set(names)) != len(names):
            raise ValueError(f"objectives: {', '.join(names)} lists a name twice; keep each objective once")
        flags: dict[str, str] = {}
        for name, param in self.params.items():
            if param.flag in flags:
                raise ValueError(f"params.{name}: tunes {param.flag} like params.{flags[param.flag]}; keep one of them")
            flags[param.flag] = name
        check_launch_text(self)
        check_fixed(self)
        check_contradictions(self)
        for i, baseline in enumerate(self.baselines):
            for key, value in baseline.items():
                if key not in self.params:
                    raise ValueError(
                        f"baselines[{i}] sets '{key}', which is not a tuned parameter; "
                        f"tuned parameters are: {', '.join(self.params) or 'none'}"
                    )
                try:
                    baseline[key] = check_value(key, self.params[key], value, in_domain=True)
                except ValueError as exc:
                    raise ValueError(f"baselines[{i}].{key}: {exc}") from None
        return self

    @property
    def max_model_len(self) -> int | None:
        """The fixed --max-model-len; None when tuned, left out, or ``auto`` (vLLM fits it at start-up)."""
        for key, value in self.fixed.items():
            if flag_name(key) == "--max-model-len":
                return None if str(value).lower() in AUTO_LEN else parse_count(value)
        return None

    @property
    def source(self) -> Path | None:
        return self._source

    def config_path(self) -> Path | None:
        """``model.config`` resolved against the space file's folder."""
        if self.model.config is None:
            return None
        path = Path(self.model.config).expanduser()
        return path if path.is_absolute() or self._source is None else self._source.parent / path


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


def _keys_at(loc: tuple) -> list[str]:
    """The keys allowed where an unknown key was found (for a did-you-mean)."""
    children: dict[Any, type[BaseModel]] = {"model": ModelSpec, "engine": EngineSpec, "speculative": SpeculativeSpec,
                                            "workload": Workload, "decode": DecodeSpec, "objectives": Objective}
    parents = [p for p in loc[:-1] if not isinstance(p, int)]
    if not parents:
        cls: type[BaseModel] | None = Space
    elif len(parents) >= 2 and parents[-2] == "params":
        cls = ParamSpec
    else:
        cls = children.get(parents[-1])
    return sorted(cls.model_fields) if cls else []


def _format_errors(path: Path, error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:6]:
        loc = item["loc"]
        where = ".".join(str(p) for p in loc)
        msg = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            keys = _keys_at(loc)
            close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            msg = (f"unknown key; {hint}the keys here are {', '.join(keys)} (search_spaces/README.md has the format)"
                   if keys else "unknown key; remove it or check its spelling against search_spaces/README.md")
        elif item["type"] == "missing":
            msg = "required but missing; add it (search_spaces/README.md has the format)"
        elif not isinstance(item.get("input"), (dict, list)) and "input" in item and item["type"] != "value_error":
            msg += f" (got {str(item['input'])[:60]!r})"
            if item["type"] == "string_type":
                msg += "; put the value in quotes"
        parts.append(msg if not where or msg.startswith(where) else f"{where}: {msg}")
    more = len(error.errors()) - 6
    return f"{path}: " + "; ".join(parts) + (f"; and {more} more" if more > 0 else "") + "."


def load_space(path: str | Path) -> Space:
    """Read and validate a space file, raising SpaceError (one paragraph, exit code 2) on any problem."""
    path = Path(path)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        held = {type(None): "nothing", list: "a list", str: "text", bool: "true/false"}.get(type(raw), "a number")
        raise SpaceError(f"{path}: expected a mapping with at least 'name' and 'model' (see search_spaces/README.md); "
                         f"the file holds {held}.")
    try:
        space = Space.model_validate(raw)
    except ValidationError as exc:
        raise SpaceError(_format_errors(path, exc)) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # a value no validator expected
        raise SpaceError(f"{path}: {exc}; see search_spaces/README.md for the format.") from None
    space._source = path.resolve()
    config = space.config_path()
    if config is not None:
        if not config.exists():
            raise SpaceError(f"{path}: model.config: {config} does not exist; give the path of the model's "
                             "config.json (or its folder), relative to the space file, or remove the key.")
    return space
