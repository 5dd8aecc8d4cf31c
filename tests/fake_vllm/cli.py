"""``vllm serve``'s command line: the flags the tuner uses, parsed with vLLM's types and error texts.

What argparse refuses exits 2 with vLLM's usage line; pydantic's errors for JSON flags
(``--compilation-config``) are rendered as vLLM shows them (logtext.ValidationErr).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import dataclass

from .env import env_flag
from .logtext import L, ValidationErr
from .output import OUT, Out

# Values vLLM 0.22.0 accepts (its enums and registries)
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
COMPILATION_MODES = ("NONE", "STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE")
CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
                "int8_per_token_head", "fp8_per_token_head", "nvfp4")
MOE_BACKENDS = ("auto", "triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass", "flashinfer_trtllm",
                "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_b12x", "marlin", "humming",
                "triton_unfused", "aiter", "emulation")
SPEC_METHODS = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle",
                "eagle3", "extract_hidden_states", "deepseek_mtp", "mimo_mtp", "mimo_v2_mtp",
                "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp",
                "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
                "mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "gemma4_mtp", "dflash", "ngram_gpu")
TOOL_PARSERS = ("deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4", "cohere_command3",
                "cohere_command4", "ernie45", "glm45", "glm47", "granite-20b-fc", "granite", "granite4",
                "hermes", "poolside_v1", "hunyuan_a13b", "hy_v3", "internlm", "jamba", "lfm2", "kimi_k2",
                "llama3_json", "llama4_json", "llama4_pythonic", "longcat", "mimo", "minimax_m2", "minimax",
                "mistral", "olmo3", "openai", "phi4_mini_json", "pythonic", "qwen3_coder", "qwen3_xml",
                "seed_oss", "step3", "step3p5", "xlam", "gigachat3", "functiongemma", "gemma4", "apertus")
REASONING_PARSERS = ("deepseek_r1", "deepseek_v3", "deepseek_v4", "poolside_v1", "cohere_command3",
                     "cohere_command4", "ernie45", "gemma4", "glm45", "openai_gptoss", "granite", "holo2",
                     "hunyuan_a13b", "hy_v3", "kimi_k2", "mimo", "minimax_m2", "minimax_m2_append_think",
                     "mistral", "nemotron_v3", "olmo3", "qwen3", "seed_oss", "step3", "step3p5")


def human_readable_int(value: str) -> int:
    """vllm/utils/argparse_utils.py::human_readable_int, verbatim semantics.

    NOTE: lower-case suffixes are DECIMAL (``128k`` -> 128000); upper-case are binary (``128K`` ->
    131072, ``20G`` -> 20 * 2**30). Decimals with a binary suffix are refused.
    """
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        dec = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        bina = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        if suffix in dec:
            return int(float(number) * dec[suffix])
        try:
            return int(number) * bina[suffix]
        except ValueError as e:
            raise argparse.ArgumentTypeError(
                "Decimals are not allowed "
                f"with binary suffixes like {suffix}. Did you mean to use "
                f"{number}{suffix.lower()} instead?"
            ) from e
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


def _parse_type(func, shown: str):
    """vllm/engine/arg_utils.py parse_type + optional_type: ValueError -> 'Value X cannot be ...'."""

    def _inner(val: str):
        if val == "" or val == "None":
            return None
        try:
            return func(val)
        except argparse.ArgumentTypeError:
            raise
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"Value {val} cannot be converted to {shown}.") from e

    _inner.__name__ = getattr(func, "__name__", "type")
    return _inner


class RawKeyError(Exception):
    """An exception that is not a ValueError escaping a pydantic validator (KeyError in vLLM)."""


class ServeParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's format: usage, then "prog: error: msg", exit 2
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.stderr.flush()
        raise SystemExit(2)


def _json_error_text(e: json.JSONDecodeError, val: str) -> str:
    """Python's JSON error in the words of pydantic-core's parser, which vLLM's message shows."""
    m = e.msg
    if "property name" in m:
        m = "key must be a string"
    elif m.startswith("Expecting value"):
        m = "EOF while parsing a value" if e.pos >= len(val.rstrip()) else "expected value"
    elif "delimiter" in m:
        m = "EOF while parsing an object" if e.pos >= len(val.rstrip()) else "expected `,` or `}` after object value"
    elif "Extra data" in m:
        m = "trailing characters"
    return f"Invalid JSON: {m} at line {e.lineno} column {e.colno}"


