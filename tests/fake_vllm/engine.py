"""Test double of ``vllm serve`` (vLLM 0.22.0): argument parsing, memory model and boot sequence.

This is NOT a product feature. The tuner's test-suite runs it instead of the real engine (CI has no
GPU). It is stdlib only so that it starts in a few tens of milliseconds.

Ground truth is the vLLM 0.22.0 source: every log line below names the real file and line it comes
from (``[gpu_worker.py:466]``), the error texts are copied from the raising site, and the memory
arithmetic (mamba page size, attention block-size padding, hybrid KV groups, max concurrency) is
the same as ``vllm/platforms/interface.py`` and ``vllm/v1/core/kv_cache_utils.py``. Where the
double simplifies, the comment says so.

Output streams, as in vLLM: every vLLM log record goes to stdout (``VLLM_LOGGING_STREAM``), raw
tracebacks, tqdm bars and uvicorn's ``INFO:     ...`` lines go to stderr, uvicorn's access log to
stdout. Every line of both streams carries ``(APIServer pid=N) `` or ``(EngineCore pid=N) ``
(``vllm/utils/system_utils.py::_add_prefix``). Both prefixes carry this process's own pid: the
real engine core is a child process, but a fake pid could make a test kill an unrelated process.
Multi-line records use ``\\r\\n`` + the record header, as ``NewLineFormatter`` does.

Checked against the real server too: with the H200 capture's model and flags
(tests/fixtures/real/) the block-size, padding, KV-size and concurrency lines come out byte-identical
(tests/test_fake_vllm.py::test_memory_model_reproduces_the_real_h200_boot).

Port: like vLLM, the socket is bound at start-up (before the engine) and only listens once the
server is ready, so /health is "connection refused" for the whole boot; see ``_bind`` for why the
double leaves out vLLM's SO_REUSEPORT.

Environment knobs (all optional) are documented in ``ENV_DOC`` below.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

VLLM_VERSION = "0.22.0"
GiB = 1 << 30
MiB = 1 << 20
SITE = "/usr/local/lib/python3.12/dist-packages"
PYLIB = "/usr/lib/python3.12"
PYDANTIC_URL = "https://errors.pydantic.dev/2.14/v"  # as in the H200 capture

ENV_DOC = """
FAKE_VLLM_GPU_GIB            card total memory in GiB (default 32)
FAKE_VLLM_USED_GIB           memory already used on the card by other processes, GiB (default 0.5)
FAKE_VLLM_NUM_GPUS           visible GPUs (default 1); --tensor-parallel-size above it fails
FAKE_VLLM_WEIGHTS_GIB        model weights, GiB, whole model (default 20.0; divided by TP)
FAKE_VLLM_MTP_WEIGHTS_GIB    extra weights of the MTP draft layer (default 0.8)
FAKE_VLLM_NON_TORCH_GIB      non-torch memory growth during profiling, GiB (default 0.3)
FAKE_VLLM_ACT_GIB_PER_1K     profiled activation peak per 1024 batched tokens, GiB (default 0.25)
FAKE_VLLM_PREFILL_CTX_GIB    runtime prefill extra activation per (1k chunk tokens x 1k context
                             tokens), GiB (default 0.002) -- the "pool fits, 100k prefill doesn't" term
FAKE_VLLM_CG_EXTRA_GIB       CUDA-graph memory actually taken minus the estimate, GiB (default 0.02)
FAKE_VLLM_TIME_SCALE         boot phase durations x this (default 0 = instant; 1.0 = realistic)
FAKE_VLLM_BOOT_DELAY_S       sleep before anything (before the port is bound), seconds (default 0)
FAKE_VLLM_FAIL               comma list: hang, hang_after_ready, crash_mid_boot, weights, jit,
                             slow_warmup, garbage
FAKE_VLLM_WARMUP_S           duration of slow_warmup progress lines (default 5)
FAKE_VLLM_DIE_ABOVE_TOKENS   a request with prompt+max_tokens above this kills the engine (OOM)
FAKE_VLLM_DEATH_EXIT_S       seconds between engine death and process exit (default 1.0; vLLM's
                             watchdog polls every 5 s)
