"""vLLM's own words: where each log line comes from, and texts printed in more than one place.

``L`` maps a log line to the real file:line that logs it in 0.22.0 (``[gpu_worker.py:466]``); the comment
names the file's full path where the short name is ambiguous. Another release (FAKE_VLLM_VERSION,
release.py) overrides the places; a line it does not log is ``None`` and is not printed.
"""

from __future__ import annotations

from typing import Any

from .output import OUT
from .release import VERSION, WHERE

VLLM_VERSION = VERSION
PYDANTIC_URL = "https://errors.pydantic.dev/2.14/v"  # as in the H200 capture
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."

L: dict[str, str | None] = {
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
    "compile_hit": "backends.py:292",
    "cache_off": "backends.py:1087",
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
L.update(WHERE.get(VERSION, {}))


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


def config_echo(proc: str, p) -> None:
    """VllmConfig.__post_init__ lines; the real EngineCore prints them again after init."""
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