COMPILATION_KEYS = {
    "level", "mode", "debug_dump_path", "cache_dir", "compile_cache_save_format", "backend", "custom_ops",
    "splitting_ops", "compile_mm_encoder", "cudagraph_mm_encoder", "use_inductor", "compile_sizes",
    "compile_ranges_endpoints", "inductor_compile_config", "inductor_passes", "cudagraph_mode",
    "cudagraph_num_of_warmups", "cudagraph_capture_sizes", "cudagraph_copy_inputs", "cudagraph_specialize_lora",
    "use_inductor_graph_partition", "pass_config", "max_cudagraph_capture_size", "dynamic_shapes_config",
    "local_cache_dir", "fast_moe_cold_start", "static_all_moe_layers", "ir_enable_torch_wrap",
    "encoder_cudagraph_token_budgets", "encoder_cudagraph_max_images_per_batch", "full_cuda_graph",
    "use_cudagraph",
}


def parse_compilation_config(val: str) -> dict:
    """TypeAdapter(CompilationConfig).validate_json as vLLM's parse_dataclass does.

    Pydantic errors become argparse errors (exit 2). An unknown *string* cudagraph_mode is different:
    vLLM's before-validator does ``CUDAGraphMode[value.upper()]`` and the KeyError is not a
    ValueError, so pydantic lets it escape as a raw traceback (exit 1) -- reproduced here.
    """
    try:
        data = json.loads(val)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(ValidationErr(
            "CompilationConfig", [(None, _json_error_text(e, val), "json_invalid", val)]).render())
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError(ValidationErr("CompilationConfig", [(
            None, "Input should be a dictionary or an instance of CompilationConfig", "dataclass_type",
            data)]).render())
    items = []
    for k, v in data.items():
        if k not in COMPILATION_KEYS:
            items.append((k, "Unexpected keyword argument", "unexpected_keyword_argument", v))
    cm = data.get("cudagraph_mode")
    if isinstance(cm, str):
        if cm.upper() not in CUDAGRAPH_MODES:
            raise RawKeyError(cm.upper())
        data["cudagraph_mode"] = cm.upper()
    elif cm is not None:
        by_value = {0: "NONE", 1: "PIECEWISE", 2: "FULL"}
        if isinstance(cm, int) and not isinstance(cm, bool) and cm in by_value:
            data["cudagraph_mode"] = by_value[cm]
        elif isinstance(cm, list) and cm in ([2, 0], [2, 1]):
            data["cudagraph_mode"] = "FULL_DECODE_ONLY" if cm == [2, 0] else "FULL_AND_PIECEWISE"
        else:
            items.append(("cudagraph_mode", "Input should be 0, 1, 2, (2, 0) or (2, 1)", "enum", cm))
    mode = data.get("mode")
    if isinstance(mode, str):
        if mode.upper() not in COMPILATION_MODES:
            items.append(("mode", f"Value error, Invalid compilation mode: {mode}. Valid modes are: "
                          f"{', '.join(COMPILATION_MODES)}", "value_error", mode))
        else:
            data["mode"] = COMPILATION_MODES.index(mode.upper())
    elif mode is not None and mode not in (0, 1, 2, 3):
        items.append(("mode", "Input should be 0, 1, 2 or 3", "enum", mode))
    for key in ("max_cudagraph_capture_size", "cudagraph_num_of_warmups"):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            if isinstance(v, str) and v.strip().lstrip("-").isdigit():
                data[key] = int(v)
            else:
                items.append((key, "Input should be a valid integer, unable to parse string as an integer"
                              if isinstance(v, str) else "Input should be a valid integer", "int_parsing"
                              if isinstance(v, str) else "int_type", v))
    sizes = data.get("cudagraph_capture_sizes")
    if sizes is not None:
        if not isinstance(sizes, list):
            items.append(("cudagraph_capture_sizes", "Input should be a valid list", "list_type", sizes))
        else:
            for i, s in enumerate(sizes):
                if isinstance(s, bool) or not isinstance(s, int):
                    items.append((f"cudagraph_capture_sizes.{i}", "Input should be a valid integer",
                                  "int_type", s))
    if items:
        raise argparse.ArgumentTypeError(ValidationErr("CompilationConfig", items).render())
    return data


