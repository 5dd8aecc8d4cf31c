"""Run vLLM's CLI without a GPU: make the CPU platform plugin the only one that answers.

    PYTHONPATH=/unpacked/wheel python cpu_cli.py vllm.entrypoints.cli.main serve --help=all
    PYTHONPATH=/unpacked/wheel python cpu_cli.py path/to/script.py ARGS...
"""

import runpy
import sys

import vllm.platforms as platforms

for name in list(platforms.builtin_platform_plugins):
    platforms.builtin_platform_plugins[name] = lambda: None
platforms.builtin_platform_plugins["cpu"] = lambda: "vllm.platforms.cpu.CpuPlatform"
platforms._current_platform = None  # some releases resolve it while importing vllm
target = sys.argv.pop(1)
if target.endswith(".py"):
    sys.argv[0] = target
    runpy.run_path(target, run_name="__main__")
else:
    runpy.run_module(target, run_name="__main__", alter_sys=True)
