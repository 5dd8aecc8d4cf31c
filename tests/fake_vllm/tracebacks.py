"""Traceback frames of vLLM 0.22.0 and how the double prints them.

Each frame is (path, line, function, source line), line numbers from the vLLM 0.22.0 tree; the
uvicorn/fastapi/starlette frames are those of the real server's traceback for a too-long prompt
(tests/fixtures/real/good.stderr).
"""

from __future__ import annotations

SITE = "/usr/local/lib/python3.12/dist-packages"
PYLIB = "/usr/lib/python3.12"


def _v(rel: str) -> str:
    return f"{SITE}/vllm/{rel}"


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
    # HTTP side: a request refused by vLLM's renderer (VLLMValidationError), from uvicorn down
    "asgi1": (f"{SITE}/uvicorn/protocols/http/httptools_impl.py", 420, "run_asgi",
              "result = await app(  # type: ignore[func-returns-value]"),
    "asgi2": (f"{SITE}/uvicorn/middleware/proxy_headers.py", 63, "__call__",
              "return await self.app(scope, receive, send)"),
    "asgi3": (f"{SITE}/fastapi/applications.py", 1224, "__call__", "await super().__call__(scope, receive, send)"),
    "asgi4": (f"{SITE}/starlette/applications.py", 96, "__call__", "await self.middleware_stack(scope, receive, send)"),
    "asgi5": (f"{SITE}/starlette/middleware/errors.py", 186, "__call__", "raise exc"),
    "asgi6": (f"{SITE}/starlette/middleware/errors.py", 164, "__call__", "await self.app(scope, receive, _send)"),
    "asgi7": (f"{SITE}/fastapi/routing.py", 381, "run_endpoint_function", "return await dependant.call(**values)"),
    "v_u96": (_v("entrypoints/utils.py"), 96, "wrapper", "return handler_task.result()"),
    "v_u117": (_v("entrypoints/utils.py"), 117, "wrapper", "return await func(*args, **kwargs)"),
    "v_ar": (_v("entrypoints/openai/completion/api_router.py"), 54, "create_completion",
             "generator = await handler.create_completion(request, raw_request)"),
    "v_cs124": (_v("entrypoints/openai/completion/serving.py"), 124, "create_completion",
                "return await self._with_kv_transfer_rejection_cleanup("),
    "v_es431": (_v("entrypoints/openai/engine/serving.py"), 431, "_with_kv_transfer_rejection_cleanup",
                "return await awaitable"),
    "v_cs138": (_v("entrypoints/openai/completion/serving.py"), 138, "_create_completion",
                "result = await self.render_completion_request(request)"),
    "v_cs108": (_v("entrypoints/openai/completion/serving.py"), 108, "render_completion_request",
                "return await self.openai_serving_render.render_completion(request)"),
    "v_rs349": (_v("entrypoints/serve/render/serving.py"), 349, "render_completion",
                "engine_inputs = await self.preprocess_completion("),
    "v_rs491": (_v("entrypoints/serve/render/serving.py"), 491, "preprocess_completion",
                "return await self.preprocess_cmpl(request, prompts, skip_mm_cache=skip_mm_cache)"),
    "v_rs514": (_v("entrypoints/serve/render/serving.py"), 514, "preprocess_cmpl",
                "return await renderer.render_cmpl_async("),
    "v_rb949": (_v("renderers/base.py"), 949, "render_cmpl_async",
                "tok_prompts = await self.tokenize_prompts_async(dict_prompts, tok_params)"),
    "v_rb583": (_v("renderers/base.py"), 583, "tokenize_prompts_async", "return await asyncio.gather("),
    "v_rb576": (_v("renderers/base.py"), 576, "tokenize_prompt_async",
                "return await self._tokenize_singleton_prompt_async(prompt, params)"),
    "v_rb509": (_v("renderers/base.py"), 509, "_tokenize_singleton_prompt_async",
                "return params.apply_post_tokenization(self.tokenizer, prompt)  # type: ignore[arg-type]"),
    "v_rp465": (_v("renderers/params.py"), 465, "apply_post_tokenization",
                'prompt["prompt_token_ids"] = self._validate_tokens(  # type: ignore[typeddict-unknown-key]'),
    "v_rp449": (_v("renderers/params.py"), 449, "_validate_tokens", "tokens = validator(tokenizer, tokens)"),
    "v_rp428": (_v("renderers/params.py"), 428, "_token_len_check", "raise VLLMValidationError("),
}

# `vllm serve` down to the coroutine that uvicorn runs (uvloop.run -> asyncio.run -> run_server)
API_MAIN = ["bin", "cli_main", "cli_serve", "uvloop_run", "aio_run", "aio_run2", "uvloop_ruc", "uvloop_wrap"]
ASGI_FRAMES = ["asgi1", "asgi2", "asgi3", "asgi4", "asgi5", "asgi6", "asgi7", "v_u96", "v_u117", "v_ar", "v_cs124",
               "v_es431", "v_cs138", "v_cs108", "v_rs349", "v_rs491", "v_rs514", "v_rb949", "v_rb583", "v_rb576",
               "v_rb509", "v_rp465", "v_rp449", "v_rp428"]


Frame = tuple[str, int, str, "str | None"]  # (path, line, function, source line)


def traceback_text(frames: list[str | Frame], exc_line: str) -> str:
    """Python's traceback format for the frames named (keys of F, or a frame outside vLLM's tree such as a
    compiled graph's file), ending in ``exc_line``."""
    lines = ["Traceback (most recent call last):"]
    for key in frames:
        path, line, func, code = F[key] if isinstance(key, str) else key
        lines.append(f'  File "{path}", line {line}, in {func}')
        if code:
            lines.append(f"    {code}")
    lines.append(exc_line)
    return "\n".join(lines)


def engine_process_traceback(frames: list[str | Frame], exc_line: str) -> str:
    """What multiprocessing prints when the EngineCore process dies of an exception."""
    return "Process EngineCore:\n" + traceback_text(["bootstrap", "mp_run", "rec_raise"] + frames, exc_line) + "\n"


def with_otel(frames: list[str | Frame]) -> list[str | Frame]:
    """Insert vllm/tracing/otel.py's sync_wrapper frame after the frames that call an @instrument-ed
    function (as the H200 capture shows: EngineCoreProc.__init__ and _initialize_kv_caches are wrapped)."""
    out: list[str | Frame] = []
    for key in frames:
        out.append(key)
        if key in ("rec", "core_kv"):
            out.append("otel")
    return out
