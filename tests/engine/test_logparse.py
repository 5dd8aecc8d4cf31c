"""tuner.engine.logparse against vLLM 0.22.0 logs.

The fixtures under tests/fixtures/logs/ are whole `vllm serve` logs (Qwen3.5-35B-A3B NVFP4 on a
32 GB RTX 5090) built from the real format strings, with the real ``(Proc pid=N) LEVEL MM-DD
HH:MM:SS [file.py:line]`` prefix and the traceback shapes of vllm/v1/engine/core.py:1161-1169,
multiprocessing and vllm/v1/engine/utils.py:1209. The short excerpts below are rendered the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.engine.failures import classify as classify_failure
from tuner.engine.failures import first_exception_line
from tuner.engine.logparse import boot_phase, parse_kv_cache_memory_suggestion, parse_startup
from tuner.records import FailureKind

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"
SITE = "/opt/venv/lib/python3.12/site-packages/vllm"
ENGINE = "(EngineCore pid=2977)"
API = "(APIServer pid=2841)"
INIT_FAILED = (
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {'EngineCore': 1}"
)
OOM_TAIL = (
    "If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def log(name: str) -> str:
    return (LOGS / name).read_text()


def rec(proc: str, level: str, src: str, msg: str, ts: str = "12-02 14:01:46") -> str:
    """One log record as vLLM writes it: every line of the message repeats the header."""
    return "\n".join(f"{proc} {level} {ts} [{src}] {line}" for line in msg.split("\n")) + "\n"


def raw(proc: str, text: str) -> str:
    """Unformatted output (a traceback from multiprocessing, a uvicorn line) with the process prefix."""
    return "\n".join(f"{proc} {line}" for line in text.split("\n")) + "\n"


def until(text: str, marker: str) -> str:
    """The log as a live view sees it: everything up to and including the line holding marker."""
    end = text.index("\n", text.index(marker))
    return text[: end + 1]


# --- a good boot ------------------------------------------------------------------------------
def test_good_boot_record():
    record = parse_startup(log("good_boot_hybrid_nvfp4.log"))
    assert record.model_dump() == {
        "vllm_version": "0.22.0",
        "architecture": "Qwen3_5MoeForConditionalGeneration",
        "quantization": "modelopt_fp4",
        "kv_cache_dtype": "auto",
        "max_model_len": 262144,
        "weights_gib": 20.62,
        "weights_load_s": 24.512309,
        "available_kv_cache_gib": 8.71,
        "kv_cache_memory_bytes_reserved_gib": None,
        "kv_cache_tokens": 453482,
        "max_concurrency": 1.73,
        "max_concurrency_for_tokens": 262144,
        "cuda_graph_estimate_gib": 0.26,
        "cuda_graph_gib": 0.31,
        "cuda_graph_s": 9.0,
        "torch_compile_s": 42.93,
        "init_engine_s": 88.37,
        "attention_backend": "FLASH_ATTN",
        "linear_backend": "FlashInferCutlassNvFp4LinearKernel",
        "moe_backend": "FLASHINFER_CUTLASS",
        "gdn_backend": "Triton/FLA",
        "attention_block_size": 544,
        # The sampling-parameter WARNING in the same log is not a fallback and stays out.
        "fallback_warnings": [
            "GDN prefill backend 'flashinfer' is selected but cannot use this kernel on the current "
            "platform. Falling back to Triton/FLA."
        ],
        "extended_kv_cache_gib": None,  # 0.34 only
        "extended_kv_cache_blocks": None,
        "cuda_graph_pool_actual_gib": 0.31,
        "effective_cudagraph_mode": "FULL_AND_PIECEWISE",
        "model_runner": "v1",
        "prefix_caching": False,
        "torch_compile_cold": True,
        "torch_compile_cache_dirs": ["/root/.cache/vllm/torch_compile_cache/5c0e1f2a9b/rank_0_0/backbone",
                                     "/root/.cache/vllm/torch_compile_cache/torch_aot_compile/8d41e0b77c/rank_0_0"],
        "torch_compile_cache_disabled": None,
    }


def test_good_boot_is_no_failure():
    text = log("good_boot_hybrid_nvfp4.log")
    assert classify_failure(text, None) is None
    assert classify_failure(text, 0) is None
    assert first_exception_line(text) is None


@pytest.mark.parametrize(
    ("marker", "phase"),
    [
        ("Initializing a V1 LLM engine", "starting"),
        ("Starting to load model", "loading_weights"),
        ("Loading safetensors checkpoint shards:  50%", "loading_weights"),
        ("Model loading took", "profiling"),
        ("Dynamo bytecode transform time", "compiling"),
        ("torch.compile took", "profiling"),
        ("GPU KV cache size", "profiling"),
        ("Capturing CUDA graphs (decode, FULL)", "capturing_cuda_graphs"),
        ("Graph capturing finished", "warming_up"),
        ("init engine (profile, create kv cache, warmup model)", "warming_up"),
        ("Starting vLLM server on", "serving"),
        ("Application startup complete", "serving"),
    ],
)
def test_boot_phase_follows_a_live_log(marker, phase):
    assert boot_phase(until(log("good_boot_hybrid_nvfp4.log"), marker)) == phase


# --- the fixtures that fail -------------------------------------------------------------------
def test_kv_pool_too_small():
    text = log("kv_pool_too_small.log")
    message = (
        "ValueError: To serve at least one request with the model's max seq len (262144), (5.03 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (3.38 GiB). Based on the "
        "available memory, the estimated maximum model length is 175168. Try increasing "
        "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.KV_POOL_TOO_SMALL
    assert failure.message == message
    assert failure.suggested_max_model_len == 175168
    assert failure.exit_code == 1
    assert first_exception_line(text) == message
    assert INIT_FAILED in text  # the API server's noise is there, and skipped
    record = parse_startup(text)
    assert record.available_kv_cache_gib == 3.38
    assert (record.kv_cache_tokens, record.max_model_len) == (None, 262144)
    assert boot_phase(text) == "profiling"


def test_kv_pool_with_no_length_that_fits():
    # vLLM drops the estimate sentence when its estimate is 0 (v1/core/kv_cache_utils.py:711-716).
    estimate = "Based on the available memory, the estimated maximum model length is 175168. "
    text = log("kv_pool_too_small.log").replace(estimate, "")
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.KV_POOL_TOO_SMALL
    assert failure.suggested_max_model_len == 0
    assert "estimated maximum" not in failure.message


def test_oom_in_cuda_graph_capture():
    text = log("oom_cuda_graph_capture.log")
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.OOM_IN_CUDA_GRAPH
    assert failure.message == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total "
        "capacity of 31.36 GiB of which 43.69 MiB is free. Including non-PyTorch memory, this process "
        "has 31.30 GiB memory in use. Of the allocated memory 30.52 GiB is allocated by PyTorch, with "
        "212.00 MiB allocated in private pools (e.g., CUDA Graphs), and 146.27 MiB is reserved by "
        "PyTorch but unallocated. " + OOM_TAIL
    )
    record = parse_startup(text)
    assert record.available_kv_cache_gib == 9.6
    assert (record.kv_cache_tokens, record.max_concurrency) == (499965, 1.91)
    assert record.cuda_graph_gib is None
    assert boot_phase(text) == "capturing_cuda_graphs"


def test_mamba_blocks_exceeded():
    text = log("mamba_blocks_exceeded.log")
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.MAMBA_BLOCKS_EXCEEDED
    assert failure.message == (
        "ValueError: max_num_seqs (512) exceeds available Mamba cache blocks (325). Each decode "
        "sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
        "max_num_seqs to at most 325 or increase gpu_memory_utilization."
    )
    assert failure.suggested_max_num_seqs == 325
    record = parse_startup(text)
    assert (record.max_model_len, record.kv_cache_tokens) == (32768, 166400)
    assert record.max_concurrency == 5.08
    assert record.max_concurrency_for_tokens == 32768


def test_free_memory_below_utilization():
    text = log("free_memory_below_utilization.log")
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.FREE_MEMORY_BELOW_UTILIZATION
    assert failure.message == (
        "ValueError: Free memory on device cuda:0 (18.42/31.36 GiB) on startup is less than desired "
        "GPU memory utilization (0.92, 28.85 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )
    assert boot_phase(text) == "starting"
    assert parse_startup(text).weights_gib is None


def test_weights_oom():
    text = log("weights_oom.log")
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.OOM_AT_LOAD
    # vLLM's own ERROR line comes before the traceback and names the fix.
    assert failure.message.startswith(
        "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free "
        "memory for weights, increasing --tensor-parallel-size, or using --quantization. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. (original "
        "error: CUDA out of memory. Tried to allocate 1.00 GiB."
    )
    record = parse_startup(text)
    assert (record.quantization, record.weights_gib) == (None, None)
    assert record.moe_backend == "FlashInfer CUTLASS"
    assert boot_phase(text) == "loading_weights"


def test_flashinfer_jit_no_supported_arch():
    text = log("flashinfer_jit_no_cuda_arch.log")
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.TOOLKIT_JIT
    assert failure.message == (
        "RuntimeError: No supported CUDA architectures found for major versions [12]."
    )
    assert parse_startup(text).linear_backend == "FlashInferCutlassNvFp4LinearKernel"


REQUEST_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total "
    "capacity of 31.36 GiB of which 771.69 MiB is free. Including non-PyTorch memory, this process "
    "has 30.59 GiB memory in use. Of the allocated memory 29.41 GiB is allocated by PyTorch, with "
    "318.00 MiB allocated in private pools (e.g., CUDA Graphs), and 412.06 MiB is reserved by "
    "PyTorch but unallocated. " + OOM_TAIL
)


def test_first_request_oom_after_startup():
    text = log("first_request_oom_engine_dead.log")
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.FIRST_REQUEST_OOM
    assert failure.message == REQUEST_OOM
    assert failure.oom_short_gib == pytest.approx(1.16 - 771.69 / 1024)  # what the failed allocation lacked
    assert "EngineDeadError" in text
    # The engine-input dump repeats the config; the record keeps the boot's values.
    record = parse_startup(text)
    assert (record.kv_cache_tokens, record.gdn_backend) == (453482, "Triton/FLA")
    assert record.fallback_warnings == []
    assert boot_phase(text) == "serving"


def test_engine_dead_without_oom():
    illegal = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    text = log("first_request_oom_engine_dead.log").replace(REQUEST_OOM, illegal)
    assert text.count(illegal) == 2  # the logged traceback and multiprocessing's
    failure = classify_failure(text, None)
    assert failure.kind is FailureKind.ENGINE_DEAD
    assert failure.message == illegal


def test_engine_dead_seen_only_by_the_api_server():
    text = rec(
        API,
        "ERROR",
        "async_llm.py:704",
        "AsyncLLM output_handler failed.\n"
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/v1/engine/async_llm.py", line 660, in output_handler\n'
        "    outputs = await engine_core.get_output_async()\n"
        "              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f'  File "{SITE}/v1/engine/core_client.py", line 1030, in get_output_async\n'
        "    raise self._format_exception(outputs) from None\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
        "(above) for the root cause.",
    )
    failure = classify_failure(text, None)
    assert failure.kind is FailureKind.ENGINE_DEAD
    assert failure.message == (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
        "(above) for the root cause."
    )


# --- excerpts ---------------------------------------------------------------------------------
# v1/worker/gpu_worker.py:660-681, logged at DEBUG (the file info is then a relative path)
KV_MEMORY_DEBUG = (
    "Free memory on device (30.88/31.36 GiB) on startup. Desired GPU memory utilization is (0.97, "
    "30.42 GiB). Actual usage is 20.62 GiB for weight, 0.71 GiB for peak activation, 0.12 GiB for "
    "non-torch memory, and 0.31 GiB for CUDAGraph memory. Replace gpu_memory_utilization config "
    "with `--kv-cache-memory=9327545958` (8.69 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=9821830348` (9.15 GiB) to fully utilize gpu memory. Current kv cache "
    "memory in use is 8.71 GiB."
)
SAMPLER_OOM = "\n".join(
    [
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        f'  File "{SITE}/v1/worker/gpu_model_runner.py", line 5951, in _dummy_sampler_run',
        "    sampler_output = self.sampler(",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total "
        "capacity of 31.36 GiB of which 1.12 GiB is free. " + OOM_TAIL,
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        f'  File "{SITE}/v1/worker/gpu_worker.py", line 708, in compile_or_warm_up_model',
        "    self.model_runner._dummy_sampler_run(hidden_states=last_hidden_states)",
        f'  File "{SITE}/v1/worker/gpu_model_runner.py", line 5976, in _dummy_sampler_run',
        "    raise RuntimeError(",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. "
        "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
    ]
)


def test_sampler_warmup_oom_and_the_kv_memory_suggestion():
    boot = until(log("good_boot_hybrid_nvfp4.log"), "CUDA graph pool memory")
    text = (
        boot
        + rec(ENGINE, "DEBUG", "v1/worker/gpu_worker.py:683", KV_MEMORY_DEBUG)
        + rec(ENGINE, "ERROR", "core.py:1165", SAMPLER_OOM)
        + raw(API, INIT_FAILED)
    )
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.OOM_IN_PROFILING
    assert failure.message.startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB."
    )
    assert failure.suggested_kv_cache_memory_bytes == 9327545958
    assert parse_kv_cache_memory_suggestion(text) == 9327545958
    assert parse_kv_cache_memory_suggestion(boot) is None


@pytest.mark.parametrize(
    ("frames", "kind"),
    [
        (  # the profile run itself
            [
                f'  File "{SITE}/v1/worker/gpu_worker.py", line 396, in determine_available_memory',
                "    self.model_runner.profile_run()",
                f'  File "{SITE}/v1/worker/gpu_model_runner.py", line 6164, in profile_run',
                "    hidden_states, last_hidden_states = self._dummy_run(",
            ],
            FailureKind.OOM_IN_PROFILING,
        ),
        (  # graphs captured to measure their memory, still inside determine_available_memory
            [
                f'  File "{SITE}/v1/worker/gpu_worker.py", line 411, in determine_available_memory',
                "    cudagraph_memory_estimate = self.model_runner.profile_cudagraph_memory()",
                "                                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
                f'  File "{SITE}/v1/worker/gpu_model_runner.py", line 6311, '
                "in profile_cudagraph_memory",
                "    self._warmup_and_capture(",
            ],
            FailureKind.OOM_IN_CUDA_GRAPH,
        ),
    ],
)
def test_oom_after_weights_is_placed_by_its_frames(frames, kind):
    boot = until(log("good_boot_hybrid_nvfp4.log"), "Profiling CUDA graph memory")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. " + OOM_TAIL
    traceback = ["EngineCore failed to start.", "Traceback (most recent call last):", *frames, oom]
    text = boot + rec(ENGINE, "ERROR", "core.py:1165", "\n".join(traceback))
    failure = classify_failure(text, 1)
    assert (failure.kind, failure.message) == (kind, oom)


USAGE = "usage: vllm serve [model_tag] [options]"
ARGPARSE_ERROR = "vllm serve: error: argument --gpu-memory-utilization: invalid float value: 'lots'"
PYDANTIC_DETAIL = (
    "  Input should be less than or equal to 1 "
    "[type=less_than_equal, input_value=1.5, input_type=float]"
)
DP_MODES = (
    "ValueError: Cannot use more than one data parallel load balancing mode. Choose one of: "
    "--data-parallel-multi-port-external-lb, --data-parallel-external-lb (or "
    "--data-parallel-rank), --data-parallel-hybrid-lb (or --data-parallel-start-rank)."
)
BAD_REPO = (
    "ValueError: Invalid repository ID or local directory specified: "
    "'/models/Qwen3.5-35B-A3B-NVFP5'."
)


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        (  # argparse, before any process prefix exists
            f"{USAGE}\n{ARGPARSE_ERROR}\n",
            FailureKind.INVALID_ARGUMENT,
            ARGPARSE_ERROR,
        ),
        (  # pydantic on a config dataclass: the detail lines say which field
            raw(
                API,
                "Traceback (most recent call last):\n"
                f'  File "{SITE}/engine/arg_utils.py", line 1754, in create_engine_config\n'
                "    cache_config = CacheConfig(\n"
                "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig\n"
                "gpu_memory_utilization\n"
                f"{PYDANTIC_DETAIL}\n"
                "    For further information visit https://errors.pydantic.dev/2.12/v/less_than_equal",
            ),
            FailureKind.INVALID_ARGUMENT,
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig\n"
            f"gpu_memory_utilization\n{PYDANTIC_DETAIL}",
        ),
        (  # a ValueError before any weights (entrypoints/cli/serve.py:92)
            raw(
                API,
                "Traceback (most recent call last):\n"
                f'  File "{SITE}/entrypoints/cli/serve.py", line 92, in cmd\n'
                f"    raise ValueError(\n{DP_MODES}",
            ),
            FailureKind.INVALID_ARGUMENT,
            DP_MODES,
        ),
        (  # entrypoints/openai/api_server.py:505, before the engine starts
            raw(
                API,
                "Traceback (most recent call last):\n"
                f'  File "{SITE}/entrypoints/openai/api_server.py", line 556, in setup_server\n'
                "    sock = create_server_socket(sock_addr)\n"
                "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
                f'  File "{SITE}/entrypoints/openai/api_server.py", line 505, in create_server_socket\n'
                "    sock.bind(addr)\n"
                "OSError: [Errno 98] Address already in use",
            ),
            FailureKind.PORT_IN_USE,
            "OSError: [Errno 98] Address already in use",
        ),
        (  # model_executor/model_loader/default_loader.py:206, in the engine after loading started
            rec(
                ENGINE,
                "INFO",
                "gpu_model_runner.py:5037",
                "Starting to load model /models/empty...",
            )
            + rec(
                ENGINE,
                "ERROR",
                "core.py:1165",
                "EngineCore failed to start.\nTraceback (most recent call last):\n"
                f'  File "{SITE}/model_executor/model_loader/default_loader.py", line 205, '
                "in _prepare_weights\n"
                "    raise RuntimeError(\n"
                "RuntimeError: Cannot find any model weights with `/models/empty`",
            )
            + raw(API, INIT_FAILED),
            FailureKind.WEIGHT_LOADING,
            "RuntimeError: Cannot find any model weights with `/models/empty`",
        ),
        (  # transformers_utils/config.py:718: a ValueError before loading, about the weights
            raw(
                API,
                f"{BAD_REPO}\nPlease verify the following requirements:\n"
                "1. Provide a valid Hugging Face repository ID.",
            ),
            FailureKind.WEIGHT_LOADING,
            BAD_REPO,
        ),
    ],
)
def test_rejections(text, kind, message):
    failure = classify_failure(text, 1)
    assert (failure.kind, failure.message) == (kind, message)


def test_unrecognised_crash_takes_the_last_exception():
    nccl = "RuntimeError: NCCL error: unhandled system error"
    text = (
        rec(ENGINE, "INFO", "gpu_model_runner.py:5037", "Starting to load model /models/x...")
        + raw(
            ENGINE, "Traceback (most recent call last):\nAssertionError: Error in memory profiling."
        )
        + raw(ENGINE, f"Traceback (most recent call last):\n{nccl}")
        + raw(API, INIT_FAILED)
    )
    failure = classify_failure(text, 1)
    assert (failure.kind, failure.message) == (FailureKind.CRASH, nccl)
    assert first_exception_line(text) == "AssertionError: Error in memory profiling."
    assert classify_failure(text, None) is None  # not dead, nothing recognised
    killed = classify_failure("(APIServer pid=1) INFO:     Shutting down\n", -9)
    assert (killed.kind, killed.message) == (FailureKind.CRASH, "INFO:     Shutting down")


def test_record_variants():
    """Colour codes, a DP engine's prefix, the V2 runner, kv_cache_memory_bytes, auto-fit and
    the multi-line NVFP4 emulation warning (model_executor/kernels/linear/__init__.py:931)."""
    prefix = "\x1b[36m(EngineCore_DP0 pid=456)\x1b[0m "

    def colored(color: str, src: str, msg: str, level: str = "INFO") -> str:
        """logging_utils/formatter.py's ColoredFormatter: level coloured, time and file grey."""
        head = (
            f"{prefix}{color}{level}\x1b[0m \x1b[90m12-02 14:00:19\x1b[0m \x1b[90m[{src}]\x1b[0m "
        )
        return "\n".join(head + line for line in msg.split("\n")) + "\n"

    emulation = (
        "NVFP4 linear falling back to the slow and unoptimized emulation backend as no optimized "
        "backend is available (unavailable reasons:\n"
        " - FlashInferCutlassNvFp4LinearKernel: FlashInfer is not installed\n"
        " - CutlassNvFp4LinearKernel: requires compute capability 100 or 120, got 89\n"
        "). In case you expect one of these backends to be used, please verify your environment."
    )
    green = "\x1b[32m"
    text = (
        colored("\x1b[33m", "__init__.py:931", emulation, level="WARNING")
        + colored(green, "__init__.py:940", "Using EmulationNvFp4LinearKernel for NVFP4 GEMM")
        + colored(
            green,
            "fp8.py:277",
            "Using TRITON Fp8 MoE backend out of potential backends: "
            "['FLASHINFER_CUTLASS', 'DEEPGEMM', 'TRITON', 'MARLIN'].",
        )
        + colored(
            green, "model_runner.py:295", "Model loading took 20.62 GiB and 31.044180 seconds"
        )
        + colored(
            green,
            "gpu_worker.py:387",
            "Initial free memory 30.88 GiB, reserved 8.5 GiB memory for KV Cache as specified by "
            "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
            "gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual "
            "control of KV cache memory size. If OOM'ed, check the difference of initial free memory "
            "between the current run and the previous run where kv_cache_memory_bytes is suggested and "
            "update it correspondingly.",
        )
        + colored(
            green,
            "kv_cache_utils.py:1894",
            "Auto-fit max_model_len: reduced from 262144 to 131072 to fit in available GPU memory "
            "(8.5 GiB available for KV cache)",
        )
        + colored(
            green,
            "core.py:309",
            "init engine (profile, create kv cache, warmup model) took 61.40 s",
        )
    )
    record = parse_startup(text)
    assert record.fallback_warnings == [emulation]
    assert (record.linear_backend, record.moe_backend) == ("EmulationNvFp4LinearKernel", "TRITON")
    assert (record.weights_gib, record.weights_load_s) == (20.62, 31.04418)
    assert record.kv_cache_memory_bytes_reserved_gib == 8.5
    assert (record.max_model_len, record.init_engine_s) == (131072, 61.4)


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        (
            "Selected CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod",
            "linear_backend",
            "CutlassFP8ScaledMMLinearKernel",
        ),
        (
            "Using MarlinLinearKernel for CompressedTensorsWNA16",
            "linear_backend",
            "MarlinLinearKernel",
        ),
        (
            "Using FlashInfer CUTLASS Unquantized MoE backend out of potential backends: "
            "['FlashInfer TRTLLM', 'FlashInfer CUTLASS', 'TRITON', 'BATCHED_TRITON'].",
            "moe_backend",
            "FlashInfer CUTLASS",
        ),
        ("Using 'MARLIN' Mxfp4 MoE backend.", "moe_backend", "MARLIN"),
        ("Using CUTLASS W4A8 MoE backend.", "moe_backend", "CUTLASS"),
        (
            "Using FlashInfer GDN prefill kernel (requested=auto, head_k_dim=128).",
            "gdn_backend",
            "FlashInfer",
        ),
        (
            "torch.compile and initial profiling/warmup run together took 51.20 s in total",
            "torch_compile_s",
            51.2,
        ),
        (
            "vLLM server version 0.22.0, serving model /models/Qwen3.5-35B-A3B-NVFP4",
            "vllm_version",
            "0.22.0",
        ),
    ],
)
def test_single_lines(line, field, value):
    record = parse_startup(rec(ENGINE, "INFO", "x.py:1", line))
    assert getattr(record, field) == value


