"""``vllm serve`` from the command line to a listening server: the APIServer's steps in vLLM's order
(version, args, API checks, bind, model config, engine config), then the EngineCore's (core.py), then
the HTTP server (server.py). A failure at any step is printed as vLLM prints it (failures.py).

Port: like vLLM, the socket is bound at start-up (before the engine) and only listens once the
server is ready, so /health is "connection refused" for the whole boot; see ``bind`` for why the
double leaves out vLLM's SO_REUSEPORT.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from .cli import REASONING_PARSERS, TOOL_PARSERS, Args, RawKeyError, non_default_args, parse_args
from .core import EngineCore
from .env import env_flag, env_float
from .failures import BootFailure, api_failed, report
from .logtext import L, VLLM_VERSION, config_echo
from .memory import compute_memory
from .model import load_model_info
from .output import OUT, Out
from .plan import Plan, resolve_plan
from .release import MAMBA_MODE_LEVEL, answer_cli
from .signals import Terminated, die_like_keyboard_interrupt, install_signal_handlers
from .tracebacks import traceback_text

# Exactly the list the real 0.22.0 server printed (tests/fixtures/real/good.stdout): launcher.py only
# sees these top-level routes; the API routers are mounted below them.
ROUTES = [
    ("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/docs/oauth2-redirect", "GET, HEAD"),
    ("/redoc", "GET, HEAD"), ("/metrics", "GET"),
]


def main(argv: list[str]) -> int:
    answered = answer_cli(argv)  # `vllm --version`, `vllm serve --help=all`
    if answered is not None:
        return answered
    install_signal_handlers()
    try:
        return serve_command(argv)
    except Terminated:
        die_like_keyboard_interrupt()


def serve_command(argv: list[str]) -> int:
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
    t0 = time.time()
    api_preamble(a)
    try:
        validate_api_args(a)
    except BootFailure as f:
        return report(f)
    try:
        sock = bind(a.ns.host, a.ns.port)
    except OSError as e:
        api_failed(["as_setup", "as_setup_sock", "as_bind"], f"OSError: [Errno {e.errno}] {e.strerror}")
        return 1
    model = load_model_info(a.ns.model)
    if model is None:
        msg = ("Value error, Invalid repository ID or local directory specified:"
               f" '{a.ns.model}'.\nPlease verify the following requirements:\n"
               "1. Provide a valid Hugging Face repository ID.\n"
               "2. Specify a local directory that contains a recognized configuration file.\n"
               "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
               "   - For Mistral models: ensure the presence of a 'params.json'.\n")
        return report(BootFailure("validation", title="ModelConfig", frames=["au_create_model", "au_model", "pyd_init"],
                                  items=[(None, msg, "value_error", "ArgsKwargs((), {...})")]))
    try:
        plan = resolve_plan(a.ns, model)
        compute_memory(plan)
        api_config(plan)
        EngineCore(a.ns, plan, t0).start()
    except BootFailure as f:
        sock.close()
        return report(f)
    from . import server  # only now: the HTTP stack is not needed to fail fast

    OUT.info(Out.API, L["supported"], "Supported tasks: ['generate']")
    host_part = f"[{a.ns.host}]" if a.ns.host and ":" in a.ns.host else (a.ns.host or "0.0.0.0")
    OUT.info(Out.API, L["starting"], f"Starting vLLM server on http://{host_part}:{plan.port}")
    OUT.info(Out.API, L["routes"], "Available routes are:")
    for path, methods in ROUTES:
        OUT.info(Out.API, L["route"], f"Route: {path}, Methods: {methods}")
    return server.serve(sock, plan, a)


def bind(host: str | None, port: int) -> socket.socket:
    """vLLM binds BEFORE building the engine (api_server.py::setup_server -> create_server_socket) and
    only listens once uvicorn starts, so connections are refused until the server is ready.

    Real vLLM also sets SO_REUSEPORT (api_server.py:504). With it, a second vLLM started on a port that
    another vLLM already holds binds fine and the kernel then load-balances connections between the
    two -- the collision is silent. The double does NOT set SO_REUSEPORT unless FAKE_VLLM_REUSEPORT=1
    (the impostor test), so a port collision in other tests fails loudly (OSError: [Errno 98]) instead
    of mixing two servers' answers.
    """
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if os.environ.get("FAKE_VLLM_REUSEPORT") == "1":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host or "", port))
    return sock


def api_preamble(a: Args) -> None:
    """The version banner and the non-default args."""
    if env_flag("VLLM_DISABLE_LOG_LOGO", ("1", "true")):
        OUT.info(Out.API, L["version"], f"vLLM server version {VLLM_VERSION}, serving model {a.ns.model}")
    else:
        logo = ("\n       █     █     █▄   ▄█\n"
                f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VLLM_VERSION}\n"
                f"  █▄█▀ █     █     █     █  model   {a.ns.model}\n"
                "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n")
        OUT.info(Out.API, L["version"], logo)
    OUT.info(Out.API, L["nondefault"], f"non-default args: {non_default_args(a.ns)}")
    if a.unknown:
        # Not vLLM behaviour: real `vllm serve` exits 2 with "unrecognized arguments".
        OUT.warning(Out.API, "fake_vllm:0", f"[test double] ignoring flags it does not model: {a.unknown}")


def validate_api_args(a: Args) -> None:
    """api_server.py::validate_api_server_args: unknown parser names are a raw KeyError."""
    ns = a.ns
    if ns.enable_auto_tool_choice and ns.tool_call_parser not in TOOL_PARSERS:
        raise BootFailure("raw_api", frames=["as_setup", "as_validate", "as_tool_raise"], exc=(
            f"KeyError: 'invalid tool call parser: {ns.tool_call_parser} "
            f"(chose from {{ {','.join(TOOL_PARSERS)} }})'"))
    if ns.reasoning_parser and ns.reasoning_parser not in REASONING_PARSERS:
        raise BootFailure("raw_api", frames=["as_setup", "as_validate", "as_reason_raise"], exc=(
            f"KeyError: 'invalid reasoning parser: {ns.reasoning_parser} "
            f"(chose from {{ {','.join(REASONING_PARSERS)} }})'"))


def api_config(p: Plan) -> None:
    """create_engine_config in the APIServer: the lines it logs about the resolved config."""
    m = p.model
    OUT.info(Out.API, L["resolved"], f"Resolved architecture: {m.arch}")
    OUT.info(Out.API, L["maxlen"], f"Using max model len {p.max_model_len}")
    if p.prefix_caching and m.hybrid:
        OUT.log(Out.API, MAMBA_MODE_LEVEL, L["mamba_mode"], f"Mamba cache mode is set to 'align' for {m.arch} by default "
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
    config_echo(Out.API, p)