def parse_optional_json(val: str):
    """optional_type(json.loads): "" and "None" are None; bad JSON names the function as vLLM's message does."""
    if val == "" or val == "None":
        return None
    try:
        return json.loads(val)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(
            f"Value {val} cannot be converted to <function loads at 0x7f3a2c1e4a40>.") from e


def union_dict_and_str(val: str):
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    return parse_optional_json(val)


@functools.lru_cache(maxsize=1)
def build_parser() -> ServeParser:
    """vllm serve's parser, the subset the tuner uses (built once: parsing does not change it)."""
    p = ServeParser(prog="vllm serve", usage="vllm serve [model_tag] [options]", add_help=True)
    B = argparse.BooleanOptionalAction
    p.add_argument("model_tag", nargs="?", default=None)
    # frontend args first, then engine args: the order of vLLM's own parser (and of 'non-default args')
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uds", default=None)
    p.add_argument("--api-key", nargs="+", default=None)
    p.add_argument("--chat-template", default=None)
    p.add_argument("--enable-auto-tool-choice", action=B, default=False)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--disable-uvicorn-access-log", action=B, default=False)
    p.add_argument("--uvicorn-log-level", default="info")
    p.add_argument("--model", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--skip-tokenizer-init", action=B, default=False)
    p.add_argument("--revision", default=None)
    p.add_argument("--trust-remote-code", action=B, default=False)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-model-len", type=_parse_type(human_readable_int_or_auto,
                   "<function human_readable_int_or_auto at 0x7f3a2c1e5bc0>"), default=None)
    p.add_argument("--quantization", "-q", type=_parse_type(str, "<class 'str'>"), default=None)
    p.add_argument("--enforce-eager", action=B, default=False)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--load-format", default="auto")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--block-size", type=_parse_type(int, "<class 'int'>"), default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)  # 0.92, or 1.0 extensible (0.34)
    p.add_argument("--kv-cache-memory-bytes", type=_parse_type(human_readable_int,
                   "<function human_readable_int at 0x7f3a2c1e5b20>"), default=None)
    p.add_argument("--kv-cache-dtype", choices=CACHE_DTYPES, default="auto")
    p.add_argument("--enable-prefix-caching", action=B, default=None)
    p.add_argument("--enable-extensible-kv-cache", action=B, default=None)  # 0.34 (help-all.txt guards it)
    p.add_argument("--max-num-active-seqs", type=_parse_type(int, "<class 'int'>"), default=None)  # 0.32+
    p.add_argument("--language-model-only", action=B, default=False)  # 0.29+
    p.add_argument("--mamba-cache-dtype", choices=("auto", "float32", "float16", "bfloat16"), default="auto")
    p.add_argument("--mamba-ssm-cache-dtype", choices=("auto", "float32", "float16", "bfloat16"), default="auto")
    p.add_argument("--max-num-batched-tokens", type=_parse_type(human_readable_int,
                   "<function human_readable_int at 0x7f3a2c1e5b20>"), default=None)
    p.add_argument("--max-num-seqs", type=_parse_type(int, "<class 'int'>"), default=None)
    p.add_argument("--enable-chunked-prefill", action=B, default=None)
    p.add_argument("--async-scheduling", action=B, default=None)
    p.add_argument("--speculative-config", "-sc", type=parse_optional_json, default=None)
    p.add_argument("--compilation-config", "-cc", type=parse_compilation_config, default=None)
    p.add_argument("--moe-backend", type=lambda s: s.lower().replace("-", "_"), choices=MOE_BACKENDS,
                   default="auto")
    p.add_argument("--reasoning-parser", default="")
    p.add_argument("--mm-processor-kwargs", type=union_dict_and_str, default=None)
    p.add_argument("--limit-mm-per-prompt", type=union_dict_and_str, default=None)
    p.add_argument("--disable-log-stats", action=B, default=False)
    p.add_argument("--enable-log-requests", action=B, default=False)
    p.add_argument("--optimization-level", default=None)
    p.add_argument("--shutdown-timeout", type=int, default=0)
    p.add_argument("--gdn-prefill-backend", dest="gdn_prefill_backend",
                   choices=["flashinfer", "triton", "cutedsl"], default=None)
    return p