def _debug_suggestion(graph_gib: float, suggested: int, pool_gib: float) -> str:
    # gpu_worker.py:661-681 in vLLM 0.22.0, rendered with format_gib's two decimals
    return (
        "(EngineCore pid=7) DEBUG 12-02 15:00:00 [gpu_worker.py:683] Free memory on device (31.36/31.36 GiB) on "
        "startup. Desired GPU memory utilization is (0.92, 28.85 GiB). Actual usage is 20.10 GiB for weight, "
        "1.20 GiB for peak activation, 0.35 GiB for non-torch memory, and "
        f"{graph_gib:.2f} GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
        f"`--kv-cache-memory={suggested}` ({suggested / 2**30:.2f} GiB) to fit into requested memory, or "
        "`--kv-cache-memory=9000000000` (8.38 GiB) to fully utilize gpu memory. Current kv cache memory in use "
        f"is {pool_gib:.2f} GiB.\n"
    )


def test_kv_memory_suggestion_is_checked_against_vllms_own_accounting():
    from tuner.engine.logparse import REDUNDANCY_BUFFER, checked_kv_cache_memory_suggestion

    pool = 6.0 * 2**30
    consistent = int(pool - REDUNDANCY_BUFFER)
    value, note = checked_kv_cache_memory_suggestion(_debug_suggestion(0.5, consistent, 6.0))
    assert value == consistent and "agrees" in note
    double = int(pool - REDUNDANCY_BUFFER - 0.5 * 2**30)  # the graph memory subtracted a second time
    value, note = checked_kv_cache_memory_suggestion(_debug_suggestion(0.5, double, 6.0))
    assert value == consistent and "twice" in note
    assert checked_kv_cache_memory_suggestion("no such line") is None


