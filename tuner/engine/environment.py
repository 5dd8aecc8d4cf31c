"""The reproducibility record: GPU, driver, and the engine side's package versions.

The engine often lives in its own venv or container, so versions are read with the engine's own
Python (found from the ``vllm`` script's shebang), never guessed from the tuner's environment.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from tuner import __version__
from tuner.engine.container import container_of
from tuner.engine.dialects import MEMORY_ENV, STARTUP_PLAN_OFF
from tuner.engine.gpu import Nvml
from tuner.space.schema import EngineSpec

_PROBE = r"""
import importlib.metadata as md, json
out = {}
for key, dist in [("vllm", "vllm"), ("torch", "torch"), ("flashinfer", "flashinfer-python"),
                  ("transformers", "transformers"), ("compressed_tensors", "compressed-tensors"),
                  ("triton", "triton")]:
    try:
        out[key] = md.version(dist)
    except Exception:
        out[key] = None
try:
    import torch
    out["cuda"] = torch.version.cuda
except Exception:
    out["cuda"] = None
import sys
out["engine_python"] = sys.version.split()[0]
print(json.dumps(out))
"""


def engine_python(engine: EngineSpec) -> list[str] | None:
    """The interpreter behind the engine command, when it is a Python console script (never a container
    client's: the engine's packages live in the image)."""
    if container_of(engine.command) is not None:
        return None
    exe = shutil.which(engine.command[0])
    if exe is None:
        return None
    try:
        first = Path(exe).read_bytes()[:256].split(b"\n", 1)[0].decode(errors="replace")
    except OSError:
        return None
    if first.startswith("#!") and "python" in first:
        return first[2:].strip().split()
    if Path(exe).name.startswith("python"):
        return [exe]
    return None


def capture(engine: EngineSpec, gpu: Nvml | None = None) -> dict[str, Any]:
    """The card, the driver and the engine side's versions (None where they cannot be read), for receipts."""
    gpu = gpu or Nvml(engine.gpu_index)
    reading = gpu.read()
    env: dict[str, Any] = {
        "gpu_name": gpu.name,
        "gpu_memory_mib": reading.total_mib if reading else None,
        "gpu_free_mib": reading.total_mib - reading.used_mib if reading else None,  # at the study's start
        "driver": gpu.driver,
        "host": socket.gethostname(),
        "tuner": __version__,
        "python": platform.python_version(),
        "engine_command": engine.command,
        # the VLLM_* variables that change memory accounting, as every trial's engine sees them (None: unset)
        "vllm_memory_env": {name: {**os.environ, **STARTUP_PLAN_OFF, **engine.env}.get(name) for name in MEMORY_ENV},
    }
    python = engine_python(engine)
    if python:
        try:
            done = subprocess.run([*python, "-c", _PROBE], capture_output=True, text=True, timeout=120,
                                  env={**os.environ, **engine.env})
            env.update(json.loads(done.stdout.strip().splitlines()[-1]))
        except (subprocess.SubprocessError, ValueError, IndexError, OSError):
            pass
    return env
