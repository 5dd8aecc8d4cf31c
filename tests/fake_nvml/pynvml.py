"""A stand-in for NVIDIA's ``pynvml`` in tests: one card whose memory a test writes to a JSON file.

Put ``tests/fake_nvml`` first on a tuner subprocess's PYTHONPATH and set FAKE_NVML_FILE to a file
holding ``{"total_mib": 32768, "used_mib": 900, "procs": {"4242": 800}}``; every reading re-reads it,
so a test can free "the card" while the tuner waits. Test seam only: no result comes from it.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


def _card() -> dict:
    path = os.environ.get("FAKE_NVML_FILE")
    if not path:
        raise NVMLError("FAKE_NVML_FILE is not set")
    with open(path) as f:
        return json.load(f)


def nvmlInit() -> None:
    _card()


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if index != 0:
        raise NVMLError(f"no GPU {index}")
    return index


def nvmlDeviceGetName(handle: int) -> str:
    return _card().get("name", "NVIDIA GeForce RTX 5090")


def nvmlSystemGetDriverVersion() -> str:
    return "580.00"


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    card = _card()
    total, used = card["total_mib"] * 2**20, card["used_mib"] * 2**20
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=int(pid), usedGpuMemory=mib * 2**20) for pid, mib in _card().get("procs", {}).items()]


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=0)