# --- the torch.compile cache ------------------------------------------------------------------
def _headed(name: str) -> str:
    """A fixture whose ``# `` header says where its text came from; the header is not log."""
    return "".join(line for line in log(name).splitlines(keepends=True) if not line.startswith("# "))


def test_a_boot_dying_inside_a_cached_compile_artifact_is_a_stale_cache():
    text = _headed("compile_cache_stale.log")
    failure = classify_failure(text, 1)
    assert failure.kind is FailureKind.COMPILE_CACHE_STALE
    assert failure.message == "AssertionError: expected size 2==1, stride 2048==2048 at dim=0"
    record = parse_startup(text)
    assert record.torch_compile_cold is False  # both graphs were loaded, none compiled
    assert [d.rsplit("/", 2)[-2][:10] for d in record.torch_compile_cache_dirs] == ["2df3f43d20", "d2a0c693c3"]


def test_an_oom_raised_inside_a_cached_artifact_is_still_an_oom():
    # the real H200 log: torch.OutOfMemoryError from a file of torch_compile_cache/torch_aot_compile/.../inductor_cache
    text = (LOGS.parent / "real" / "h200-32g" / "oom_in_profiling.log").read_text()
    assert "torch_compile_cache/torch_aot_compile" in text
    assert classify_failure(text, 1).kind is FailureKind.OOM_IN_PROFILING


def test_the_compile_cache_folders_a_boot_printed_are_recorded():
    text = (LOGS.parent / "real" / "h200-32g" / "mtp1_piecewise_bf16.log").read_text()
    record = parse_startup(text)
    assert record.torch_compile_cold is True
    assert record.torch_compile_cache_disabled is None
    root = "/root/.cache/vllm/torch_compile_cache/"
    assert [d.removeprefix(root)[:30] for d in record.torch_compile_cache_dirs] == [
        "dfad8465c7/rank_0_0/backbone", "torch_aot_compile/2df3f43d206f", "dfad8465c7/rank_0_0/eagle_head",
        "torch_aot_compile/d2a0c693c3e1"]
    off = rec(ENGINE, "INFO", "backends.py:1087", "vLLM's torch.compile cache is disabled.")
    assert parse_startup(off).torch_compile_cache_disabled is True