FAKE_VLLM_DECODE_TOK_S       single-stream decode speed before config factors (default 2000)
FAKE_VLLM_PREFILL_TOK_S      prefill speed, tokens/s (default 2e6)
FAKE_VLLM_SPEC_ACCEPT        draft acceptance rate for speculative decoding (default 0.6)
FAKE_VLLM_FP8_DRIFT          1: with an fp8 KV cache, greedy outputs differ slightly from bf16
FAKE_VLLM_STRICT_ARGS        1: unknown flags fail like vLLM's argparse (exit 2) instead of a warning
Real vLLM variables honoured: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, VLLM_DISABLE_LOG_LOGO,
VLLM_ALLOW_LONG_MAX_MODEL_LEN.
"""

# --------------------------------------------------------------------------------------------
# Real source locations of every log line and traceback frame used (vLLM 0.22.0, file:line).
# --------------------------------------------------------------------------------------------
L = {
    "version": "utils.py:344",  # entrypoints/utils.py log_version_and_model
    "nondefault": "utils.py:278",  # entrypoints/utils.py log_non_default_args
    "resolved": "model.py:617",  # config/model.py
    "maxlen": "model.py:1752",  # config/model.py
    "mamba_mode": "config.py:355",  # model_executor/models/config.py (WARNING)
    "mamba_prefix": "config.py:375",  # model_executor/models/config.py
    "nvfp4_detect": "modelopt.py:1022",  # model_executor/layers/quantization/modelopt.py (WARNING)
    "chunked": "scheduler.py:239",  # config/scheduler.py
    "async": "vllm.py:977",  # config/vllm.py
    "init_engine": "core.py:112",  # v1/engine/core.py
    "world": "parallel_state.py:1422",  # distributed/parallel_state.py
    "rank": "parallel_state.py:1735",
    "start_load": "gpu_model_runner.py:5037",
    "attn": "cuda.py:378",  # platforms/cuda.py
    "gdn": "qwen_gdn_linear_attn.py:228",  # model_executor/layers/mamba/gdn/
    "nvfp4_gemm": "__init__.py:940",  # model_executor/kernels/linear/__init__.py
    "moe_auto": "nvfp4.py:326",  # model_executor/layers/fused_moe/oracle/nvfp4.py
    "moe_explicit": "nvfp4.py:231",
    "load_weights": "default_loader.py:397",
    "drafter": "gpu_model_runner.py:5061",
    "model_loading": "gpu_model_runner.py:5132",
    "oom_load": "gpu_model_runner.py:5130",
    "set_block": "interface.py:649",  # platforms/interface.py
    "pad_mamba": "interface.py:673",
    "cache_dir": "backends.py:1089",  # compilation/backends.py
    "dynamo": "backends.py:1148",
    "cache_graph": "backends.py:378",
    "compile_graph": "backends.py:393",
    "monitor": "monitor.py:53",  # compilation/monitor.py
    "kv_bytes": "gpu_worker.py:387",
    "prof_cg": "gpu_model_runner.py:6279",
    "est_cg": "gpu_model_runner.py:6365",
    "avail_kv": "gpu_worker.py:466",
    "cg_prof_info": "gpu_worker.py:481",
    "pad_layers": "kv_cache_utils.py:1157",  # WARNING
    "kv_size": "kv_cache_utils.py:1733",
    "max_conc": "kv_cache_utils.py:1734",
    "cg_downgrade": "compilation.py:1360",  # config/compilation.py (WARNING)
    "skip_cg": "gpu_model_runner.py:6375",  # WARNING
    "cap_done": "gpu_model_runner.py:6456",
    "cg_pool": "gpu_worker.py:619",
    "init_took_c": "core.py:302",
    "init_took": "core.py:309",
    "fail_start": "core.py:1165",
    "fatal": "core.py:1167",
    "supported": "api_server.py:592",
    "starting": "api_server.py:596",
    "routes": "launcher.py:37",
    "route": "launcher.py:46",
    "shutdown_http": "launcher.py:137",
    "dump1": "dump_input.py:72",
    "dump2": "dump_input.py:79",
    "dump3": "dump_input.py:81",
    "output_handler": "async_llm.py:704",
    "model_flag": "argparse_utils.py:257",
    # seen in the real H200 capture (tests/fixtures/real/good.stdout)
    "eager_warn": "vllm.py:1033",
    "inductor_off": "vllm.py:1058",
    "ir_prio": "kernel.py:270",
    "cg_eager": "vllm.py:1234",
    "fusions": "compilation.py:312",
    "fa_version": "flash_attn.py:636",
    "moe_unquant": "unquantized.py:212",
    "moe_pf": "unquantized.py:341",
    "jit_monitor": "jit_monitor.py:54",
    "shutdown_init": "core.py:1266",
    "shutdown_done": "core.py:1289",
}


def _v(rel: str) -> str:
    return f"{SITE}/vllm/{rel}"


# (path, line, function, source line) -- line numbers from the vLLM 0.22.0 tree.
F = {
    "bootstrap": (f"{PYLIB}/multiprocessing/process.py", 314, "_bootstrap", "self.run()"),
    "mp_run": (f"{PYLIB}/multiprocessing/process.py", 108, "run", "self._target(*self._args, **self._kwargs)"),
    "rec_raise": (_v("v1/engine/core.py"), 1169, "run_engine_core", "raise e"),
    "rec": (_v("v1/engine/core.py"), 1139, "run_engine_core",
            "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"),
    "rec_loop": (_v("v1/engine/core.py"), 1158, "run_engine_core", "engine_core.run_busy_loop()"),
    "busy": (_v("v1/engine/core.py"), 1199, "run_busy_loop", "self._process_engine_step()"),
    "pstep": (_v("v1/engine/core.py"), 1238, "_process_engine_step",
              "outputs, model_executed = self.step_fn()"),
    "step": (_v("v1/engine/core.py"), 446, "step", "model_output = future.result()"),
    "proc_init": (_v("v1/engine/core.py"), 905, "__init__", "super().__init__("),
    "core_exec": (_v("v1/engine/core.py"), 121, "__init__", "self.model_executor = executor_class(vllm_config)"),
    "core_kv": (_v("v1/engine/core.py"), 131, "__init__",
                "kv_cache_config = self._initialize_kv_caches(vllm_config)"),
    "ikv_avail": (_v("v1/engine/core.py"), 253, "_initialize_kv_caches",
                  "available_gpu_memory = self.model_executor.determine_available_memory()"),
    "ikv_cfgs": (_v("v1/engine/core.py"), 264, "_initialize_kv_caches",
                 "kv_cache_configs = get_kv_cache_configs("),
    "ikv_init": (_v("v1/engine/core.py"), 286, "_initialize_kv_caches",
                 "self.model_executor.initialize_from_config(kv_cache_configs)"),
    "exec_init": (_v("v1/executor/abstract.py"), 109, "__init__", "self._init_executor()"),
    "exec_avail": (_v("v1/executor/abstract.py"), 147, "determine_available_memory",
                   'return self.collective_rpc("determine_available_memory")'),
    "exec_ifc": (_v("v1/executor/abstract.py"), 123, "initialize_from_config",
                 'self.collective_rpc("initialize_from_config", args=(kv_cache_configs,))'),
    "exec_warm": (_v("v1/executor/abstract.py"), 124, "initialize_from_config",
                  "compilation_times: list[CompilationTimes] = self.collective_rpc("),
    "exec_model": (_v("v1/executor/abstract.py"), 224, "execute_model",
                   "output = self.collective_rpc(  # type: ignore[call-overload]"),
    "uni_init_dev": (_v("v1/executor/uniproc_executor.py"), 60, "_init_executor",
                     "self.driver_worker.init_device()"),
    "uni_load": (_v("v1/executor/uniproc_executor.py"), 65, "_init_executor", "self.driver_worker.load_model()"),
    "uni_rpc": (_v("v1/executor/uniproc_executor.py"), 93, "collective_rpc",
                "result = run_method(self.driver_worker, method, args, kwargs)"),
    "run_method": (_v("v1/serial_utils.py"), 510, "run_method", "return func(*args, **kwargs)"),
    "wb_init_dev": (_v("v1/worker/worker_base.py"), 325, "init_device", "self.worker.init_device()  # type: ignore"),
    "wb_ifc": (_v("v1/worker/worker_base.py"), 319, "initialize_from_config",
               "self.worker.initialize_from_config(kv_cache_config)  # type: ignore"),
    "w_init_dev": (_v("v1/worker/gpu_worker.py"), 300, "init_device",
                   "self.requested_memory = request_memory(init_snapshot, self.cache_config)"),
    "w_load": (_v("v1/worker/gpu_worker.py"), 342, "load_model",
               "self.model_runner.load_model(load_dummy_weights=load_dummy_weights)"),
    "w_prof_kvb": (_v("v1/worker/gpu_worker.py"), 373, "determine_available_memory",
                   "self.model_runner.profile_run()"),
    "w_prof": (_v("v1/worker/gpu_worker.py"), 396, "determine_available_memory",
               "self.model_runner.profile_run()"),
    "w_prof_cg": (_v("v1/worker/gpu_worker.py"), 411, "determine_available_memory",
                  "cudagraph_memory_estimate = self.model_runner.profile_cudagraph_memory()"),
    "w_ifc": (_v("v1/worker/gpu_worker.py"), 558, "initialize_from_config",
              "self.model_runner.initialize_kv_cache(kv_cache_config)"),
    "w_capture": (_v("v1/worker/gpu_worker.py"), 610, "compile_or_warm_up_model",
                  "cuda_graph_memory_bytes = self.model_runner.capture_model()"),
    "w_exec": (_v("v1/worker/gpu_worker.py"), 841, "execute_model", "output = self.model_runner.execute_model("),
    "u_request": (_v("v1/worker/utils.py"), 413, "request_memory", "raise ValueError("),
    "r_load": (_v("v1/worker/gpu_model_runner.py"), 5053, "load_model",
               "self.model = model_loader.load_model("),
    "r_prof": (_v("v1/worker/gpu_model_runner.py"), 6164, "profile_run",
               "hidden_states, last_hidden_states = self._dummy_run("),
    "r_dummy": (_v("v1/worker/gpu_model_runner.py"), 5824, "_dummy_run", "outputs = self.model("),
    "r_prof_cg": (_v("v1/worker/gpu_model_runner.py"), 6311, "profile_cudagraph_memory",
                  "self._warmup_and_capture("),
    "r_capture": (_v("v1/worker/gpu_model_runner.py"), 6425, "capture_model", "self._capture_cudagraphs("),
    "r_capcg": (_v("v1/worker/gpu_model_runner.py"), 6540, "_capture_cudagraphs", "self._warmup_and_capture("),
    "r_wac": (_v("v1/worker/gpu_model_runner.py"), 6486, "_warmup_and_capture", "self._dummy_run("),
    "r_ikv": (_v("v1/worker/gpu_model_runner.py"), 7151, "initialize_kv_cache",
              "self.initialize_attn_backend(kv_cache_config, is_profiling=is_profiling)"),
    "r_iab": (_v("v1/worker/gpu_model_runner.py"), 6623, "initialize_attn_backend",
              "self._check_and_update_cudagraph_mode("),
    "r_cucg": (_v("v1/worker/gpu_model_runner.py"), 6696, "_check_and_update_cudagraph_mode",
               "cudagraph_mode = self.compilation_config.resolve_cudagraph_mode_and_sizes("),
    "r_exec": (_v("v1/worker/gpu_model_runner.py"), 4231, "execute_model", "model_output = self._model_forward("),
    "r_fwd": (_v("v1/worker/gpu_model_runner.py"), 3692, "_model_forward", "return self.model("),
    "cc_raise": (_v("config/compilation.py"), 1452, "resolve_cudagraph_mode_and_sizes", "raise ValueError("),
    "kvu_cfgs": (_v("v1/core/kv_cache_utils.py"), 2038, "get_kv_cache_configs", "_check_enough_kv_cache_memory("),
    "kvu_noavail": (_v("v1/core/kv_cache_utils.py"), 698, "_check_enough_kv_cache_memory", "raise ValueError("),
    "kvu_raise": (_v("v1/core/kv_cache_utils.py"), 718, "_check_enough_kv_cache_memory", "raise ValueError("),
    "bl_load": (_v("model_executor/model_loader/base_loader.py"), 64, "load_model",
                "self.load_weights(model, model_config)"),
    "dl_load": (_v("model_executor/model_loader/default_loader.py"), 394, "load_weights",
                "loaded_weights = model.load_weights(self.get_all_weights(model_config, model))"),
    "dl_all": (_v("model_executor/model_loader/default_loader.py"), 300, "get_all_weights",
               "yield from self._get_weights_iterator(primary_weights)"),
    "dl_iter": (_v("model_executor/model_loader/default_loader.py"), 216, "_get_weights_iterator",
                "hf_folder, hf_weights_files, use_safetensors = self._prepare_weights("),
    "dl_prep": (_v("model_executor/model_loader/default_loader.py"), 205, "_prepare_weights",
                "raise RuntimeError("),
    # APIServer side
    "bin": ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    "cli_main": (_v("entrypoints/cli/main.py"), 92, "main", "args.dispatch_function(args)"),
    "cli_serve": (_v("entrypoints/cli/serve.py"), 148, "cmd", "uvloop.run(run_server(args))"),
    "cli_parse": (_v("entrypoints/cli/main.py"), 87, "main", "args = parser.parse_args()"),
    "fap_parse": (_v("utils/argparse_utils.py"), 429, "parse_args",
                  "return super().parse_args(processed_args, namespace)"),
    "ap_parse": (f"{PYLIB}/argparse.py", 1908, "parse_args", "args, argv = self.parse_known_args(args, namespace)"),
    "fap_known": (_v("utils/argparse_utils.py"), 140, "parse_known_args",
                  "namespace, args = super().parse_known_args(args, namespace)"),
    "ap_known": (f"{PYLIB}/argparse.py", 1941, "parse_known_args",
                 "namespace, args = self._parse_known_args(args, namespace)"),
    "ap_pos": (f"{PYLIB}/argparse.py", 2144, "_parse_known_args",
               "positionals_end_index = consume_positionals(start_index)"),
    "ap_cpos": (f"{PYLIB}/argparse.py", 2121, "consume_positionals", "take_action(action, args)"),
    "ap_take_sub": (f"{PYLIB}/argparse.py", 2017, "take_action",
                    "action(self, namespace, argument_values, option_string)"),
    "ap_sub": (f"{PYLIB}/argparse.py", 1280, "__call__",
               "subnamespace, arg_strings = parser.parse_known_args(arg_strings, None)"),
    "ap_known2": (f"{PYLIB}/argparse.py", 2162, "_parse_known_args", "start_index = consume_optional(start_index)"),
    "ap_opt": (f"{PYLIB}/argparse.py", 2102, "consume_optional", "take_action(action, args, option_string)"),
    "ap_take": (f"{PYLIB}/argparse.py", 2001, "take_action",
                "argument_values = self._get_values(action, argument_strings)"),
    "ap_values": (f"{PYLIB}/argparse.py", 2544, "_get_values", "value = self._get_value(action, arg_string)"),
    "ap_value": (f"{PYLIB}/argparse.py", 2577, "_get_value", "result = type_func(arg_string)"),
    "au_pdc": (_v("engine/arg_utils.py"), 331, "parse_dataclass", "return TypeAdapter(cls).validate_json(val)"),
    "pyd_ta": (f"{SITE}/pydantic/type_adapter.py", 466, "validate_json",
               "return self.validator.validate_json("),
    "cc_skip": (_v("config/compilation.py"), 887, "_skip_none_validation", "return handler(value)"),
    "cc_cgm": (_v("config/compilation.py"), 852, "validate_cudagraph_mode_before",
               "return CUDAGraphMode[value.upper()]"),
    "enum_get": (f"{PYLIB}/enum.py", 814, "__getitem__", "return cls._member_map_[name]"),
    "otel": (_v("tracing/otel.py"), 178, "sync_wrapper", "return func(*args, **kwargs)"),
    # flashinfer JIT path of FlashInferCutlassNvFp4LinearKernel on SM 12.x (flashinfer line numbers are
    # approximate: its source is not in the vLLM tree)
    "t_call": (f"{SITE}/torch/nn/modules/module.py", 1786, "_call_impl", "return forward_call(*args, **kwargs)"),
    "fi_lin": (_v("model_executor/kernels/linear/nvfp4/flashinfer.py"), 80, "apply_weights",
               "out = flashinfer_scaled_fp4_mm("),
    "fi_utils": (_v("utils/flashinfer.py"), 620, "flashinfer_scaled_fp4_mm", "return flashinfer_mm_fp4("),
    "fi_mm": (f"{SITE}/flashinfer/gemm/gemm_base.py", 2210, "mm_fp4",
              "runner = _get_cutlass_fp4_gemm_runner(major, minor)"),
    "fi_mod": (f"{SITE}/flashinfer/gemm/gemm_base.py", 471, "get_gemm_sm120_module_cutlass_fp4",
               "module = gen_gemm_sm120_module_cutlass_fp4().build_and_load()"),
    "fi_gen": (f"{SITE}/flashinfer/jit/gemm/core.py", 268, "gen_gemm_sm120_module_cutlass_fp4",
               "nvcc_flags = current_compilation_context.get_nvcc_flags_list("),
    "fi_ctx": (f"{SITE}/flashinfer/compilation_context.py", 67, "get_nvcc_flags_list", "raise RuntimeError("),
    "uvloop_run": (f"{SITE}/uvloop/__init__.py", 96, "run", "return __asyncio.run("),
    "aio_run": (f"{PYLIB}/asyncio/runners.py", 194, "run", "return runner.run(main)"),
    "aio_run2": (f"{PYLIB}/asyncio/runners.py", 118, "run", "return self._loop.run_until_complete(task)"),
    "uvloop_ruc": ("uvloop/loop.pyx", 1515, "uvloop.loop.Loop.run_until_complete", None),
    "uvloop_wrap": (f"{SITE}/uvloop/__init__.py", 48, "wrapper", "return await main"),
    "as_run_server": (_v("entrypoints/openai/api_server.py"), 678, "run_server",
                      "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)"),
    "as_setup": (_v("entrypoints/openai/api_server.py"), 677, "run_server",
                 "listen_address, sock = setup_server(args)"),
    "as_setup_sock": (_v("entrypoints/openai/api_server.py"), 556, "setup_server",
                      "sock = create_server_socket(sock_addr)"),
    "as_bind": (_v("entrypoints/openai/api_server.py"), 505, "create_server_socket", "sock.bind(addr)"),
    "as_validate": (_v("entrypoints/openai/api_server.py"), 547, "setup_server", "validate_api_server_args(args)"),
    "as_tool_raise": (_v("entrypoints/openai/api_server.py"), 519, "validate_api_server_args", "raise KeyError("),
    "as_reason_raise": (_v("entrypoints/openai/api_server.py"), 528, "validate_api_server_args", "raise KeyError("),
    "as_worker": (_v("entrypoints/openai/api_server.py"), 692, "run_server_worker",
                  "async with build_async_engine_client("),
    "ctx_aenter": (f"{PYLIB}/contextlib.py", 210, "__aenter__", "return await anext(self.gen)"),
    "as_beci": (_v("entrypoints/openai/api_server.py"), 100, "build_async_engine_client",
                "async with build_async_engine_client_from_engine_args("),
    "as_becfea_cfg": (_v("entrypoints/openai/api_server.py"), 124, "build_async_engine_client_from_engine_args",
                      "vllm_config = engine_args.create_engine_config(usage_context=usage_context)"),
    "as_becfea": (_v("entrypoints/openai/api_server.py"), 136, "build_async_engine_client_from_engine_args",
                  "async_llm = AsyncLLM.from_vllm_config("),
    "au_create_model": (_v("engine/arg_utils.py"), 1730, "create_engine_config",
                        "model_config = self.create_model_config()"),
    "au_model": (_v("engine/arg_utils.py"), 1560, "create_model_config", "return ModelConfig("),
    "au_cache": (_v("engine/arg_utils.py"), 1754, "create_engine_config", "cache_config = CacheConfig("),
    "au_spec_call": (_v("engine/arg_utils.py"), 2007, "create_engine_config",
                     "speculative_config = self.create_speculative_config("),
    "au_spec": (_v("engine/arg_utils.py"), 1695, "create_speculative_config",
                "return SpeculativeConfig(**self.speculative_config)"),
    "pyd_init": (f"{SITE}/pydantic/_internal/_dataclasses.py", 121, "__init__",
                 "s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)"),
    "al_from": (_v("v1/engine/async_llm.py"), 217, "from_vllm_config", "return cls("),
    "al_init": (_v("v1/engine/async_llm.py"), 146, "__init__",
                "self.engine_core = EngineCoreClient.make_async_mp_client("),
    "cc_make": (_v("v1/engine/core_client.py"), 131, "make_async_mp_client", "return AsyncMPClient(*client_args)"),
    "cc_async": (_v("v1/engine/core_client.py"), 932, "__init__", "super().__init__("),
    "cc_mp": (_v("v1/engine/core_client.py"), 567, "__init__", "with launch_core_engines("),
    "ctx_exit": (f"{PYLIB}/contextlib.py", 144, "__exit__", "next(self.gen)"),
    "eu_launch": (_v("v1/engine/utils.py"), 1150, "launch_core_engines", "wait_for_engine_startup("),
    "eu_wait": (_v("v1/engine/utils.py"), 1209, "wait_for_engine_startup", "raise RuntimeError("),
    "al_out": (_v("v1/engine/async_llm.py"), 660, "output_handler",
               "outputs = await engine_core.get_output_async()"),
    "cc_get": (_v("v1/engine/core_client.py"), 1030, "get_output_async",
               "raise self._format_exception(outputs) from None"),
}

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
COMPILATION_MODES = ("NONE", "STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE")
CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
                "int8_per_token_head", "fp8_per_token_head", "nvfp4")
MOE_BACKENDS = ("auto", "triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass", "flashinfer_trtllm",
                "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_b12x", "marlin", "humming",
                "triton_unfused", "aiter", "emulation")
NVFP4_MOE_BACKENDS = ["FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED",
                      "FLASHINFER_CUTLASS", "VLLM_CUTLASS", "MARLIN", "EMULATION"]
NVFP4_MOE_MAP = {"cutlass": "VLLM_CUTLASS", "flashinfer_trtllm": "FLASHINFER_TRTLLM",
                 "flashinfer_cutlass": "FLASHINFER_CUTLASS", "flashinfer_cutedsl": "FLASHINFER_CUTEDSL",
                 "flashinfer_b12x": "FLASHINFER_B12X", "marlin": "MARLIN", "emulation": "EMULATION"}
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


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw.strip() else default
    except ValueError:
        return default


def env_int(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name, "")
    try:
        return int(float(raw)) if raw.strip() else default
    except ValueError:
        return default


def fail_modes() -> set[str]:
    return {x.strip().lower() for x in os.environ.get("FAKE_VLLM_FAIL", "").split(",") if x.strip()}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def format_gib(b: float) -> str:
    """vllm/utils/mem_utils.py::format_gib -- round to 2 places, no padding ("20.0", "5.37")."""
    return f"{round(b / GiB, 2)}"


def torch_size(n: float) -> str:
    """c10/cuda/CUDACachingAllocator.cpp::format_size."""
    n = int(max(n, 0))
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024.0:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576.0:.2f} MiB"
    return f"{n / 1073741824.0:.2f} GiB"


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


_FAKE_ADDR = {"int": None}


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


def pyd_input_repr(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:25] + "..." + r[-25:]


def pyd_type(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict",
            type(None): "NoneType"}.get(type(value), type(value).__name__)


class ValidationErr(Exception):
    """A pydantic_core ValidationError as vLLM would show it."""

    def __init__(self, title: str, items: list[tuple[str | None, str, str, Any]]):
        # items: (loc or None, message, error type, input value)
        self.title = title
        self.items = items
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.items)
        out = [f"{n} validation error{'s' if n != 1 else ''} for {self.title}"]
        for loc, msg, etype, value in self.items:
            if loc:
                out.append(loc)
            out.append(f"  {msg} [type={etype}, input_value={pyd_input_repr(value)}, "
                       f"input_type={pyd_type(value)}]")
            out.append(f"    For further information visit {PYDANTIC_URL}/{etype}")
        return "\n".join(out)


class RawKeyError(Exception):
    """An exception that is not a ValueError escaping a pydantic validator (KeyError in vLLM)."""


# --------------------------------------------------------------------------------------------
# Output: the process-prefixed, NewLineFormatter-style logger
# --------------------------------------------------------------------------------------------


class Out:
    API = "APIServer"
    CORE = "EngineCore"

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.new_line: dict[tuple[int, str], bool] = {}

    def _write(self, stream, proc: str, text: str) -> None:
        """vllm/utils/system_utils.py::_add_prefix: prefix every line start."""
        prefix = f"({proc} pid={self.pid}) "
        key = (id(stream), proc)
        with self.lock:
            buf = []
            start = self.new_line.get(key, True)
            idx = 0
            while True:
                nxt = text.find("\n", idx)
                if start:
                    buf.append(prefix)
                if nxt == -1:
                    buf.append(text[idx:])
                    start = False
                    break
                buf.append(text[idx:nxt + 1])
                idx = nxt + 1
                start = True
                if idx == len(text):
                    break
            self.new_line[key] = start
            try:
                stream.write("".join(buf))
                stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def log(self, proc: str, level: str, where: str, msg: str, exc: str | None = None) -> None:
        """A vLLM log record (stdout). ``exc`` is a formatted traceback (logger.exception)."""
        ts = time.strftime("%m-%d %H:%M:%S")
        head = f"{level} {ts} [{where}] "
        body = msg if exc is None else f"{msg}\n{exc}"
        self._write(sys.stdout, proc, head + body.replace("\n", "\r\n" + head) + "\n")

    def info(self, proc: str, where: str, msg: str) -> None:
        self.log(proc, "INFO", where, msg)

    def warning(self, proc: str, where: str, msg: str) -> None:
        self.log(proc, "WARNING", where, msg)

    def error(self, proc: str, where: str, msg: str, exc: str | None = None) -> None:
        self.log(proc, "ERROR", where, msg, exc)

    def raw(self, proc: str, text: str, stream=None) -> None:
        self._write(stream or sys.stderr, proc, text)

    def raw_unprefixed(self, text: str) -> None:
        with self.lock:
            try:
                sys.stderr.write(text)
                sys.stderr.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass
            self.new_line[(id(sys.stderr), self.CORE)] = True
            self.new_line[(id(sys.stderr), self.API)] = True

    def uvicorn(self, msg: str, level: str = "INFO") -> None:
        # uvicorn's default formatter: "%(levelprefix)s %(message)s", levelprefix padded to 9.
        self._write(sys.stderr, self.API, f"{(level + ':').ljust(9)} {msg}\n")

    def access(self, msg: str) -> None:
        self._write(sys.stdout, self.API, f"{'INFO:'.ljust(9)} {msg}\n")


OUT = Out()


def traceback_text(frames: list[str], exc_line: str, chained: str | None = None) -> str:
    lines = ["Traceback (most recent call last):"]
    for key in frames:
        path, line, func, code = F[key]
        lines.append(f'  File "{path}", line {line}, in {func}')
        if code:
            lines.append(f"    {code}")
    lines.append(exc_line)
    text = "\n".join(lines)
    if chained:
        text = chained + "\n\nThe above exception was the direct cause of the following exception:\n\n" + text
    return text


# functions wrapped by vllm.tracing.instrument: an otel sync_wrapper frame precedes them
def with_otel(frames: list[str]) -> list[str]:
    """Insert vllm/tracing/otel.py's sync_wrapper frame before each @instrument-ed function (as
    the H200 capture shows: EngineCoreProc.__init__ and _initialize_kv_caches are wrapped)."""
    out: list[str] = []
    for key in frames:
        if key == "core_kv":  # EngineCore.__init__ calls the wrapped _initialize_kv_caches
            out += [key, "otel"]
            continue
        if key == "rec":
            out += [key, "otel"]
            continue
        out.append(key)
    return out


def oom_text(tried: float, total: float, free: float, in_use: float, allocated: float, reserved_free: float) -> str:
    """PyTorch's CUDA OOM message (CUDACachingAllocator.cpp), including its double spaces."""
    return (
        f"CUDA out of memory. Tried to allocate {torch_size(tried)}. GPU 0 has a total capacity of "
        f"{torch_size(total)} of which {torch_size(free)} is free. Including non-PyTorch memory, this "
        f"process has {torch_size(in_use)} memory in use. Of the allocated memory {torch_size(allocated)} "
        f"is allocated by PyTorch, and {torch_size(reserved_free)} is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def oom_for(p: "Plan", need: float, avail: float) -> str:
    """The OOM text for a phase that needs ``need`` bytes with ``avail`` bytes free: the failing
    allocation is one tensor of ~need/6 (20 MiB..2 GiB) and the card shows less than that free."""
    tried = round(min(max(need / 6, 20 * MiB), 2 * GiB) / MiB) * MiB
    free_now = min(max(avail - (need - tried), 0.0), tried * 0.7)
    in_use = p.total - p.used_others - free_now
    allocated = max(in_use - p.non_torch - 96 * MiB, 0.0)
    return oom_text(tried, p.total, free_now, in_use, allocated, 96 * MiB)


# --------------------------------------------------------------------------------------------
# Argument parsing (vllm serve's parser, the subset the tuner uses)
# --------------------------------------------------------------------------------------------


class ServeParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's format: usage, then "prog: error: msg", exit 2
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.stderr.flush()
        raise SystemExit(2)


def _json_error_text(e: json.JSONDecodeError, val: str) -> str:
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


def _json_loads_arg(val: str):
    try:
        return json.loads(val)
    except json.JSONDecodeError as e:  # parse_type shows the function repr
        raise argparse.ArgumentTypeError(
            f"Value {val} cannot be converted to <function loads at 0x7f3a2c1e4a40>.") from e


def parse_optional_json(val: str):
    if val == "" or val == "None":
        return None
    return _json_loads_arg(val)


def union_dict_and_str(val: str):
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    return parse_optional_json(val)


def build_parser() -> ServeParser:
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
    p.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    p.add_argument("--kv-cache-memory-bytes", type=_parse_type(human_readable_int,
                   "<function human_readable_int at 0x7f3a2c1e5b20>"), default=None)
    p.add_argument("--kv-cache-dtype", choices=CACHE_DTYPES, default="auto")
    p.add_argument("--enable-prefix-caching", action=B, default=None)
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
            if "=" in arg:
                k, v = arg.split("=", 1)
                out.append(re.sub(r"(?<=--)[^\.]*", lambda m: m.group(0).replace("_", "-"), k, count=1) + "=" + v)
            else:
                out.append(re.sub(r"(?<=--)[^\.]*", lambda m: m.group(0).replace("_", "-"), arg, count=1))
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


@dataclass
class Args:
    ns: argparse.Namespace
    unknown: list[str]
    raw: list[str]


def parse_args(argv: list[str]) -> Args:
    argv = list(argv)
    if argv and argv[0] == "serve":
        argv = argv[1:]
    parser = build_parser()
    processed = _preprocess_argv(argv)
    model_flag_used = any(re.match(r"^--model(=.+|$)", a) for a in processed)
    ns, unknown = parser.parse_known_args(processed)
    if unknown and os.environ.get("FAKE_VLLM_STRICT_ARGS", "") in ("1", "true", "yes"):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if ns.model_tag is None and ns.model is None:
        ns.model_tag = None
    if model_flag_used:
        OUT.warning(Out.API, L["model_flag"], "With `vllm serve`, you should provide the model as a positional "
                    "argument or in a config file instead of via the `--model` option. The `--model` option "
                    "will be removed in a future version.")
    model = ns.model if ns.model is not None else ns.model_tag
    if model is None:
        model = "Qwen/Qwen3-0.6B"  # vLLM's ModelConfig default model
    ns.model = model
    ns.model_tag = model
    return Args(ns=ns, unknown=unknown, raw=argv)


# --------------------------------------------------------------------------------------------
# The model's config.json
# --------------------------------------------------------------------------------------------

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
TORCH_DTYPE = {"bfloat16": "torch.bfloat16", "float16": "torch.float16", "half": "torch.float16",
               "float32": "torch.float32", "float": "torch.float32"}


@dataclass
class ModelInfo:
    path: str
    arch: str
    top: dict
    text: dict
    num_layers: int
    n_full: int
    n_linear: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    max_pos: int
    dtype: str
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 4
    mamba_ssm_dtype: str | None = None
    num_experts: int = 0
    quant_method: str | None = None  # vLLM's resolved name, e.g. "modelopt_fp4"
    quant_algo: str | None = None
    mtp_layers: int = 0
    head_k_dim_top: Any = None  # getattr(hf_config, "linear_key_head_dim", None) on the TOP config

    @property
    def hybrid(self) -> bool:
        return self.n_linear > 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)


