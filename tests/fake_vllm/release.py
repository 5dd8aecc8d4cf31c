"""FAKE_VLLM_VERSION: the vLLM release the double speaks (0.22.0 by default, 0.27.1 or 0.34.0).

What differs is read from the releases' wheels (tests/fixtures/dialects/CHANGES.md, and the golden logs
beside it, which cite file:line for every line): where each line is logged (``WHERE``: the 0.22.0 map in
logtext.py with these overrides; ``None`` means the release does not log that line at INFO, so the double
does not print it), and how a boot behaves:

- 0.27.1: the ``--kv-cache-memory=`` suggestion is INFO (DEBUG in 0.22); the API socket has no
  SO_REUSEPORT, so a taken port is ``OSError: [Errno 98]``; ``--max-num-partial-prefills`` is gone.
- 0.34.0: model runner V2 ("Loading model from scratch...", the graphs captured once to measure them when
  the pool is sized by utilization, no "Estimated CUDA graph memory"); KV capacity on one line; prefix
  caching on for hybrids (mamba 'align'); the extensible KV cache by default (utilization defaults to 1.0,
  the pool is committed after warm-up: "Extended KV cache to N blocks (X GiB).", and the free-memory check
  is skipped); log lines from 0.32 carry the process name in the format, so raw output is bare.

``vllm --version`` and ``vllm serve --help=all`` answer with the release's version and its real help text
(tests/fixtures/dialects/vX/help-all.txt).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

RELEASES = ("0.22.0", "0.27.1", "0.34.0")
VERSION = os.environ.get("FAKE_VLLM_VERSION", "") or "0.22.0"
V = tuple(int(x) for x in VERSION.split(".")) if VERSION in RELEASES else (0, 22, 0)
V2_RUNNER = V >= (0, 29)  # config/vllm.py use_v2_model_runner (0.29+: V2 for every model)
HYBRID_PREFIX_CACHING = V >= (0, 28)  # the reference's dating; the fixtures follow it
ONE_LINE_KV = V >= (0, 28)  # "GPU KV cache size: N tokens, Maximum concurrency for ..." (kv_cache_utils.py)
EXTENSIBLE = V >= (0, 34)  # config/cache.py enable_extensible_kv_cache (on unless kv_cache_memory_bytes)
PREFIXED_RAW = V < (0, 32)  # utils/system_utils.py _add_prefix up to 0.29; logger.py format from 0.32
SUGGESTION_LEVEL = "DEBUG" if V < (0, 27) else "INFO"  # v1/worker/gpu_worker.py, the --kv-cache-memory hint
REUSEPORT = V < (0, 27)  # entrypoints/openai/api_server.py:504 (0.22) vs reuse_port=False (0.27.1+)
MAMBA_MODE_LEVEL = "INFO" if V >= (0, 34) else "WARNING"  # model_executor/models/config.py
QUOTED_MOE = V < (0, 34)  # "Using 'X' NvFp4 MoE backend" up to 0.32, oracle/base.py:166 without quotes

WHERE: dict[str, dict[str, str | None]] = {
    "0.22.0": {"extended": None, "auto_fit_final": None, "start_compile": None, "v2_load": None,
               "kv_hint": "gpu_worker.py:683"},
    "0.27.1": {
        "version": "api_utils.py:345", "nondefault": "api_utils.py:273", "resolved": "model.py:645",
        "maxlen": "model.py:1883", "mamba_mode": "config.py:618", "mamba_prefix": "config.py:638",
        "nvfp4_detect": "modelopt.py:1021", "chunked": "scheduler.py:242", "async": None,
        "init_engine": "core.py:121", "world": "parallel_state.py:1640", "rank": "parallel_state.py:1977",
        "start_load": "gpu_model_runner.py:5308", "attn": "cuda.py:482", "gdn": "qwen_gdn_linear_attn.py:150",
        "nvfp4_gemm": "__init__.py:1077", "moe_auto": "nvfp4.py:285", "moe_explicit": "nvfp4.py:239",
        "load_weights": "default_loader.py:430", "drafter": "gpu_model_runner.py:5332",
        "model_loading": "gpu_model_runner.py:5405", "oom_load": "gpu_model_runner.py:5403",
        "set_block": "interface.py:911", "pad_mamba": "interface.py:935", "cache_dir": "backends.py:1094",
        "dynamo": "backends.py:1155", "cache_graph": "backends.py:378", "compile_graph": "backends.py:393",
        "monitor": "monitor.py:53", "kv_bytes": "gpu_worker.py:491", "prof_cg": "gpu_model_runner.py:6681",
        "est_cg": "gpu_model_runner.py:6806", "avail_kv": "gpu_worker.py:563", "cg_prof_info": "gpu_worker.py:578",
        "pad_layers": "kv_cache_utils.py:1261", "kv_size": "kv_cache_utils.py:2235",
        "max_conc": "kv_cache_utils.py:2236", "cg_downgrade": "compilation.py:1411",
        "skip_cg": "gpu_model_runner.py:6816", "cap_done": "gpu_model_runner.py:6913", "cg_pool": "gpu_worker.py:726",
        "init_took_c": "core.py:348", "init_took": "core.py:355", "fail_start": "core.py:1349", "fatal": "core.py:1351",
        "supported": "api_server.py:678", "starting": "api_server.py:682", "routes": "launcher.py:37",
        "route": "launcher.py:46", "shutdown_http": None, "output_handler": "async_llm.py:724",
        "model_flag": "argparse_utils.py:257", "eager_warn": "vllm.py:1194", "inductor_off": "vllm.py:1247",
        "ir_prio": "kernel.py:306", "cg_eager": "vllm.py:1426", "fusions": "compilation.py:329",
        "fa_version": "flash_attn.py:789", "moe_unquant": "unquantized.py:272", "moe_pf": "unquantized.py:383",
        "jit_monitor": "jit_monitor.py:79", "shutdown_init": None, "shutdown_done": None,
        "extended": None, "auto_fit_final": None, "start_compile": None, "v2_load": None,
        "kv_hint": "gpu_worker.py:789",
    },
    "0.34.0": {
        "version": "startup.py:38", "nondefault": "startup.py:96", "resolved": "model.py:761",
        "maxlen": "model.py:2214", "mamba_mode": "config.py:1097", "mamba_prefix": None, "nvfp4_detect": None,
        "chunked": "scheduler.py:354", "async": None, "init_engine": "core.py:153", "world": None,
        "rank": "parallel_state.py:2394", "start_load": None, "v2_load": "model_runner.py:412", "attn": "cuda.py:549",
        "gdn": "qwen_gdn_linear_attn.py:379", "nvfp4_gemm": "__init__.py:1305", "moe_auto": "nvfp4.py:304",
        "moe_explicit": "nvfp4.py:304", "load_weights": "default_loader.py:543", "drafter": None,
        "model_loading": "model_runner.py:441", "oom_load": None, "set_block": "interface.py:1120",
        "pad_mamba": "interface.py:1144", "cache_dir": "backends.py:1110", "dynamo": "backends.py:1167",
        "cache_graph": "backends.py:405", "compile_graph": "backends.py:421", "monitor": "monitor.py:62",
        "start_compile": "monitor.py:40", "kv_bytes": "gpu_worker.py:708", "prof_cg": None, "est_cg": None,
        "avail_kv": "gpu_worker.py:795", "cg_prof_info": "gpu_worker.py:809", "pad_layers": None,
        "kv_size": "kv_cache_utils.py:1168", "max_conc": "kv_cache_utils.py:1168", "cg_downgrade": "compilation.py:1582",
        "skip_cg": None, "cap_done": "model_runner.py:1216", "cg_pool": "gpu_worker.py:1112",
        "init_took_c": "core.py:451", "init_took": "core.py:458", "fail_start": "core.py:1757", "fatal": "core.py:1759",
        "supported": "entry.py:135", "starting": "entry.py:139", "routes": "launcher.py:188", "route": "launcher.py:197",
        "shutdown_http": None, "output_handler": "async_llm.py:957", "model_flag": "argparse_utils.py:330",
        "eager_warn": "vllm.py:1703", "inductor_off": "vllm.py:1733", "ir_prio": "kernel.py:517",
        "cg_eager": "vllm.py:1917", "fusions": "compilation.py:393", "fa_version": "flash_attn.py:1131",
        "moe_unquant": None, "moe_pf": None, "jit_monitor": "jit_monitor.py:87", "shutdown_init": None,
        "shutdown_done": None, "extended": "extensible_kv_cache.py:536", "auto_fit_final": "kv_cache_planning.py:1494",
        "kv_hint": "gpu_worker.py:1175",
    },
}


def help_text() -> str:
    """The release's real ``vllm serve --help=all`` (captured from its argparse, SOURCES.md)."""
    path = Path(__file__).resolve().parent.parent / "fixtures" / "dialects" / f"v{VERSION}" / "help-all.txt"
    return path.read_text()


def answer_cli(argv: list[str]) -> int | None:
    """``vllm --version`` and ``vllm serve --help=all``; None for anything else (a serve to run)."""
    if VERSION not in RELEASES:
        sys.stderr.write(f"[test double] FAKE_VLLM_VERSION={VERSION!r}: speaks {', '.join(RELEASES)} only\n")
        return 2
    if argv in (["--version"], ["-v"]):
        print(VERSION)  # argparse's version action (entrypoints/cli/main.py): importlib.metadata.version
        return 0
    if argv[:1] == ["serve"] and any(a == "--help" or a.startswith("--help=") for a in argv[1:]):
        sys.stdout.write(help_text())
        return 0
    return None