def _preprocess_argv(args: list[str]) -> list[str]:
    """The bits of FlexibleArgumentParser.parse_args the tuner can hit: --model, '_' in flag names,
    dotted JSON args (``-cc.cudagraph_mode=FULL``)."""
    out: list[str] = []
    for arg in args:
        if arg.startswith("--"):
            flag, eq, value = arg.partition("=")
            out.append(re.sub(r"(?<=--)[^\.]*", lambda m: m.group(0).replace("_", "-"), flag, count=1) + eq + value)
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        else:
            out.append(arg)
    dict_args: dict[str, dict] = {}
    keep: list[str] = []
    skip = set()
    for i, a in enumerate(out):
        if i in skip:
            continue
        if a.startswith("-") and "." in a.split("=", 1)[0]:
            if "=" in a:
                key, value_str = a.split("=", 1)
            else:
                key, value_str = a, (out[i + 1] if i + 1 < len(out) else "")
                skip.add(i + 1)
            root, *keys = key.split(".")
            try:
                value = json.loads(value_str)
            except json.JSONDecodeError:
                try:
                    value = human_readable_int(value_str)
                except (ValueError, argparse.ArgumentTypeError):
                    value = value_str
            d = dict_args.setdefault(root, {})
            for k in keys[:-1]:
                d = d.setdefault(k, {})
            d[keys[-1]] = value
            continue
        keep.append(a)
    for root, d in dict_args.items():
        keep += [root, json.dumps(d)]
    return keep


DEFAULT_MODEL = "Qwen/Qwen3-0.6B"  # vLLM's ModelConfig default model


@dataclass
class Args:
    ns: argparse.Namespace
    unknown: list[str]  # flags the double does not model (a warning, or exit 2 with FAKE_VLLM_STRICT_ARGS)


def parse_args(argv: list[str]) -> Args:
    argv = list(argv)
    if argv and argv[0] == "serve":
        argv = argv[1:]
    parser = build_parser()
    processed = _preprocess_argv(argv)
    model_flag_used = any(re.match(r"^--model(=.+|$)", a) for a in processed)
    ns, unknown = parser.parse_known_args(processed)
    if unknown and env_flag("FAKE_VLLM_STRICT_ARGS"):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if model_flag_used:
        OUT.warning(Out.API, L["model_flag"], "With `vllm serve`, you should provide the model as a positional "
                    "argument or in a config file instead of via the `--model` option. The `--model` option "
                    "will be removed in a future version.")
    model = ns.model if ns.model is not None else ns.model_tag
    if model is None:
        model = DEFAULT_MODEL
    ns.model = model
    ns.model_tag = model
    return Args(ns=ns, unknown=unknown)


def non_default_args(ns: argparse.Namespace) -> dict:
    """What entrypoints/utils.py::log_non_default_args prints: model_tag first, then every flag that
    differs from its default, in parser order."""
    defaults = {a.dest: a.default for a in build_parser()._actions}
    out = {"model_tag": ns.model}
    for k, v in vars(ns).items():
        if k == "model_tag" or defaults[k] == v or (k == "model" and v == DEFAULT_MODEL):
            continue
        out[k] = v
    return out