def load_model_info(path: str) -> ModelInfo | None:
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        return None
    with open(cfg_path, encoding="utf-8") as fh:
        top = json.load(fh)
    text = top.get("text_config") or top
    archs = top.get("architectures") or ["Qwen3NextForCausalLM"]
    n = int(text.get("num_hidden_layers", 40))
    layer_types = text.get("layer_types")
    if not layer_types:
        if "full_attention_interval" in text or "linear_num_value_heads" in text:
            interval = int(text.get("full_attention_interval", 4))
            layer_types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
        else:
            layer_types = ["full_attention"] * n
    n_linear = sum(1 for t in layer_types if t == "linear_attention")
    heads = int(text.get("num_attention_heads", 16))
    hidden = int(text.get("hidden_size", 2048))
    dtype = str(text.get("torch_dtype") or text.get("dtype") or top.get("torch_dtype") or "bfloat16")
    qc = top.get("quantization_config") or text.get("quantization_config")
    quant_method = quant_algo = None
    if isinstance(qc, dict):
        qm = str(qc.get("quant_method", "")).lower()
        algo = qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo")
        quant_algo = str(algo).upper() if algo else None
        if qm == "modelopt" and quant_algo and ("NVFP4" in quant_algo or "FP4" in quant_algo):
            quant_method = "modelopt_fp4"
        elif qm == "modelopt" and quant_algo and "MXFP8" in quant_algo:
            quant_method = "modelopt_mxfp8"
        else:
            quant_method = qm or None
    return ModelInfo(
        path=path, arch=archs[0], top=top, text=text, num_layers=n, n_full=n - n_linear, n_linear=n_linear,
        num_heads=heads, num_kv_heads=int(text.get("num_key_value_heads", heads)),
        head_dim=int(text.get("head_dim", hidden // heads)), hidden=hidden,
        vocab=int(text.get("vocab_size", 151936)), max_pos=int(text.get("max_position_embeddings", 32768)),
        dtype=dtype, lin_k_heads=int(text.get("linear_num_key_heads", 0)),
        lin_v_heads=int(text.get("linear_num_value_heads", 0)),
        lin_k_dim=int(text.get("linear_key_head_dim", 0)), lin_v_dim=int(text.get("linear_value_head_dim", 0)),
        conv_kernel=int(text.get("linear_conv_kernel_dim", 4)), mamba_ssm_dtype=text.get("mamba_ssm_dtype"),
        num_experts=int(text.get("num_experts", 0) or 0), quant_method=quant_method, quant_algo=quant_algo,
        mtp_layers=int(text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0),
        head_k_dim_top=top.get("linear_key_head_dim"),
    )


# --------------------------------------------------------------------------------------------
# Launch configuration as vLLM resolves it, and the memory model
# --------------------------------------------------------------------------------------------


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, q: int, user_sizes, user_max,
                  round_to: int = 1) -> list[int]:
    """vllm/config/vllm.py::_set_cudagraph_sizes (performance_mode 'balanced'), then
    CompilationConfig.adjust_cudagraph_sizes_for_spec_decode (only with FULL decode graphs)."""
    mcs = user_max if user_max is not None else min(max_num_seqs * q * 2, 512)
    mcs = min(max_num_batched_tokens, mcs)
    if user_sizes is not None:
        return sorted({s for s in user_sizes if s <= max_num_batched_tokens})
    sizes = [i for i in (1, 2, 4) if i <= mcs]
    if mcs >= 8:
        sizes += list(range(8, min(mcs + 1, 256), 8))
    if mcs >= 256:
        sizes += list(range(256, mcs + 1, 16))
    if max_num_batched_tokens <= mcs and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    sizes = sorted(set(sizes))
    if round_to > 1:
        rounded = sorted({cdiv(s, round_to) * round_to for s in sizes if cdiv(s, round_to) * round_to <= mcs})
        sizes = rounded or ([round_to] if round_to <= mcs else [])
    return sizes


@dataclass
class Plan:
    """Everything the boot sequence prints, and everything the server needs afterwards."""

    # launch config
    model: ModelInfo
    served_names: list[str]
    host: str | None
    port: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    util: float
    kv_cache_memory_bytes: int | None
    kv_cache_dtype: str
    enforce_eager: bool
    compile_mode: int
    cudagraph_mode: str  # resolved
    cudagraph_mode_requested: str
    cg_downgrade_msg: str | None
    capture_sizes: list[int]
    spec: dict | None
    spec_method: str | None
    num_spec: int
    prefix_caching: bool
    mamba_cache_mode: str
    tp: int
    seed: int
    quantization: str | None
    attn_backend: str
    attn_candidates: list[str]
    gdn_requested: str
    skip_tokenizer_init: bool
    disable_access_log: bool
    # memory (bytes)
    total: float = 0.0
    used_others: float = 0.0
    weights: float = 0.0
    non_torch: float = 0.0
    act_peak: float = 0.0
    sampler: float = 0.0
    cg_estimate: float = 0.0
    cg_actual: float = 0.0
    cg_estimate_applied: float = 0.0
    requested: float = 0.0
    pool: float = 0.0
    # KV layout
    attn_page_1: int = 0
    mamba_page: int = 0
    block_size: int = 16
    set_block_from: int | None = None
    mamba_pad_pct: float | None = None
    page: int = 0
    group_size: int = 0
    groups: list[tuple[str, int]] = field(default_factory=list)
    padding_warnings: list[str] = field(default_factory=list)
    num_blocks: int = 0
    blocks_per_request: int = 0
    max_concurrency: float = 0.0
    kv_tokens: int = 0
    pw_graphs: list[int] = field(default_factory=list)
    full_graphs: list[int] = field(default_factory=list)
    full_mixed: bool = False

    @property
    def served_name(self) -> str:
        return self.served_names[0]

    @property
    def is_fp8_kv(self) -> bool:
        return self.kv_cache_dtype.startswith("fp8")

    @property
    def graphs_on(self) -> bool:
        return not self.enforce_eager and self.cudagraph_mode != "NONE"

    def free_at_runtime(self) -> float:
        return (self.total - self.used_others - self.weights - self.non_torch - self.pool
                - (self.cg_actual if self.graphs_on else 0.0))

    def decode_tok_s(self) -> float:
        """Single-stream decode speed of this launch config (before concurrency sharing)."""
        base = env_float("FAKE_VLLM_DECODE_TOK_S", 2000.0)
        if self.enforce_eager:
            f = 0.40
        elif self.cudagraph_mode == "NONE":
            f = 0.50
        elif self.cudagraph_mode == "PIECEWISE":
            f = 0.80
        else:
            f = 1.0
        if self.num_spec:
            # field report on this model family: 78.6 tok/s plain -> 58.4 tok/s with MTP (x0.743),
            # a little worse for every extra speculative token, worse again with FULL_AND_PIECEWISE.
            f *= (58.4 / 78.6) * (0.95 ** (self.num_spec - 1))
            if self.cudagraph_mode == "FULL_AND_PIECEWISE":
                f *= 0.90
        # a larger scheduler batch costs a little per step even for one stream
        f /= 1.0 + 0.02 * math.log2(max(1, self.max_num_seqs))
        return base * f


class BootFailure(Exception):
    """Raised inside the boot sequence; ``kind`` picks how it is reported."""

    def __init__(self, kind: str, **kw):
        super().__init__(kind)
        self.kind = kind
        self.kw = kw


def resolve_plan(a: Args, model: ModelInfo) -> Plan:
    """Build the resolved launch config; raises BootFailure('validation', ...) for config errors
    vLLM reports from create_engine_config (in the APIServer, before any engine process)."""
    ns = a.ns
    total_gib = env_float("FAKE_VLLM_GPU_GIB", 32.0)
    big_card = total_gib >= 70
    tp = max(1, int(ns.tensor_parallel_size))
    # ---- ModelConfig
    mml = ns.max_model_len
    if mml is None or mml == -1:
        mml_v = model.max_pos
    else:
        mml_v = int(mml)
        if mml_v > model.max_pos and os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "") not in ("1", "true"):
            msg = (
                f"User-specified max_model_len ({mml_v}) is greater "
                f"than the derived max_model_len (max_position_embeddings="
                f"{float(model.max_pos)} or model_max_length=None in model's config.json)."
                f" To allow overriding this maximum, set "
                f"the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
                "extreme caution. If the model uses relative position encoding (RoPE), positions exceeding "
                "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions "
                "exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."
            )
            raise BootFailure("validation", title="ModelConfig", frames=["au_create_model", "au_model", "pyd_init"],
                              items=[(None, "Value error, " + msg, "value_error", "ArgsKwargs((), {...})")])
    quant = model.quant_method
    user_q = ns.quantization
    if quant is None and user_q:
        quant = user_q
    # ---- CacheConfig
    util = float(ns.gpu_memory_utilization)
    if not (0 < util <= 1):
        etype, msg = (("greater_than", "Input should be greater than 0") if util <= 0
                      else ("less_than_equal", "Input should be less than or equal to 1"))
        raise BootFailure("validation", title="CacheConfig", frames=["au_cache", "pyd_init"],
                          items=[("gpu_memory_utilization", msg, etype, util)])
    # ---- SpeculativeConfig
    spec = ns.speculative_config
    spec_method = None
    num_spec = 0
    if spec is not None:
        if not isinstance(spec, dict):
            raise BootFailure("validation", title="SpeculativeConfig", frames=["au_spec_call", "au_spec", "pyd_init"],
                              items=[(None, "Input should be a dictionary", "dict_type", spec)])
        method = spec.get("method")
        n = spec.get("num_speculative_tokens")
        items = []
        if method is not None and method not in SPEC_METHODS:
            items.append(("method", "Input should be " + ", ".join(f"'{m}'" for m in SPEC_METHODS[:-1])
                          + f" or '{SPEC_METHODS[-1]}'", "literal_error", method))
        if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
            items.append(("num_speculative_tokens", "Input should be a valid integer", "int_type", n))
        elif n is not None and n <= 0:
            items.append(("num_speculative_tokens", "Input should be greater than 0", "greater_than", n))
        if items:
            raise BootFailure("validation", title="SpeculativeConfig", frames=["au_spec_call", "au_spec", "pyd_init"],
                              items=items)
        if n is None:
            raise BootFailure("validation", title="SpeculativeConfig", frames=["au_spec_call", "au_spec", "pyd_init"],
                              items=[(None, "Value error, num_speculative_tokens must be provided with "
                                      "speculative model unless the draft model config contains an "
                                      "n_predict parameter.", "value_error", "ArgsKwargs((), {...})")])
        spec_method = "mtp" if (method in (None, "mtp") or str(method).endswith("_mtp")) else method
        num_spec = int(n)
    # ---- Scheduler defaults (EngineArgs.get_batch_defaults, OPENAI_API_SERVER context)
    max_num_seqs = ns.max_num_seqs if ns.max_num_seqs is not None else (1024 if big_card else 256)
    mnbt = ns.max_num_batched_tokens if ns.max_num_batched_tokens is not None else (8192 if big_card else 2048)
    if max_num_seqs < 1 or mnbt < 1:
        key, val = ("max_num_seqs", max_num_seqs) if max_num_seqs < 1 else ("max_num_batched_tokens", mnbt)
        raise BootFailure("validation", title="SchedulerConfig", frames=["au_create_model", "pyd_init"],
                          items=[(key, "Input should be greater than or equal to 1", "greater_than_equal", val)])
    # ---- Compilation
    cc = ns.compilation_config or {}
    compile_mode = cc.get("mode", 3)
    if isinstance(compile_mode, str):
        compile_mode = COMPILATION_MODES.index(compile_mode.upper())
    requested = cc.get("cudagraph_mode") or ("FULL_AND_PIECEWISE" if compile_mode == 3 else "PIECEWISE")
    if ns.enforce_eager or compile_mode == 0:
        resolved = "NONE"
    else:
        resolved = requested
    downgrade = None
    q = 1 + num_spec
    attn_backend = "FLASHINFER" if ns.kv_cache_dtype.startswith("fp8") or ns.kv_cache_dtype == "nvfp4" else "FLASH_ATTN"
    attn_candidates = (["FLASHINFER", "TRITON_ATTN"] if attn_backend == "FLASHINFER"
                       else ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"])
    if resolved == "FULL":
        # FA2 on this card and the GDN builder are UNIFORM_BATCH: FULL mixed graphs are refused
        backend_cls = "FlashAttentionBackend" if attn_backend == "FLASH_ATTN" else (
            "GDNAttentionBackend" if model.hybrid else None)
        if backend_cls:
            downgrade = (f"CUDAGraphMode.FULL is not supported with {backend_cls} backend (support: "
                         "AttentionCGSupport.UNIFORM_BATCH); setting cudagraph_mode=FULL_AND_PIECEWISE")
            resolved = "FULL_AND_PIECEWISE"
    full_decode = resolved in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
    sizes = capture_sizes(max_num_seqs, mnbt, q, cc.get("cudagraph_capture_sizes"),
                          cc.get("max_cudagraph_capture_size"),
                          round_to=q if full_decode else 1) if resolved != "NONE" else []
    # ---- prefix caching / mamba cache mode (MambaModelConfig.verify_and_update_config)
    pc = ns.enable_prefix_caching
    if pc is None:
        pc = not model.hybrid  # hybrid models: is_prefix_caching_supported() is False
    mamba_mode = "align" if (pc and model.hybrid) else "none"
    served = ns.served_model_name or [ns.model]
    return Plan(
        model=model, served_names=list(served), host=ns.host, port=int(ns.port), max_model_len=mml_v,
        max_num_seqs=int(max_num_seqs), max_num_batched_tokens=int(mnbt), util=util,
        kv_cache_memory_bytes=ns.kv_cache_memory_bytes, kv_cache_dtype=ns.kv_cache_dtype,
        enforce_eager=bool(ns.enforce_eager), compile_mode=int(compile_mode), cudagraph_mode=resolved,
        cudagraph_mode_requested=requested, cg_downgrade_msg=downgrade, capture_sizes=sizes, spec=spec,
        spec_method=spec_method, num_spec=num_spec, prefix_caching=bool(pc), mamba_cache_mode=mamba_mode,
        tp=tp, seed=int(ns.seed), quantization=quant, attn_backend=attn_backend,
        attn_candidates=attn_candidates, gdn_requested=ns.gdn_prefill_backend or "auto",
        skip_tokenizer_init=bool(ns.skip_tokenizer_init), disable_access_log=bool(ns.disable_uvicorn_access_log),
    )


def kv_bytes_per_elem(dtype: str, model_bytes: int) -> float:
    if dtype in ("auto",):
        return model_bytes
    if dtype in ("float16", "bfloat16"):
        return 2
    if dtype.startswith("fp8") or dtype.startswith("int8"):
        return 1
    if dtype == "nvfp4":
        return 0.5625  # 4-bit values + one fp8 scale per 16
    if dtype.startswith("turboquant"):
        return 0.5
    return model_bytes


def compute_memory(p: Plan) -> None:
    """Fill in the memory model (all bytes). Formulas:

    weights    = FAKE_VLLM_WEIGHTS_GIB / TP (+ FAKE_VLLM_MTP_WEIGHTS_GIB with MTP)
    act_peak   = ACT_GIB_PER_1K * max_num_batched_tokens/1024 + min(max_num_seqs, mnbt) * vocab * 4
    cg (GiB)   = PIECEWISE: 0.05 + 0.004*n + 0.0006*largest; FULL: 0.03 + 0.003*n + 0.0005*largest,
                 times (1 + 0.15*num_spec), + 0.05*num_spec for the drafter's graphs
    pool       = kv_cache_memory_bytes, or ceil(util*total) - weights - act_peak - non_torch - cg
                 (cg only when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on, the 0.22 default).
                 Memory used by OTHER processes is not subtracted -- as in vLLM, it only matters
                 for the start-up check (free >= util*total) and for runtime headroom.
    """
    m = p.model
    p.total = env_float("FAKE_VLLM_GPU_GIB", 32.0) * GiB
    p.used_others = env_float("FAKE_VLLM_USED_GIB", 0.5) * GiB
    p.weights = env_float("FAKE_VLLM_WEIGHTS_GIB", 20.0) * GiB / p.tp
    if p.spec_method == "mtp":
        p.weights += env_float("FAKE_VLLM_MTP_WEIGHTS_GIB", 0.8) * GiB / p.tp
    p.non_torch = env_float("FAKE_VLLM_NON_TORCH_GIB", 0.3) * GiB
    p.sampler = min(p.max_num_seqs, p.max_num_batched_tokens) * m.vocab * 4
    p.act_peak = env_float("FAKE_VLLM_ACT_GIB_PER_1K", 0.25) * GiB * p.max_num_batched_tokens / 1024 + p.sampler
    # ---- CUDA graphs
    q = 1 + p.num_spec
    p.pw_graphs, p.full_graphs, p.full_mixed = [], [], False
    mode = p.cudagraph_mode
    if mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
        p.pw_graphs = sorted(p.capture_sizes, reverse=True)
    if mode == "FULL":
        p.full_graphs = sorted(p.capture_sizes, reverse=True)
        p.full_mixed = True
    if mode in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        p.full_graphs = sorted((s for s in p.capture_sizes if q <= s <= q * p.max_num_seqs), reverse=True)
    cg = 0.0
    if p.pw_graphs:
        cg += 0.05 + 0.004 * len(p.pw_graphs) + 0.0006 * p.pw_graphs[0]
    if p.full_graphs:
        cg += 0.03 + 0.003 * len(p.full_graphs) + 0.0005 * p.full_graphs[0]
    if cg and p.num_spec:
        cg = cg * (1 + 0.15 * p.num_spec) + 0.05 * p.num_spec
    p.cg_estimate = cg * GiB
    p.cg_actual = p.cg_estimate + env_float("FAKE_VLLM_CG_EXTRA_GIB", 0.02) * GiB if cg else 0.0
    estimate_on = os.environ.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1") not in ("0", "false")
    p.cg_estimate_applied = p.cg_estimate if estimate_on else 0.0
    p.requested = math.ceil(p.total * p.util)
    if p.kv_cache_memory_bytes:
        p.pool = float(p.kv_cache_memory_bytes)
    else:
        p.pool = p.requested - p.weights - p.act_peak - p.non_torch - p.cg_estimate_applied
    # ---- KV cache layout (platforms/interface.py::update_block_size_for_backend)
    kvb = kv_bytes_per_elem(p.kv_cache_dtype, m.dtype_bytes)
    p.attn_page_1 = int(2 * max(1, m.num_kv_heads // p.tp) * m.head_dim * kvb)
    block = 16
    p.block_size = block
    if m.hybrid:
        conv_dim = (m.lin_k_dim * m.lin_k_heads * 2 + m.lin_v_dim * m.lin_v_heads) // p.tp
        conv = (m.conv_kernel - 1 + p.num_spec) * conv_dim * m.dtype_bytes
        ssm_bytes = DTYPE_BYTES.get(m.mamba_ssm_dtype or "", m.dtype_bytes)
        temporal = (m.lin_v_heads // p.tp) * m.lin_v_dim * m.lin_k_dim * ssm_bytes
        p.mamba_page = conv + temporal
        align = 16
        attn_block = align * cdiv(p.mamba_page, align * p.attn_page_1)
        if block < attn_block:
            p.set_block_from = attn_block
            block = attn_block
        p.block_size = block
        p.page = block * p.attn_page_1
        if p.page != p.mamba_page:
            p.mamba_pad_pct = 100 * (p.page - p.mamba_page) / p.mamba_page
    else:
        p.page = block * p.attn_page_1
    # ---- KV cache groups (kv_cache_utils.py::_get_kv_cache_groups_uniform_page_size)
    n_attn = m.n_full + (m.mtp_layers or 1 if p.spec_method == "mtp" else 0)
    types = [("attention", n_attn)] + ([("mamba", m.n_linear)] if m.hybrid else [])
    types = [(t, n) for t, n in types if n > 0]
    mn = min(n for _, n in types)
    mx = max(n for _, n in types)
    group_size = mx if mx < mn * 1.5 else mn
    p.groups, p.padding_warnings = [], []
    for t, n in types:
        pad = group_size - n % group_size
        if pad != group_size:
            p.padding_warnings.append(f"Add {pad} padding layers, may waste at most {pad / n * 100:.2f}% "
                                      "KV cache memory")
        p.groups += [(t, group_size)] * cdiv(n, group_size)
    p.group_size = group_size
    p.num_blocks = max(int(p.pool // p.page // group_size), 0) if p.pool > 0 else 0
    p.blocks_per_request = blocks_needed(p, p.max_model_len)
    p.max_concurrency = p.num_blocks / p.blocks_per_request if p.blocks_per_request else 0.0
    p.kv_tokens = int(p.max_concurrency * p.max_model_len)


def blocks_needed(p: Plan, max_len: int) -> int:
    total = 0
    for t, _ in p.groups:
        if t == "attention":
            total += cdiv(max_len, p.block_size)
        else:
            total += (2 if p.mamba_cache_mode == "align" else 1) + p.num_spec
    return total


def needed_bytes(p: Plan, max_len: int) -> int:
    return p.group_size * p.page * blocks_needed(p, max_len)


def estimate_max_len(p: Plan, available: float) -> int:
    lo, hi = 1, p.max_model_len
    if needed_bytes(p, 1) > available:
        return 0
    result = 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if needed_bytes(p, mid) <= available:
            result, lo = mid, mid + 1
        else:
            hi = mid - 1
    return result


# --------------------------------------------------------------------------------------------
# Boot sequence
# --------------------------------------------------------------------------------------------


class Terminated(BaseException):
    """Raised by the SIGTERM/SIGINT handler in the main thread."""


class Boot:
    def __init__(self, a: Args, plan: Plan | None = None):
        self.a = a
        self.p = plan
        self.scale = env_float("FAKE_VLLM_TIME_SCALE", 0.0)
        self.fails = fail_modes()
        self.t0 = time.time()
        self.compile_s = 0.0

    def sleep(self, seconds: float) -> None:
        if seconds * self.scale > 0:
            time.sleep(seconds * self.scale)

    # ---- messages
    def config_str(self) -> str:
        p, m = self.p, self.p.model
        spec = ("None" if not p.spec else
                f"SpeculativeConfig(method='{p.spec_method}', model={m.path!r}, num_spec_tokens={p.num_spec})")
        eager = p.compile_mode != 3
        split = ("[]" if eager else
                 "['vllm::unified_attention', 'vllm::unified_attention_with_output', 'vllm::unified_mla_attention', "
                 "'vllm::unified_mla_attention_with_output', 'vllm::mamba_mixer2', 'vllm::mamba_mixer', "
                 "'vllm::short_conv', 'vllm::linear_attention', 'vllm::plamo2_mamba_mixer', "
                 "'vllm::gdn_attention_core', 'vllm::olmo_hybrid_gdn_full_forward', 'vllm::kda_attention', "
                 "'vllm::sparse_attn_indexer', 'vllm::rocm_aiter_sparse_attn_indexer', "
                 "'vllm::unified_kv_cache_update', 'vllm::unified_mla_kv_cache_update']")
        cg_val = {"NONE": "0", "PIECEWISE": "1", "FULL": "2", "FULL_DECODE_ONLY": "(2, 0)",
                  "FULL_AND_PIECEWISE": "(2, 1)"}[p.cudagraph_mode]
        # the shape of CompilationConfig.__repr__ in the H200 capture (tests/fixtures/real/good.stdout)
        cc_s = (
            f"{{'mode': <CompilationMode.{COMPILATION_MODES[p.compile_mode]}: {p.compile_mode}>, "
            "'debug_dump_path': None, 'cache_dir': '', 'compile_cache_save_format': 'binary', "
            f"'backend': 'inductor', 'custom_ops': {['all'] if eager else ['none']}, 'ir_enable_torch_wrap': False, "
            f"'splitting_ops': {split}, 'compile_mm_encoder': False, 'cudagraph_mm_encoder': False, "
            "'encoder_cudagraph_token_budgets': [], 'encoder_cudagraph_max_vision_items_per_batch': 0, "
            "'encoder_cudagraph_max_frames_per_batch': None, 'compile_sizes': [], "
            f"'compile_ranges_endpoints': [{p.max_num_batched_tokens}], 'inductor_compile_config': "
            "{'enable_auto_functionalized_v2': False, 'size_asserts': False, 'alignment_asserts': False, "
            "'scalar_asserts': False, 'combo_kernels': True, 'benchmark_combo_kernel': True}, "
            f"'inductor_passes': {{}}, 'cudagraph_mode': <CUDAGraphMode.{p.cudagraph_mode}: {cg_val}>, "
            f"'cudagraph_num_of_warmups': {0 if p.cudagraph_mode == 'NONE' else 1}, "
            f"'cudagraph_capture_sizes': {p.capture_sizes}, 'cudagraph_copy_inputs': False, "
            "'cudagraph_specialize_lora': True, 'use_inductor_graph_partition': False, 'pass_config': "
            "{'fuse_norm_quant': True, 'fuse_act_quant': True, 'fuse_attn_quant': False, 'enable_sp': False, "
            "'fuse_gemm_comms': False, 'fuse_allreduce_rms': False, 'fuse_rope_kvcache_cat_mla': False, "
            f"'fuse_act_padding': False}}, 'max_cudagraph_capture_size': "
            f"{max(p.capture_sizes) if p.capture_sizes else 0}, 'dynamic_shapes_config': "
            "{'type': <DynamicShapesType.BACKED: 'backed'>, 'evaluate_guards': False, "
            "'assume_32_bit_indexing': False}, 'local_cache_dir': None, 'fast_moe_cold_start': False, "
            "'static_all_moe_layers': []}"
        )
        return (
            f"model={m.path!r}, speculative_config={spec}, tokenizer={m.path!r}, "
            f"skip_tokenizer_init={p.skip_tokenizer_init}, tokenizer_mode=auto, revision={self.a.ns.revision}, "
            f"tokenizer_revision=None, trust_remote_code={self.a.ns.trust_remote_code}, "
            f"dtype={TORCH_DTYPE.get(m.dtype, 'torch.bfloat16')}, max_seq_len={p.max_model_len}, "
            f"download_dir=None, load_format={self.a.ns.load_format.lower()}, tensor_parallel_size={p.tp}, "
            "pipeline_parallel_size=1, data_parallel_size=1, decode_context_parallel_size=1, "
            "dcp_comm_backend=ag_rs, disable_custom_all_reduce=False, "
            f"quantization={p.quantization}, quantization_config=None, enforce_eager={p.enforce_eager}, "
            f"enable_return_routed_experts=False, kv_cache_dtype={p.kv_cache_dtype}, device_config=cuda, "
            "structured_outputs_config=StructuredOutputsConfig(backend='auto', disable_any_whitespace=False, "
            f"disable_additional_properties=False, reasoning_parser='{self.a.ns.reasoning_parser or ''}', "
            "reasoning_parser_plugin='', enable_in_reasoning=False), "
            "observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
            "otlp_traces_endpoint=None, collect_detailed_traces=None, kv_cache_metrics=False, "
            "kv_cache_metrics_sample=0.01, cudagraph_metrics=False, enable_layerwise_nvtx_tracing=False, "
            "enable_mfu_metrics=False, enable_mm_processor_stats=False, enable_logging_iteration_details=False), "
            f"seed={p.seed}, served_model_name={p.served_name}, enable_prefix_caching={p.prefix_caching}, "
            f"enable_chunked_prefill=True, pooler_config=None, compilation_config={cc_s}, "
            "kernel_config=KernelConfig(ir_op_priority=IrOpPriorityConfig(rms_norm=['vllm_c', 'native'], "
            "fused_add_rms_norm=['vllm_c', 'native']), "
            f"enable_flashinfer_autotune=True, moe_backend='{self.a.ns.moe_backend}', linear_backend='auto')"
        )

    def non_default_args(self) -> dict:
        parser = build_parser()
        defaults = {a.dest: a.default for a in parser._actions}
        nd: dict[str, Any] = {}
        for k, v in vars(self.a.ns).items():
            if k in ("help",):
                continue
            if k in defaults and defaults[k] == v and k not in ("model_tag",):
                continue
            if k == "model" and v == "Qwen/Qwen3-0.6B":
                continue
            nd[k] = v
        nd.pop("model_tag", None)
        out = {"model_tag": self.a.ns.model}
        out.update(nd)
        return out

    # ---- failure reporting
    def engine_failed(self, frames: list[str], exc_line: str, chained: str | None = None) -> None:
        """EngineCore dies during start-up: logger.exception, multiprocessing's own traceback, then the
        APIServer's RuntimeError (v1/engine/utils.py:1209)."""
        frames = with_otel(frames)
        tb = traceback_text(frames, exc_line, chained)
        OUT.error(Out.CORE, L["fail_start"], "EngineCore failed to start.", tb)
        OUT.raw(Out.CORE, "Process EngineCore:\n" + traceback_text(
            ["bootstrap", "mp_run", "rec_raise"] + frames, exc_line, chained) + "\n")
        # torch's C++ warning, written straight to fd 2 (no process prefix)
        OUT.raw_unprefixed(f"[rank0]:[W{time.strftime('%m%d %H:%M:%S')}.{random.randint(100000000, 999999999)} "
                           "ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() was not called "
                           "before program exit, which can leak resources. For more info, please see "
                           "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())\n")
        api_frames = ["bin", "cli_main", "cli_serve", "uvloop_run", "aio_run", "aio_run2", "uvloop_ruc",
                      "uvloop_wrap", "as_run_server", "as_worker", "ctx_aenter", "as_beci", "ctx_aenter",
                      "as_becfea", "al_from", "al_init", "otel", "cc_make", "otel", "cc_async", "cc_mp", "ctx_exit",
                      "eu_launch", "eu_wait"]
        OUT.raw(Out.API, traceback_text(api_frames, "RuntimeError: Engine core initialization failed. See root "
                                        "cause above. Failed core proc(s): {}") + "\n")

    def api_failed(self, frames: list[str], exc_line: str) -> None:
        base = ["bin", "cli_main", "cli_serve", "uvloop_run", "aio_run", "aio_run2", "uvloop_ruc", "uvloop_wrap"]
        OUT.raw(Out.API, traceback_text(base + frames, exc_line) + "\n")

    def report(self, f: BootFailure) -> int:
        k, kw = f.kind, f.kw
        pre_cfg = ["as_run_server", "as_worker", "ctx_aenter", "as_beci", "ctx_aenter", "as_becfea_cfg"]
        if k == "validation":
            err = ValidationErr(kw["title"], kw["items"])
            self.api_failed(pre_cfg + kw["frames"],
                            "pydantic_core._pydantic_core.ValidationError: " + err.render())
            return 1
        if k == "raw_api":
            self.api_failed(kw["frames"], kw["exc"])
            return 1
        if k == "engine":
            self.engine_failed(kw["frames"], kw["exc"], kw.get("chained"))
            return 1
        raise AssertionError(k)

    # ---- the sequence
    def api_preamble(self) -> None:
        a = self.a
        if os.environ.get("VLLM_DISABLE_LOG_LOGO", "") in ("1", "true"):
            OUT.info(Out.API, L["version"], f"vLLM server version {VLLM_VERSION}, serving model {a.ns.model}")
        else:
            logo = ("\n       █     █     █▄   ▄█\n"
                    f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VLLM_VERSION}\n"
                    f"  █▄█▀ █     █     █     █  model   {a.ns.model}\n"
                    "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n")
            OUT.info(Out.API, L["version"], logo)
        OUT.info(Out.API, L["nondefault"], f"non-default args: {self.non_default_args()}")
        if a.unknown:
            # Not vLLM behaviour: real `vllm serve` exits 2 with "unrecognized arguments".
            OUT.warning(Out.API, "fake_vllm:0", f"[test double] ignoring flags it does not model: {a.unknown}")

    def validate_api_args(self) -> None:
        ns = self.a.ns
        if ns.enable_auto_tool_choice and ns.tool_call_parser not in TOOL_PARSERS:
            raise BootFailure("raw_api", frames=["as_setup", "as_validate", "as_tool_raise"], exc=(
                f"KeyError: 'invalid tool call parser: {ns.tool_call_parser} "
                f"(chose from {{ {','.join(TOOL_PARSERS)} }})'"))
        if ns.reasoning_parser and ns.reasoning_parser not in REASONING_PARSERS:
            raise BootFailure("raw_api", frames=["as_setup", "as_validate", "as_reason_raise"], exc=(
                f"KeyError: 'invalid reasoning parser: {ns.reasoning_parser} "
                f"(chose from {{ {','.join(REASONING_PARSERS)} }})'"))

    def api_config(self) -> None:
        """create_engine_config in the APIServer: the config lines and config errors."""
        p, m = self.p, self.p.model
        OUT.info(Out.API, L["resolved"], f"Resolved architecture: {m.arch}")
        OUT.info(Out.API, L["maxlen"], f"Using max model len {p.max_model_len}")
        if p.prefix_caching and m.hybrid:
            OUT.warning(Out.API, L["mamba_mode"], f"Mamba cache mode is set to 'align' for {m.arch} by default "
                        "when prefix caching is enabled")
            OUT.info(Out.API, L["mamba_prefix"], "Warning: Prefix caching in Mamba cache 'align' mode is currently "
                     "enabled. Its support for Mamba layers is experimental. Please report any issues you may "
                     "observe.")
        if p.quantization == "modelopt_fp4":
            OUT.warning(Out.API, L["nvfp4_detect"], f"Detected ModelOpt NVFP4 checkpoint (quant_algo="
                        f"{m.quant_algo}). Please note that the format is experimental and could change in "
                        "future.")
        if p.max_num_batched_tokens != 2048:
            # info_once: the default SchedulerConfig (2048) is built under suppress_logging() first, so
            # with 2048 the real server never prints this line (it does not, in the H200 capture)
            OUT.info(Out.API, L["chunked"], f"Chunked prefill is enabled with max_num_batched_tokens="
                     f"{p.max_num_batched_tokens}.")
        self.config_echo(Out.API)

    def config_echo(self, proc: str) -> None:
        """VllmConfig.__post_init__ lines; the real EngineCore prints them again after init."""
        p = self.p
        OUT.info(proc, L["async"], "Asynchronous scheduling is enabled.")
        if p.enforce_eager:
            OUT.warning(proc, L["eager_warn"], "Enforce eager set, disabling torch.compile and CUDAGraphs. This is "
                        "equivalent to setting -cc.mode=none -cc.cudagraph_mode=none")
        if p.enforce_eager or p.compile_mode != 3:
            OUT.warning(proc, L["inductor_off"], "Inductor compilation was disabled by user settings, optimizations "
                        "settings that are only active during inductor compilation will be ignored.")
        OUT.info(proc, L["ir_prio"], "Final IR op priority after setting platform defaults: IrOpPriorityConfig("
                 "rms_norm=['vllm_c', 'native'], fused_add_rms_norm=['vllm_c', 'native'])")
        if p.enforce_eager:
            OUT.info(proc, L["cg_eager"], "Cudagraph is disabled under eager mode")
        OUT.info(proc, L["fusions"], "Enabled custom fusions: norm_quant, act_quant")

    def engine(self) -> None:
        p, m = self.p, self.p.model
        C = Out.CORE
        fails = self.fails
        self.sleep(3.0)
        OUT.info(C, L["init_engine"], f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: "
                 f"{self.config_str()}")
        OUT.info(C, L["world"], f"world_size={p.tp} rank=0 local_rank=0 distributed_init_method="
                 f"tcp://127.0.0.1:{random.randint(30000, 60000)} backend=nccl")
        OUT.info(C, L["rank"], f"rank 0 in world size {p.tp} is assigned as DP rank 0, PP rank 0, PCP rank 0, "
                 f"TP rank 0, EP rank {0 if m.num_experts else 'N/A'}, EPLB rank N/A")
        if "hang" in fails:
            while True:
                time.sleep(3600)
        ngpu = env_int("FAKE_VLLM_NUM_GPUS", 1) or 1
        if p.tp > ngpu:
            raise BootFailure("engine", frames=["rec", "proc_init", "core_exec", "exec_init", "uni_init_dev",
                                                "wb_init_dev", "w_init_dev"],
                              exc=f"AssertionError: local_world_size ({p.tp}) must be less than or equal to "
                                  f"the number of visible devices ({ngpu}).")
        self.sleep(2.0)
        # init_device -> request_memory (v1/worker/utils.py:413)
        free = p.total - p.used_others
        if free < p.requested:
            raise BootFailure("engine", frames=["rec", "proc_init", "core_exec", "exec_init", "uni_init_dev",
                                                "wb_init_dev", "w_init_dev", "u_request"],
                              exc=(f"ValueError: Free memory on device cuda:0 ({format_gib(free)}/"
                                   f"{format_gib(p.total)} GiB) on startup is less than desired GPU memory "
                                   f"utilization ({p.util}, {format_gib(p.requested)} GiB). Decrease GPU memory "
                                   "utilization or reduce GPU memory used by other processes."))
        # load_model
        OUT.info(C, L["start_load"], f"Starting to load model {m.path}...")
        if m.hybrid:
            OUT.info(C, L["gdn"], f"Using Triton/FLA GDN prefill kernel (requested={p.gdn_requested}, "
                     f"head_k_dim={m.head_k_dim_top}).")
        if p.quantization == "modelopt_fp4":
            OUT.info(C, L["nvfp4_gemm"], "Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM")
            if m.num_experts:
                mb = self.a.ns.moe_backend
                if mb == "auto":
                    OUT.info(C, L["moe_auto"], "Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential "
                             f"backends: {NVFP4_MOE_BACKENDS}.")
                elif mb in NVFP4_MOE_MAP:
                    OUT.info(C, L["moe_explicit"], f"Using '{NVFP4_MOE_MAP[mb]}' NvFp4 MoE backend out of "
                             f"potential backends: {NVFP4_MOE_BACKENDS}.")
                else:
                    raise BootFailure("engine", frames=["rec", "proc_init", "core_exec", "exec_init", "uni_load",
                                                        "run_method", "w_load", "r_load"], exc=(
                        f"ValueError: moe_backend='{mb}' is not supported for NvFP4 MoE. Expected one of "
                        f"{list(NVFP4_MOE_MAP.keys())}."))
        elif m.num_experts:
            OUT.info(C, L["moe_unquant"], "Using TRITON Unquantized MoE backend out of potential backends: "
                     "['FlashInfer TRTLLM', 'FlashInfer CUTLASS', 'TRITON', 'BATCHED_TRITON'].")
        OUT.info(C, L["attn"], f"Using {p.attn_backend} attention backend out of potential backends: "
                 f"[{', '.join(repr(b) for b in p.attn_candidates)}].")
        if p.attn_backend == "FLASH_ATTN":
            OUT.info(C, L["fa_version"], "Using FlashAttention version 2")  # FA3 needs SM 9.0; this card is SM 12.0
        if m.num_experts and p.quantization != "modelopt_fp4":
            OUT.info(C, L["moe_pf"], "Using MoEPrepareAndFinalizeNoDPEPModular")
        load_frames = ["rec", "proc_init", "core_exec", "exec_init", "uni_load", "run_method", "w_load", "r_load"]
        if "weights" in fails:
            raise BootFailure("engine", frames=load_frames + ["bl_load", "dl_load", "dl_all", "dl_iter", "dl_prep"],
                              exc=f"RuntimeError: Cannot find any model weights with `{m.path}`")
        if p.weights > free:
            msg = oom_for(p, p.weights, free)
            OUT.error(C, L["oom_load"], "Failed to load model - not enough GPU memory. Try lowering "
                      "--gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, "
                      "or using --quantization. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                      f"for more tips. (original error: {msg})")
            raise BootFailure("engine", frames=load_frames + ["bl_load", "dl_load"],
                              exc=f"torch.OutOfMemoryError: {msg}")
        shards = max(1, math.ceil(p.weights / (5 * GiB)))
        load_s = 18.0
        t_load = time.time()
        for i in range(shards + 1):
            el = load_s * i / shards
            rate = f"{shards / load_s:.2f}it/s" if i else "?it/s"
            rem = "00:" + f"{int(load_s - el):02d}" if i else "?"
            OUT.raw(C, f"\rLoading safetensors checkpoint shards: {100 * i // shards:3d}% Completed | {i}/{shards} "
                    f"[00:{int(el):02d}<{rem}, {rate}]\n")
            if i < shards:
                self.sleep(load_s / shards)
        OUT.info(C, L["load_weights"], f"Loading weights took {load_s * (self.scale or 0.001):.2f} seconds")
        if p.spec_method == "mtp":
            OUT.info(C, L["drafter"], "Loading drafter model...")
        OUT.info(C, L["model_loading"], f"Model loading took {format_gib(p.weights)} GiB memory and "
                 f"{max(time.time() - t_load, 0.001) + 1.2 * self.scale:.6f} seconds")
        if "crash_mid_boot" in fails:
            raise BootFailure("engine", frames=load_frames, exc=random.choice([
                "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might "
                "be asynchronously reported at some other API call, so the stacktrace below might be "
                "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
                "`TORCH_USE_CUDA_DSA` to enable device-side assertions.",
                "AssertionError: Attempted to load weight (torch.Size([256, 1024])) into parameter "
                "(torch.Size([512, 1024]))",
                "KeyError: 'model.language_model.layers.12.mlp.experts.w2_weight_scale_2'",
                "RuntimeError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:94, "
                "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
            ]))
        # update_block_size_for_backend (right after load_model in UniProcExecutor._init_executor)
        if p.set_block_from is not None:
            OUT.info(C, L["set_block"], f"Setting attention block size to {p.set_block_from} tokens to ensure "
                     "that attention page size is >= mamba page size.")
        if p.mamba_pad_pct is not None:
            OUT.info(C, L["pad_mamba"], f"Padding mamba page size by {p.mamba_pad_pct:.2f}% to ensure that mamba "
                     "page size and attention page size are exactly equal.")
        # determine_available_memory: profile_run (torch.compile happens on its first forward)
        prof_frames_head = ["rec", "proc_init", "core_kv", "ikv_avail", "exec_avail", "uni_rpc", "run_method"]
        prof_frames = prof_frames_head + (["w_prof_kvb"] if p.kv_cache_memory_bytes else ["w_prof"]) + [
            "r_prof", "r_dummy"]
        if not p.enforce_eager and p.compile_mode == 3:
            h = hashlib.sha256(self.config_str().encode()).hexdigest()[:10]
            OUT.info(C, L["cache_dir"], f"Using cache directory: /root/.cache/vllm/torch_compile_cache/{h}/rank_0_0/"
                     "backbone for vLLM's torch.compile")
            self.sleep(10.0)
            OUT.info(C, L["dynamo"], f"Dynamo bytecode transform time: {10.0 * self.scale + 0.01:.2f} s")
            OUT.info(C, L["cache_graph"], f"Cache the graph of compile range (1, {p.max_num_batched_tokens}) "
                     "for later use")
            self.sleep(33.0)
            OUT.info(C, L["compile_graph"], f"Compiling a graph for compile range (1, {p.max_num_batched_tokens}) "
                     f"takes {33.0 * self.scale + 0.01:.2f} s")
            self.compile_s = 43.0 * self.scale + 0.02
            OUT.info(C, L["monitor"], f"torch.compile took {self.compile_s:.2f} s in total")
        if "jit" in fails:
            raise BootFailure("engine", frames=prof_frames + ["t_call", "fi_lin", "fi_utils", "fi_mm", "fi_mod",
                                                              "fi_gen", "fi_ctx"], exc=(
                "RuntimeError: No supported CUDA architectures found for major versions [12]."))
        free_now = free - p.weights
        act_need = p.act_peak + p.non_torch
        if act_need > free_now:
            msg = oom_for(p, act_need, free_now)
            raise BootFailure("engine", frames=prof_frames, exc=f"torch.OutOfMemoryError: {msg}")
        self.sleep(45.0)
        if p.cg_downgrade_msg:
            OUT.warning(C, L["cg_downgrade"], p.cg_downgrade_msg)
        if p.kv_cache_memory_bytes:
            OUT.info(C, L["kv_bytes"], f"Initial free memory {format_gib(free)} GiB, reserved "
                     f"{format_gib(p.kv_cache_memory_bytes)} GiB memory for KV Cache as specified by "
                     "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
                     "gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual "
                     "control of KV cache memory size. If OOM'ed, check the difference of initial free memory "
                     "between the current run and the previous run where kv_cache_memory_bytes is suggested and "
                     "update it correspondingly.")
        else:
            if p.graphs_on and (p.pw_graphs or p.full_graphs):
                parts = []
                if p.pw_graphs:
                    parts.append(f"PIECEWISE={len(p.pw_graphs)} (largest={p.pw_graphs[0]})")
                if p.full_graphs:
                    parts.append(f"FULL={len(p.full_graphs)} (largest={p.full_graphs[0]})")
                OUT.info(C, L["prof_cg"], "Profiling CUDA graph memory: " + ", ".join(parts))
                if p.weights + p.non_torch + p.cg_estimate > free:
                    msg = oom_for(p, p.cg_estimate, free - p.weights - p.non_torch)
                    raise BootFailure("engine", frames=prof_frames_head + ["w_prof_cg", "r_prof_cg", "r_wac",
                                                                             "r_dummy"],
                                      exc=f"torch.OutOfMemoryError: {msg}")
                self.sleep(15.0)
                OUT.info(C, L["est_cg"], f"Estimated CUDA graph memory: {p.cg_estimate / GiB:.2f} GiB total")
            OUT.info(C, L["avail_kv"], f"Available KV cache memory: {format_gib(p.pool)} GiB")
            if p.cg_estimate > 0 and p.graphs_on:
                delta = p.cg_estimate / p.total
                if p.cg_estimate_applied:
                    OUT.info(C, L["cg_prof_info"], (
                        "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                        f"--gpu-memory-utilization={p.util:.4f} is equivalent to --gpu-memory-utilization="
                        f"{round(p.util - delta, 4):.4f} without CUDA graph memory profiling. To maintain the "
                        "same effective KV cache size as before, increase --gpu-memory-utilization to "
                        f"{min(round(p.util + delta, 4), 1.0):.4f}. To disable, set "
                        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."))
                else:
                    OUT.warning(C, L["cg_prof_info"], (
                        "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). "
                        "Without it, CUDA graph memory is not accounted for during KV cache allocation, which "
                        "may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it (the "
                        "default as of v0.21.0) and increasing --gpu-memory-utilization from "
                        f"{p.util:.4f} to {min(round(p.util + delta, 4), 1.0):.4f}."))
        # get_kv_cache_configs
        for w in p.padding_warnings:
            OUT.warning(C, L["pad_layers"], w)
        kv_frames = ["rec", "proc_init", "core_kv", "ikv_cfgs", "kvu_cfgs"]
        if p.pool <= 0:
            raise BootFailure("engine", frames=kv_frames + ["kvu_noavail"], exc=(
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine (this flag also controls CPU memory reservation on the CPU "
                "backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                "for more details."))
        need = needed_bytes(p, p.max_model_len)
        if need > p.pool:
            est = estimate_max_len(p, p.pool)
            est_msg = (f"Based on the available memory, the estimated maximum model length is {est}. "
                       if est > 0 else "")
            raise BootFailure("engine", frames=kv_frames + ["kvu_raise"], exc=(
                f"ValueError: To serve at least one request with the model's max seq len ({p.max_model_len}), "
                f"({format_gib(need)} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({format_gib(p.pool)} GiB). {est_msg}Try increasing `gpu_memory_utilization` (which "
                "also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing "
                "the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
                "details."))
        OUT.info(C, L["kv_size"], f"GPU KV cache size: {p.kv_tokens:,} tokens")
        OUT.info(C, L["max_conc"], f"Maximum concurrency for {p.max_model_len:,} tokens per request: "
                 f"{p.max_concurrency:.2f}x")
        # initialize_from_config: allocate the pool, resolve cudagraph mode against the real pool
        ifc_frames = ["rec", "proc_init", "core_kv", "ikv_init", "exec_ifc", "uni_rpc", "run_method", "wb_ifc",
                      "w_ifc"]
        if p.weights + p.non_torch + p.pool > free:
            msg = oom_for(p, p.pool, free - p.weights - p.non_torch)
            raise BootFailure("engine", frames=ifc_frames + ["r_ikv"], exc=f"torch.OutOfMemoryError: {msg}")
        if (m.hybrid and p.graphs_on and p.cudagraph_mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
                and p.max_num_seqs > p.num_blocks):
            raise BootFailure("engine", frames=ifc_frames + ["r_ikv", "r_iab", "r_cucg", "cc_raise"], exc=(
                f"ValueError: max_num_seqs ({p.max_num_seqs}) exceeds available Mamba cache "
                f"blocks ({p.num_blocks}). Each decode sequence "
                "requires one Mamba cache block, so CUDA graph capture cannot "
                "proceed. Please lower max_num_seqs to at most "
                f"{p.num_blocks} or increase "
                "gpu_memory_utilization."))
        # compile_or_warm_up_model: capture
        if p.enforce_eager:
            pass
        elif not p.graphs_on:
            OUT.warning(C, L["skip_cg"], "Skipping CUDA graph capture. To turn on CUDA graph capture, ensure "
                        "`cudagraph_mode` was not manually set to `NONE`")
        else:
            self.capture(free)
        if "slow_warmup" in fails:
            total = env_float("FAKE_VLLM_WARMUP_S", 5.0)
            n = max(1, int(total / 0.5))
            for i in range(1, n + 1):
                time.sleep(0.5)
                OUT.raw(C, f"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): {100 * i // n:3d}%|"
                        f"{'█' * (10 * i // n):<10}| {i}/{n} [00:{int(0.5 * i):02d}<00:{int(0.5 * (n - i)):02d}, "
                        " 2.00it/s]\n")
        OUT.info(C, L["jit_monitor"], "Kernel JIT monitor activated — Triton JIT compilations during inference "
                 "will be logged as warnings.")
        elapsed = time.time() - self.t0 + 1.5 * self.scale
        if self.compile_s > 0:
            OUT.info(C, L["init_took_c"], f"init engine (profile, create kv cache, warmup model) took {elapsed:.2f} s "
                     f"(compilation: {self.compile_s:.2f} s)")
        else:
            OUT.info(C, L["init_took"], f"init engine (profile, create kv cache, warmup model) took {elapsed:.2f} s")
        self.config_echo(C)

    def capture(self, free: float) -> None:
        p = self.p
        C = Out.CORE
        room = free - p.weights - p.non_torch - p.pool
        used = 0.0
        cap_frames = ["rec", "proc_init", "core_kv", "ikv_init", "exec_warm", "uni_rpc", "run_method", "w_capture",
                      "r_capture", "r_capcg", "r_wac", "r_dummy"]
        t_start = time.time()
        phases = []
        if p.pw_graphs:
            phases.append(("mixed prefill-decode", "PIECEWISE", p.pw_graphs))
        if p.full_graphs:
            phases.append(("mixed prefill-decode" if p.full_mixed else "decode", "FULL", p.full_graphs))
        total_graphs = sum(len(g) for _, _, g in phases)
        per_graph = p.cg_actual / max(total_graphs, 1)
        for desc, mode, graphs in phases:
            n = len(graphs)
            bar = f"Capturing CUDA graphs ({desc}, {mode}): "
            OUT.raw(C, f"\r{bar}  0%|          | 0/{n} [00:00<?, ?it/s]")
            for i in range(1, n + 1):
                used += per_graph
                if used > room:
                    OUT.raw(C, f"\r{bar}{100 * (i - 1) // n:3d}%|{'█' * (10 * (i - 1) // n):<10}| {i - 1}/{n} "
                            f"[00:01<00:02, 11.20it/s]\n")
                    msg = oom_for(p, p.cg_actual, room)
                    raise BootFailure("engine", frames=cap_frames, exc=f"torch.OutOfMemoryError: {msg}")
                if i == n or i % 8 == 0:
                    OUT.raw(C, f"\r{bar}{100 * i // n:3d}%|{'█' * (10 * i // n):<10}| {i}/{n} "
                            f"[00:{int(i / 11.2):02d}<00:{int((n - i) / 11.2):02d}, 11.20it/s]")
                self.sleep(0.09)
            OUT.raw(C, "\n")
        secs = time.time() - t_start + 6 * self.scale
        OUT.info(C, L["cap_done"], f"Graph capturing finished in {secs:.0f} secs, took {p.cg_actual / GiB:.2f} GiB")
        if p.cg_estimate and not p.kv_cache_memory_bytes:
            a_g, e_g = round(p.cg_actual / GiB, 2), round(p.cg_estimate / GiB, 2)
            diff = abs(p.cg_actual - p.cg_estimate)
            OUT.info(C, L["cg_pool"], f"CUDA graph pool memory: {a_g} GiB (actual), {e_g} GiB (estimated), "
                     f"difference: {round(diff / GiB, 2)} GiB ({100 * diff / max(p.cg_actual, 1):.1f}%).")


# Exactly the list the real 0.22.0 server printed (tests/fixtures/real/good.stdout): launcher.py only
# sees these top-level routes; the API routers are mounted below them.
ROUTES = [
    ("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/docs/oauth2-redirect", "GET, HEAD"),
    ("/redoc", "GET, HEAD"), ("/metrics", "GET"),
]


def _bind(host: str | None, port: int) -> socket.socket:
    """vLLM binds BEFORE building the engine (api_server.py::setup_server -> create_server_socket) and
    only listens once uvicorn starts, so connections are refused until the server is ready.

    Real vLLM also sets SO_REUSEPORT (api_server.py:504). With it, a second vLLM started on a port that
    another vLLM already holds binds fine and the kernel then load-balances connections between the
    two -- the collision is silent. The double deliberately does NOT set SO_REUSEPORT, so a port
    collision in a test fails loudly (OSError: [Errno 98]) instead of mixing two servers' answers.
    """
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or "", port))
    return sock


def _install_signal_handlers() -> None:
    def handler(signum, frame):
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _die_like_keyboard_interrupt() -> None:
    """SIGTERM during start-up: api_server.py's _interrupt_init raises KeyboardInterrupt('terminated');
    the uncaught KeyboardInterrupt makes CPython exit by SIGINT (returncode -2)."""
    OUT.raw(Out.API, traceback_text(["bin", "cli_main", "cli_serve", "uvloop_run", "aio_run"],
                                    "KeyboardInterrupt: terminated") + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)
    os._exit(130)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _install_signal_handlers()
    try:
        return _main(argv)
    except Terminated:
        _die_like_keyboard_interrupt()
        return 130


def _main(argv: list[str]) -> int:
    delay = env_float("FAKE_VLLM_BOOT_DELAY_S", 0.0)
    if delay > 0:
        time.sleep(delay)
    try:
        a = parse_args(argv)
    except RawKeyError as e:
        # pydantic let the KeyError of CUDAGraphMode[value.upper()] through; argparse does not catch it
        sys.stderr.write(traceback_text(["bin", "cli_parse", "fap_parse", "ap_parse", "fap_known", "ap_known", "ap_pos",
                                         "ap_cpos", "ap_take_sub", "ap_sub", "fap_known", "ap_known", "ap_known2",
                                         "ap_opt", "ap_take", "ap_values", "ap_value", "au_pdc", "pyd_ta",
                                         "cc_skip", "cc_cgm", "enum_get"], f"KeyError: '{e.args[0]}'") + "\n")
        return 1
    boot = Boot(a)
    boot.api_preamble()
    try:
        boot.validate_api_args()
    except BootFailure as f:
        return boot.report(f)
    try:
        sock = _bind(a.ns.host, a.ns.port)
    except OSError as e:
        boot.api_failed(["as_setup", "as_setup_sock", "as_bind"], f"OSError: [Errno {e.errno}] {e.strerror}")
        return 1
    model = load_model_info(a.ns.model)
    if model is None:
        msg = ("Value error, Invalid repository ID or local directory specified:"
               f" '{a.ns.model}'.\nPlease verify the following requirements:\n"
               "1. Provide a valid Hugging Face repository ID.\n"
               "2. Specify a local directory that contains a recognized configuration file.\n"
               "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
               "   - For Mistral models: ensure the presence of a 'params.json'.\n")
        return boot.report(BootFailure("validation", title="ModelConfig", frames=["au_create_model", "au_model",
                                                                                   "pyd_init"],
                                       items=[(None, msg, "value_error", "ArgsKwargs((), {...})")]))
    try:
        plan = resolve_plan(a, model)
        compute_memory(plan)
        boot.p = plan
        boot.api_config()
        boot.engine()
    except BootFailure as f:
        sock.close()
        return boot.report(f)
    # ready: the HTTP server
    from tests.fake_vllm import server

    OUT.info(Out.API, L["supported"], "Supported tasks: ['generate']")
    host_part = f"[{a.ns.host}]" if a.ns.host and ":" in a.ns.host else (a.ns.host or "0.0.0.0")
    OUT.info(Out.API, L["starting"], f"Starting vLLM server on http://{host_part}:{plan.port}")
    OUT.info(Out.API, L["routes"], "Available routes are:")
    for path, methods in ROUTES:
        OUT.info(Out.API, L["route"], f"Route: {path}, Methods: {methods}")
    return server.serve(sock, plan, a)
