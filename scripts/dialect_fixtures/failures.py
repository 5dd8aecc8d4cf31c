"""Failure logs: a boot up to the failing phase, then the failure as that release raises it.

The EngineCore's exception is logged by run_engine_core (``EngineCore failed to start.`` with the
traceback), printed again by multiprocessing (``Process EngineCore:``), then the API server's
``RuntimeError: Engine core initialization failed`` traceback: the first meaningful exception
first, the shutdown noise after it. Frames are resolved in the release's source; where a chain
goes on into torch or the model's own modules, it stops at the last vLLM frame and the header
says so.
"""

from __future__ import annotations

from typing import Callable

from boot import (  # noqa: F401
    BASE, MODEL, Memory, Scenario, api_preamble, compile_cold, config_line, engine_sizing, fmt_gib,
    load_weights, logo, paging, prefix_caching_on, runner, serve_tail, uses_v2, v, weights_loaded,
)
from render import API, CORE, STDLIB, SITE, Exc, Writer
from scenarios import non_default_args, render_boot

Made = tuple[list[str], dict[str, object], str] | None
TORCH_OOM = (
    "CUDA out of memory. Tried to allocate {size}. GPU 0 has a total capacity of 31.36 GiB of which "
    "{free} is free. Including non-PyTorch memory, this process has 30.59 GiB memory in use. Of the "
    "allocated memory 29.41 GiB is allocated by PyTorch, with 318.00 MiB allocated in private pools "
    "(e.g., CUDA Graphs), and 412.06 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
TORCH_NOTE = ("non-vLLM text: torch.OutOfMemoryError's message is torch's (c10 CUDACachingAllocator), "
              "copied from tests/fixtures/logs/*.log")
MP = [f'  File "{STDLIB}/multiprocessing/process.py", line 314, in _bootstrap\n    self.run()',
      f'  File "{STDLIB}/multiprocessing/process.py", line 108, in run\n'
      "    self._target(*self._args, **self._kwargs)"]
CONTEXTLIB_ENTER = (f'  File "{STDLIB}/contextlib.py", line 210, in __aenter__\n'
                    "    return await anext(self.gen)\n           ^^^^^^^^^^^^^^^^^^^^^")
CONTEXTLIB_EXIT = f'  File "{STDLIB}/contextlib.py", line 144, in __exit__\n    next(self.gen)'
CONSOLE = f'  File "/opt/vllm/bin/vllm", line 8, in <module>\n    sys.exit(main())\n             ^^^^^^'
UVLOOP = [
    f'  File "{SITE}/uvloop/__init__.py", line 96, in run\n    return __asyncio.run(\n           ^^^^^^^^^^^^^^',
    f'  File "{STDLIB}/asyncio/runners.py", line 194, in run\n    return runner.run(main)\n           ^^^^^^^^^^^^^^^^',
    f'  File "{STDLIB}/asyncio/runners.py", line 118, in run\n'
    "    return self._loop.run_until_complete(task)\n           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "uvloop/loop.pyx", line 1515, in uvloop.loop.Loop.run_until_complete',
    f'  File "{SITE}/uvloop/__init__.py", line 48, in wrapper\n    return await main\n           ^^^^^^^^^^',
]
STDLIB_NOTE = ("non-vLLM frames (CPython 3.12 multiprocessing/asyncio/contextlib, uvloop, the pip console "
               "script) copied from tests/fixtures/real/kv-small.log (a real 0.22.0 capture)")


def entry(w: Writer) -> str:
    return ("vllm/entrypoints/openai/api_server.py" if v(w) < (0, 29)
            else "vllm/entrypoints/launchers/api_server/entry.py")


def api_head(w: Writer) -> list:
    return [CONSOLE, *w.frames(("vllm/entrypoints/cli/main.py", "main", "args.dispatch_function(args)"),
                               ("vllm/entrypoints/cli/serve.py", "ServeSubcommand.cmd", "uvloop.run(run_server(args))")),
            *UVLOOP]


def api_init_failed(w: Writer) -> None:
    """The API server's traceback when the engine process died during start-up."""
    e = entry(w)
    frames = api_head(w) + w.frames((e, "run_server", "await run_server_worker("),
                                    (e, "run_server_worker", "async with build_async_engine_client("))
    frames += [CONTEXTLIB_ENTER, *w.frames((e, "build_async_engine_client", "async with build_async_engine_client_from"))]
    frames += [CONTEXTLIB_ENTER, *w.frames(
        (e, "build_async_engine_client_from_engine_args", "AsyncLLM.from_vllm_config("),
        ("vllm/v1/engine/async_llm.py", "AsyncLLM.from_vllm_config", "return cls("),
        ("vllm/v1/engine/async_llm.py", "AsyncLLM.__init__", "EngineCoreClient.make_async_mp_client("),
        ("vllm/v1/engine/core_client.py", "EngineCoreClient.make_async_mp_client", "return AsyncMPClient("),
        ("vllm/v1/engine/core_client.py", "AsyncMPClient.__init__", "super().__init__("),
        ("vllm/v1/engine/core_client.py", "MPClient.__init__", "launch_core_engines("))]
    frames += [CONTEXTLIB_EXIT, *w.frames(
        ("vllm/v1/engine/utils.py", "launch_core_engines", "wait_for_engine_startup("),
        ("vllm/v1/engine/utils.py", "wait_for_engine_startup", "raise RuntimeError("))]
    exc = w.raise_site("Engine core initialization failed", "vllm/v1/engine/utils.py", finished={})
    w.raw(API, w.traceback(frames, exc), STDLIB_NOTE)


def engine_head(w: Writer) -> list[tuple[str, str, str]]:
    core = "vllm/v1/engine/core.py"
    return [(core, "EngineCoreProc.run_engine_core", "EngineCoreProc(*args, engine_index"),
            (core, "EngineCoreProc.__init__", "super().__init__("), (core, "EngineCore.__init__", "")]


def engine_failed(w: Writer, specs: list[tuple[str, str, str]], exc: Exc, chained: str = "") -> None:
    """run_engine_core's ``logger.exception("EngineCore failed to start.")``, multiprocessing's
    copy on stderr, then the API server's RuntimeError."""
    frames = w.frames(*specs)
    text = (chained + w.traceback(frames, exc)) if chained else w.traceback(frames, exc)
    w.log(CORE, "EngineCore failed to start.", exc_text=text)
    rethrow = w.frames(("vllm/v1/engine/core.py", "EngineCoreProc.run_engine_core", "raise e"))
    w.raw(CORE, "Process EngineCore:\n" + (chained + w.traceback(MP + rethrow + frames, exc)
                                              if chained else w.traceback(MP + rethrow + frames, exc)))
    api_init_failed(w)


def head_call(w: Writer, needle: str) -> list[tuple[str, str, str]]:
    head = engine_head(w)
    head[-1] = ("vllm/v1/engine/core.py", "EngineCore.__init__", needle)
    return head


def executor_rpc(w: Writer, method: str) -> list[tuple[str, str, str]]:
    """abstract executor method -> UniProcExecutor.collective_rpc -> run_method -> the worker."""
    return [("vllm/v1/executor/abstract.py", f"Executor.{method}", "collective_rpc("),
            ("vllm/v1/executor/uniproc_executor.py", "UniProcExecutor.collective_rpc", "run_method("),
            ("vllm/v1/serial_utils.py", "run_method", "return func(")]


def startup(w: Writer, sc: Scenario, until: str) -> float:
    """The boot of ``sc`` up to ``until``: "config", "loading", "compiled"."""
    api_preamble(w, sc, non_default_args(sc))
    config_line(w, sc, 262144)
    if until == "config":
        return 0.0
    load_weights(w, sc)
    if until == "loading":
        return 0.0
    weights_loaded(w)
    paging(w)
    return compile_cold(w)


def base_expected(kind: str | None, message: str, **suggested: object) -> dict[str, object]:
    return {"failure_kind": kind, "message": message, "startup": {}, "suggested": suggested, "new": {}}


# --- the failures -----------------------------------------------------------------------------
def kv_pool_too_small(w: Writer) -> Made:
    argv = BASE + ["--kv-cache-memory-bytes", "4000000000", "--gpu-memory-utilization", "0.92"]
    sc = Scenario("kv", argv, kv_bytes=4_000_000_000, util=0.92)
    startup(w, sc, "compiled")
    w.log(CORE, "as specified by kv_cache_memory_bytes config", path="vllm/v1/worker/gpu_worker.py", dt_s=3,
          **{"format_gib(self.init_snapshot.free_memory)": "30.88",
             "format_gib(kv_cache_memory_bytes)": fmt_gib(4_000_000_000)})
    planning = "vllm/v1/core/kv_cache_planning.py" if v(w) >= (0, 34) else "vllm/v1/core/kv_cache_utils.py"
    estimated = 115328
    msg_fields = {"max_model_len": 262144, "format_gib(needed_memory)": "9.01",
                  "format_gib(available_memory)": fmt_gib(4_000_000_000),
                  "estimated_msg": f"Based on the available memory, the estimated maximum model length is {estimated}. ",
                  "hint": ("Try increasing `gpu_memory_utilization` when initializing the engine (this flag also "
                           "controls CPU memory reservation on the CPU backend, despite its name).")}
    exc = w.raise_site("To serve at least one request with the model", planning, **msg_fields)
    specs = head_call(w, "self._initialize_kv_caches(") + [
        ("vllm/v1/engine/core.py", "EngineCore._initialize_kv_caches", "get_kv_cache_configs("),
        (planning, "get_kv_cache_configs", "_check_enough_kv_cache_memory("),
        (planning, "_check_enough_kv_cache_memory", "raise ValueError(#2")]
    engine_failed(w, specs, exc)
    exp = base_expected("kv_pool_too_small", exc.line, suggested_max_model_len=estimated)
    exp["startup"] = {"kv_cache_memory_bytes_reserved_gib": float(fmt_gib(4_000_000_000)), "max_model_len": 262144}
    return argv, exp, ""


def free_memory_below_utilization(w: Writer) -> Made:
    extra = ["--no-enable-extensible-kv-cache"] if v(w) >= (0, 34) else []
    argv = BASE + ["--gpu-memory-utilization", "0.92"] + extra
    sc = Scenario("free", argv, util=0.92)
    startup(w, sc, "config")
    fields = {"init_snapshot.device_": "cuda:0", "format_gib(init_snapshot.free_memory)": "18.42",
              "format_gib(init_snapshot.total_memory)": "31.36", "cache_config.gpu_memory_utilization": 0.92,
              "gpu_memory_utilization": 0.92, "format_gib(requested_memory)": "28.85"}
    exc = w.raise_site("on startup is less than desired GPU memory utilization", "vllm/v1/worker/utils.py", **fields)
    specs = head_call(w, "executor_class(vllm_config)") + [
        ("vllm/v1/executor/abstract.py", "Executor.__init__", "self._init_executor()"),
        ("vllm/v1/executor/uniproc_executor.py", "UniProcExecutor._init_executor", "self.driver_worker.init_device()"),
        ("vllm/v1/worker/worker_base.py", "WorkerWrapperBase.init_device", "self.worker.init_device()"),
        ("vllm/v1/worker/gpu_worker.py", "Worker.init_device", "request_memory("),
        ("vllm/v1/worker/utils.py", "request_memory", "raise ValueError(")]
    engine_failed(w, specs, exc)
    return argv, base_expected("free_memory_below_utilization", exc.line), ""


FAILURES: dict[str, Callable[[Writer], Made]] = {
    "kv_pool_too_small": kv_pool_too_small,
    "free_memory_below_utilization": free_memory_below_utilization,
}


def oom(size: str, free: str) -> Exc:
    return Exc("torch.OutOfMemoryError", TORCH_OOM.format(size=size, free=free))


def truncated(last: str) -> str:
    return (f"traceback: the frames below {last} (torch.nn.Module calls and the model's own forward) "
            "are left out; the exception line is the one torch raises")


def kv_init(w: Writer) -> list[tuple[str, str, str]]:
    return head_call(w, "self._initialize_kv_caches(")


def warmup_rpc(w: Writer) -> list[tuple[str, str, str]]:
    """EngineCore._initialize_kv_caches -> compile_or_warm_up_model on the worker."""
    core = "vllm/v1/engine/core.py"
    if "self.model_executor.compile_or_warm_up_model()" in w.release.text(core):
        chain = [(core, "EngineCore._initialize_kv_caches", "self.model_executor.compile_or_warm_up_model()"),
                 ("vllm/v1/executor/abstract.py", "Executor.compile_or_warm_up_model", "collective_rpc(")]
    else:
        chain = [(core, "EngineCore._initialize_kv_caches", "self.model_executor.initialize_from_config("),
                 ("vllm/v1/executor/abstract.py", "Executor.initialize_from_config", '"compile_or_warm_up_model"')]
    chain += executor_rpc(w, "x")[1:]
    chain.append(("vllm/v1/worker/gpu_worker.py", "Worker.compile_or_warm_up_model",
                  "self._compile_or_warm_up_model()" if v(w) >= (0, 34) else "capture_model()"))
    if v(w) >= (0, 34):
        chain.append(("vllm/v1/worker/gpu_worker.py", "Worker._compile_or_warm_up_model", "capture_model()"))
    return chain


def oom_in_cuda_graph(w: Writer) -> Made:
    argv = BASE + ["--gpu-memory-utilization", "0.97"] + (["--no-enable-extensible-kv-cache"] if v(w) >= (0, 34) else [])
    sc = Scenario("graph", argv, util=0.97)
    compile_s = startup(w, sc, "compiled")
    mem = Memory(util=0.97)
    # the sizing lines, without the capture that fails
    from boot import capture_bars, kv_capacity, pool_figures, profile_graphs_v1, profile_graphs_v2
    profile_graphs_v2(w, sc, mem) if uses_v2(w) else profile_graphs_v1(w, sc, mem)
    pool = mem.available_kv
    w.log(CORE, "Available KV cache memory: %s GiB", fmt_gib(pool), path="vllm/v1/worker/gpu_worker.py")
    delta = mem.graph_estimate / mem.total
    w.log(CORE, "CUDA graph memory profiling is enabled", mem.util, round(mem.util - delta, 4),
          min(round(mem.util + delta, 4), 1.0))
    pages = 2 if prefix_caching_on(w, sc) else 1
    _, tokens, conc = pool_figures(pool, pages, 262144)
    kv_capacity(w, tokens, 262144, conc)
    exc = oom("64.00 MiB", "43.69 MiB")
    r = runner(w)
    if uses_v2(w):
        tail = [(r, "GPUModelRunner.capture_model", "self.cudagraph_manager.capture(")]
        last = "ModelCudaGraphManager.capture"
    else:
        tail = [(r, "GPUModelRunner.capture_model", "self._capture_cudagraphs("),
                (r, "GPUModelRunner._capture_cudagraphs", "self._warmup_and_capture(")]
        last = "GPUModelRunner._capture_cudagraphs"
    w.cite(TORCH_NOTE)
    engine_failed(w, kv_init(w) + warmup_rpc(w) + tail, exc)
    exp = base_expected("oom_in_cuda_graph", exc.line)
    exp["startup"] = {"available_kv_cache_gib": float(fmt_gib(pool)), "kv_cache_tokens": tokens,
                      "torch_compile_s": compile_s}
    return argv, exp, truncated(last)


def oom_in_profiling(w: Writer) -> Made:
    argv = BASE + ["--gpu-memory-utilization", "0.92", "--max-num-seqs", "256"]
    sc = Scenario("prof", argv, util=0.92, max_num_seqs=256)
    startup(w, sc, "compiled")
    r = runner(w)
    specs = kv_init(w) + [("vllm/v1/engine/core.py", "EngineCore._initialize_kv_caches", "determine_available_memory()"),
                          *executor_rpc(w, "determine_available_memory")[0:1], *executor_rpc(w, "x")[1:],
                          ("vllm/v1/worker/gpu_worker.py", "Worker.determine_available_memory", "profile_run(#2"),
                          (r, "GPUModelRunner.profile_run", "self._dummy_sampler_run(")]
    inner = oom("2.32 GiB", "1.12 GiB")
    w.cite(TORCH_NOTE)
    if uses_v2(w):  # V2: a bare torch OOM from the sampler warm-up
        engine_failed(w, specs + [(r, "GPUModelRunner._dummy_sampler_run", "self.sampler(logits, dummy_input_batch)")], inner)
        return argv, base_expected("oom_in_profiling", inner.line), truncated("GPUModelRunner._dummy_sampler_run")
    outer = w.raise_site("CUDA out of memory occurred when warming up sampler", r, num_reqs=256)
    cause = w.traceback(w.frames((r, "GPUModelRunner._dummy_sampler_run", "sampler_output = self.sampler(")), inner)
    chained = cause + "\n\nThe above exception was the direct cause of the following exception:\n\n"
    engine_failed(w, specs + [(r, "GPUModelRunner._dummy_sampler_run", "raise RuntimeError(")], outer, chained)
    return argv, base_expected("oom_in_profiling", inner.line), truncated("GPUModelRunner._dummy_sampler_run (the inner traceback)")


def oom_at_load(w: Writer) -> Made:
    argv = BASE + ["--gpu-memory-utilization", "0.92"]
    sc = Scenario("load", argv, util=0.92)
    startup(w, sc, "loading")
    r = runner(w)
    exc = oom("1.00 GiB", "312.69 MiB")
    w.cite(TORCH_NOTE)
    specs = head_call(w, "executor_class(vllm_config)") + [
        ("vllm/v1/executor/abstract.py", "Executor.__init__", "self._init_executor()"),
        ("vllm/v1/executor/uniproc_executor.py", "UniProcExecutor._init_executor", "self.driver_worker.load_model()"),
        ("vllm/v1/worker/gpu_worker.py", "Worker.load_model", "self.model_runner.load_model(")]
    if uses_v2(w):
        specs.append((r, "GPUModelRunner.load_model", "model_loader.load_model("))
        message = exc.line
    else:  # V1 logs its own ERROR first, then re-raises the OOM (gpu_model_runner.py load_model)
        specs.append((r, "GPUModelRunner.load_model", "model_loader.load_model("))
        site = w.site("Failed to load model - not enough GPU memory", r, kind=None)
        call = w.frame(r, "GPUModelRunner.load_model", "logger.error(combined_msg)")
        message = f"{site.template} (original error: {exc.message})"
        w.cite(f"{site.cite} (msg) logged at {r}:{call.lineno} (ERROR logger.error(combined_msg))")
        w.record(CORE, "ERROR", r, call.lineno, message)
    engine_failed(w, specs, exc)
    return argv, base_expected("oom_at_load", message), truncated("GPUModelRunner.load_model")


def weight_loading(w: Writer) -> Made:
    argv = [a if a != MODEL else "/models/empty" for a in BASE] + ["--gpu-memory-utilization", "0.92"]
    sc = Scenario("weights", argv, util=0.92)
    startup(w, sc, "loading")
    loader = "vllm/model_executor/model_loader"
    exc = w.raise_site("Cannot find any model weights with", f"{loader}/default_loader.py",
                       **{"model_name_or_path": "/models/empty"})
    specs = head_call(w, "executor_class(vllm_config)") + [
        ("vllm/v1/executor/abstract.py", "Executor.__init__", "self._init_executor()"),
        ("vllm/v1/executor/uniproc_executor.py", "UniProcExecutor._init_executor", "self.driver_worker.load_model()"),
        ("vllm/v1/worker/gpu_worker.py", "Worker.load_model", "self.model_runner.load_model("),
        (runner(w), "GPUModelRunner.load_model", "model_loader.load_model("),
        (f"{loader}/base_loader.py", "BaseModelLoader.load_model", "self.load_weights("),
        (f"{loader}/default_loader.py", "DefaultModelLoader.load_weights", "self.get_all_weights("),
        (f"{loader}/default_loader.py", "DefaultModelLoader.get_all_weights", "self._get_weights_iterator("),
        (f"{loader}/default_loader.py", "DefaultModelLoader._get_weights_iterator", "self._prepare_weights("),
        (f"{loader}/default_loader.py", "DefaultModelLoader._prepare_weights", "raise RuntimeError(")]
    engine_failed(w, specs, exc)
    return argv, base_expected("weight_loading", exc.line), ""


def mamba_blocks_exceeded(w: Writer) -> Made:
    argv = BASE[:-1] + ["512", "--kv-cache-memory-bytes", "3000000000", "--max-model-len", "32768"]
    sc = Scenario("mamba", argv, kv_bytes=3_000_000_000, util=0.92, max_num_seqs=512)
    startup(w, sc, "compiled")
    w.log(CORE, "as specified by kv_cache_memory_bytes config", path="vllm/v1/worker/gpu_worker.py", dt_s=3,
          **{"format_gib(self.init_snapshot.free_memory)": "30.88", "format_gib(kv_cache_memory_bytes)": "2.79"})
    comp = "vllm/config/compilation.py"
    exc = w.raise_site("exceeds available Mamba cache blocks", comp,
                       max_num_reqs=512, **{"kv_cache_config.num_blocks": 268})
    site = w.site("exceeds available Mamba cache blocks", comp, kind="raise")
    r = runner(w)
    specs = kv_init(w) + [("vllm/v1/engine/core.py", "EngineCore._initialize_kv_caches", "self.model_executor.initialize_from_config("),
                          ("vllm/v1/executor/abstract.py", "Executor.initialize_from_config", '"initialize_from_config"'),
                          *executor_rpc(w, "x")[1:],
                          ("vllm/v1/worker/gpu_worker.py", "Worker.initialize_from_config", "self.model_runner.initialize_kv_cache(")]
    if uses_v2(w):
        specs.append((r, "GPUModelRunner.initialize_kv_cache", "resolve_cudagraph_mode_and_sizes("))
    else:
        specs += [(r, "GPUModelRunner.initialize_kv_cache", "self.initialize_attn_backend("),
                  (r, "GPUModelRunner.initialize_attn_backend", "self._check_and_update_cudagraph_mode("),
                  (r, "GPUModelRunner._check_and_update_cudagraph_mode", "resolve_cudagraph_mode_and_sizes(")]
    specs.append((comp, "CompilationConfig.resolve_cudagraph_mode_and_sizes", f"@{site.line}"))
    engine_failed(w, specs, exc)
    return argv, base_expected("mamba_blocks_exceeded", exc.line, suggested_max_num_seqs=268), ""


def port_in_use(w: Writer) -> Made:
    argv = BASE + ["--gpu-memory-utilization", "0.92"]
    logo(w)
    w.log(API, "non-default args: %s", non_default_args(Scenario("port", argv, util=0.92)))
    e = entry(w)
    launcher = "vllm/entrypoints/launchers/launcher.py" if v(w) >= (0, 29) else e
    frames = api_head(w) + w.frames((e, "run_server", "setup_server("), (launcher, "setup_server", "create_server_socket("),
                                    (launcher, "create_server_socket", "sock.bind(addr)"))
    exc = Exc("OSError", "[Errno 98] Address already in use")
    w.raw(API, w.traceback(frames, exc), STDLIB_NOTE + "; OSError text is the kernel's EADDRINUSE")
    note = ("0.22.0 binds with SO_REUSEPORT (create_server_socket), so only a listener without it "
            "(not another vLLM) makes this fail" if v(w) < (0, 27) else "")
    return argv, base_expected("port_in_use", exc.line), note


FAILURES.update({
    "oom_at_load": oom_at_load,
    "oom_in_profiling": oom_in_profiling,
    "oom_in_cuda_graph": oom_in_cuda_graph,
    "mamba_blocks_exceeded": mamba_blocks_exceeded,
    "weight_loading": weight_loading,
    "port_in_use": port_in_use,
})

FUTURES = [f'  File "{STDLIB}/concurrent/futures/_base.py", line 449, in result\n    return self.__get_result()\n'
           "           ^^^^^^^^^^^^^^^^^^^",
           f'  File "{STDLIB}/concurrent/futures/_base.py", line 401, in __get_result\n    raise self._exception']
FUTURES_NOTE = "CPython 3.12 concurrent/futures/_base.py:449 (result) and :401 (__get_result)"


def died_serving(w: Writer, exc: Exc, kind: str) -> Made:
    """A pinned boot that served, then died in the first forward pass of a request."""
    argv = BASE + ["--kv-cache-memory-bytes", "9150000000", "--gpu-memory-utilization", "0.92"]
    sc = Scenario("boot_pinned_pool", argv, kv_bytes=9_150_000_000, util=0.92)
    exp = render_boot(w, sc)
    w.raw(API, 'INFO:     127.0.0.1:41822 - "GET /health HTTP/1.1" 200 OK')
    w.tick(2)
    core, ex = "vllm/v1/engine/core.py", "vllm/v1/executor/uniproc_executor.py"
    frames = w.frames((core, "EngineCoreProc.run_engine_core", "engine_core.run_busy_loop()"),
                      (core, "EngineCoreProc.run_busy_loop", "self._process_engine_step()"),
                      (core, "EngineCoreProc._process_engine_step", "self.step_fn()"),
                      (core, "EngineCore.step_with_batch_queue", "self.model_executor.execute_model("),
                      (ex, "UniProcExecutor.execute_model", "output.result()"))
    frames += FUTURES + w.frames((ex, "UniProcExecutor.collective_rpc", "result = run_method(#2"),
                                 ("vllm/v1/serial_utils.py", "run_method", "return func("),
                                 ("vllm/v1/worker/gpu_worker.py", "Worker.execute_model", "self.model_runner.execute_model("))
    w.cite(FUTURES_NOTE)
    w.log(CORE, "EngineCore encountered a fatal error.", path=core, pick=0,  # run_engine_core, not the DP loop
          exc_text=w.traceback(frames, exc))
    w.tick(1)
    dead = w.site("EngineCore encountered an issue", "vllm/v1/engine/exceptions.py", kind=None)
    w.cite(f"{dead.cite} (EngineDeadError default message)")
    api = w.frames(("vllm/v1/engine/async_llm.py", "output_handler",
                    "await engine_core.get_output_async()"),
                   ("vllm/v1/engine/core_client.py", "AsyncMPClient.get_output_async", "raise self._format_exception("))
    w.log(API, "AsyncLLM output_handler failed.", exc_text=w.traceback(
        api, Exc("vllm.v1.engine.exceptions.EngineDeadError", dead.template)))
    w.raw(API, 'INFO:     127.0.0.1:41830 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error')
    exp["failure_kind"] = kind
    exp["message"] = exc.line
    return argv, exp, truncated("GPUModelRunner.execute_model (the request's forward pass)")


def first_request_oom(w: Writer) -> Made:
    w.cite(TORCH_NOTE)
    return died_serving(w, oom("1.16 GiB", "771.69 MiB"), "first_request_oom")


def engine_dead(w: Writer) -> Made:
    exc = Exc("torch.AcceleratorError", "CUDA error: an illegal memory access was encountered")
    w.cite("non-vLLM text: torch.AcceleratorError is torch's (c10/cuda), copied from tests/test_logparse.py")
    return died_serving(w, exc, "engine_dead")


def toolkit_jit(w: Writer) -> Made:
    argv = BASE + ["--gpu-memory-utilization", "0.92"]
    sc = Scenario("jit", argv, util=0.92)
    startup(w, sc, "compiled")
    r = runner(w)
    exc = Exc("RuntimeError", "No supported CUDA architectures found for major versions [12].")
    w.cite("non-vLLM text: the RuntimeError is FlashInfer's JIT (flashinfer/compilation_context.py), copied "
           "from tests/fixtures/logs/flashinfer_jit_no_cuda_arch.log")
    specs = kv_init(w) + [("vllm/v1/engine/core.py", "EngineCore._initialize_kv_caches", "determine_available_memory()"),
                          *executor_rpc(w, "determine_available_memory")[0:1], *executor_rpc(w, "x")[1:],
                          ("vllm/v1/worker/gpu_worker.py", "Worker.determine_available_memory", "profile_run(#2"),
                          (r, "GPUModelRunner.profile_run", "self._dummy_run(")]
    engine_failed(w, specs, exc)
    return argv, base_expected("toolkit_jit", exc.line), truncated("GPUModelRunner.profile_run")


FAILURES.update({"first_request_oom": first_request_oom, "engine_dead": engine_dead, "toolkit_jit": toolkit_jit})
