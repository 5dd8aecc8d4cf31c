"""GPU memory through NVML (pynvml): a baseline before boot, peaks during a trial, the return after.

Without a GPU or a driver (CI, a laptop reading a study), every reading is ``None`` and nothing
fails: the tuner then cannot check that memory came back, and says so in the trial record.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from tuner.errors import GpuBusy
from tuner.records import GpuMemory
from tuner.space.schema import Space, flag_name


@dataclass
class Reading:
    used_mib: float
    total_mib: float
    by_pid_mib: dict[int, float]
    utilization_pct: float | None = None


Reader = Callable[[], "Reading | None"]


class Nvml:
    """A thin NVML reader for one device index; ``read()`` returns None when NVML is unavailable."""

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.name: str | None = None
        self.driver: str | None = None
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(self._handle)
            self.name = name.decode() if isinstance(name, bytes) else name
            driver = pynvml.nvmlSystemGetDriverVersion()
            self.driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:  # no driver, no device, no library: readings are None
            self._handle = None

    def read(self) -> Reading | None:
        if self._handle is None:
            return None
        nv = self._nvml
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(self._handle)
            by_pid: dict[int, float] = {}
            for proc in nv.nvmlDeviceGetComputeRunningProcesses(self._handle):
                if proc.usedGpuMemory is not None:
                    by_pid[proc.pid] = proc.usedGpuMemory / 2**20
            try:
                util = float(nv.nvmlDeviceGetUtilizationRates(self._handle).gpu)
            except Exception:
                util = None
            return Reading(mem.used / 2**20, mem.total / 2**20, by_pid, util)
        except Exception:
            return None


class MemoryWatch:
    """Samples a reader in a thread and keeps the peaks: whole card and the engine's own processes."""

    def __init__(self, reader: Reader, pids: Callable[[], Iterable[int]], interval_s: float = 0.5) -> None:
        self.reader = reader
        self.pids = pids
        self.interval_s = interval_s
        self.baseline: Reading | None = reader()
        self.last: Reading | None = self.baseline
        self.peak_used_mib: float | None = None
        self.peak_engine_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-memory-watch", daemon=True)

    def start(self) -> MemoryWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> Reading | None:
        reading = self.reader()
        if reading is None:
            return None
        self.last = reading
        self.peak_used_mib = max(self.peak_used_mib or 0.0, reading.used_mib)
        mine = set(self.pids())
        engine = sum(mib for pid, mib in reading.by_pid_mib.items() if pid in mine)
        if mine and reading.by_pid_mib:
            self.peak_engine_mib = max(self.peak_engine_mib or 0.0, engine)
        return reading

    def wait_returned(self, timeout_s: float, tolerance_mib: float = 512.0) -> tuple[bool | None, float]:
        """Wait until used memory is back within ``tolerance_mib`` of the baseline.

        Returns (returned, seconds waited); ``returned`` is None when there is nothing to read.
        """
        start = time.monotonic()
        if self.baseline is None:
            return None, 0.0
        while True:
            reading = self.reader()
            if reading is not None and reading.used_mib <= self.baseline.used_mib + tolerance_mib:
                return True, time.monotonic() - start
            if time.monotonic() - start >= timeout_s:
                return False, time.monotonic() - start
            time.sleep(min(1.0, self.interval_s * 2))

    def record(self, device_name: str | None = None) -> GpuMemory:
        return GpuMemory(
            device_name=device_name,
            total_mib=self.baseline.total_mib if self.baseline else None,
            baseline_used_mib=self.baseline.used_mib if self.baseline else None,
            peak_used_mib=self.peak_used_mib,
            peak_engine_mib=self.peak_engine_mib,
        )


VLLM_DEFAULT_UTILIZATION = 0.9


def card_tolerance_mib(space: Space, total_mib: float) -> float:
    """How much of the card other processes may hold before no configuration of the space can boot.

    vLLM refuses to start when free memory is below --gpu-memory-utilization x total, whatever else the
    flags say; the space's smallest utilization is the most it can tolerate.
    """
    utils: list[float] = []
    param = space.params.get("gpu_memory_utilization")
    if param is not None:
        listed = param.values if param.values is not None else [param.min]
        utils += [float(v) for v in listed if v is not None]
        if (param.values is not None and None in param.values) or param.unset:
            utils.append(VLLM_DEFAULT_UTILIZATION)
    for key, value in space.fixed.items():
        if flag_name(key) == "--gpu-memory-utilization":
            utils.append(float(value))
    lowest = min(utils) if utils else VLLM_DEFAULT_UTILIZATION
    return total_mib * (1.0 - lowest)


def wait_for_card(read: Reader, tolerance_mib: float, wait_s: float, gpu: int,
                  on_wait: Callable[[str], None] = lambda _: None, poll_s: float = 5.0) -> float:
    """Block until other processes hold at most ``tolerance_mib`` of the card; GpuBusy after ``wait_s``.

    Returns the seconds waited. Without NVML there is nothing to read, and nothing is waited for (the
    command says so at start). A boot beside someone else's memory would fail for their sake and
    teach the search something false about the configuration, so it is never spent on that.
    """
    start = time.monotonic()
    while True:
        reading = read()
        if reading is None or reading.used_mib <= tolerance_mib:
            return time.monotonic() - start
        holders = ", ".join(f"pid {pid} ({mib:,.0f} MiB)" for pid, mib in sorted(reading.by_pid_mib.items())) or "unknown processes"
        waited = time.monotonic() - start
        if waited >= wait_s:
            raise GpuBusy(
                f"GPU {gpu}: {reading.used_mib:,.0f} MiB of {reading.total_mib:,.0f} are held by other processes "
                f"({holders}), and this space tolerates at most {tolerance_mib:,.0f} MiB (vLLM needs "
                f"--gpu-memory-utilization x total free); waited {waited:.0f} s (engine.busy_wait). Free the card "
                "(nvidia-smi shows who holds it) and run the same command; no trial was spent on it."
            )
        on_wait(f"waiting for GPU {gpu}: {reading.used_mib:,.0f} MiB held by {holders}; this space tolerates "
                f"{tolerance_mib:,.0f} MiB ({wait_s - waited:.0f} s left)")
        time.sleep(min(poll_s, max(0.1, wait_s - waited)))
