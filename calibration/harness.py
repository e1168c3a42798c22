"""Timing harness: warm up, flush the L2 between samples, keep every sample.

Discipline (FlashInfer's bench helper, METHOD.md): inputs are built before a timer is asked for
anything, so only the callable runs in the timed region; every sample is kept and summarised by
median, p10 and p90; bandwidth is judged against a device-to-device copy measured in the same run.

Two timers share one interface:

- `CudaEventTimer` queues, per sample, an L2 flush over a buffer at least twice the L2, a start
  event, the callable's launches and an end event; it synchronises once after all samples and
  reads each start-to-end time. The flush runs before the start event, so it is not timed, and
  its length keeps the GPU busy while the host queues the launches. Two flushes: "read" (the
  default) reads the buffer with kernels/timing.cu's pagesim_l2_flush_read and leaves the L2
  full of clean lines; "memset" overwrites it, leaving dirty lines that the timed kernel's reads
  may have to write back to HBM first (the bench measures both, so the difference is known).
- `PerfCounterTimer` (NumPy backend) wraps each call in `time.perf_counter_ns`. NumPy calls are
  synchronous, so no event is needed. CPU caches are not flushed: there is no portable way to,
  and the CPU profile exists to run the pipeline, not to predict a GPU.
"""

from __future__ import annotations

import datetime as dt
import platform
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class Samples:
    """Every timed sample of one measurement, in seconds."""

    samples_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return float(np.median(self.samples_s))

    @property
    def p10_s(self) -> float:
        return float(np.percentile(self.samples_s, 10))

    @property
    def p90_s(self) -> float:
        return float(np.percentile(self.samples_s, 90))


class Timer(Protocol):
    name: str  # "cuda-events" | "perf_counter_ns"
    flushes_l2: bool

    def sample(self, fn: Callable[[], object], *, warmup: int, repeats: int) -> Samples: ...


class PerfCounterTimer:
    """Host wall-clock timer for synchronous (NumPy) work; no cache flush."""

    name = "perf_counter_ns"
    flushes_l2 = False

    def sample(self, fn: Callable[[], object], *, warmup: int, repeats: int) -> Samples:
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - start) * 1e-9)
        return Samples(tuple(samples))


FLUSH_MODES = ("read", "memset")


class CudaEventTimer:
    """CUDA-event timer on CuPy's current stream, with an L2 flush before each sample."""

    name = "cuda-events"
    flushes_l2 = True

    def __init__(self, cupy: Any, l2_bytes: int, flush: str = "read", num_sms: int = 1) -> None:
        if flush not in FLUSH_MODES:
            raise ValueError(f"flush must be one of {FLUSH_MODES}, got {flush!r}")
        self._cupy = cupy
        self.flush_mode = flush
        # At least 2x the L2 and never under 64 MiB, rounded up to whole MiB.
        mib = 1 << 20
        self.flush_bytes = -(-max(2 * l2_bytes, 64 * mib) // mib) * mib
        self._flush_buffer = cupy.zeros(self.flush_bytes, dtype=cupy.uint8)  # pages mapped now
        self._flush_value = 0
        self._num_sms = max(1, num_sms)
        self._read_flush: Any = None
        self._sink: Any = None

    def flush(self) -> None:
        """Evict whatever an earlier sample left in the L2 (read or overwrite the buffer)."""
        if self.flush_mode == "read":
            self._flush_by_reading()
            return
        self._flush_value = (self._flush_value + 1) & 0xFF
        stream = self._cupy.cuda.get_current_stream()
        self._cupy.cuda.runtime.memsetAsync(
            self._flush_buffer.data.ptr, self._flush_value, self.flush_bytes, stream.ptr
        )

    def _flush_by_reading(self) -> None:
        if self._read_flush is None:
            from pagesim.calibration.kernel import l2_flush_read_kernel

            self._read_flush = l2_flush_read_kernel()
            self._sink = self._cupy.zeros(1, dtype=self._cupy.uint32)
        vectors = self.flush_bytes // 16
        grid = (4 * self._num_sms, 1, 1)  # a few CTAs per SM, each striding over the buffer
        never = np.uint32(0x9E3779B9)  # stored only if the xor of every word equals it
        args = (self._flush_buffer, np.uint64(vectors), never, self._sink)
        self._read_flush(grid, (256, 1, 1), args)

    def sample(self, fn: Callable[[], object], *, warmup: int, repeats: int) -> Samples:
        cuda = self._cupy.cuda
        for _ in range(warmup):
            self.flush()
            fn()
        cuda.get_current_stream().synchronize()
        starts = [cuda.Event() for _ in range(repeats)]
        ends = [cuda.Event() for _ in range(repeats)]
        for start, end in zip(starts, ends, strict=True):
            self.flush()
            start.record()
            fn()
            end.record()
        ends[-1].synchronize()
        return Samples(
            tuple(cuda.get_elapsed_time(s, e) * 1e-3 for s, e in zip(starts, ends, strict=True))
        )


def wall_samples(
    fn: Callable[[], object], sync: Callable[[], object], *, warmup: int, repeats: int
) -> Samples:
    """Host wall time of `fn(); sync()` per sample: for launch and synchronisation costs."""
    for _ in range(warmup):
        fn()
        sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        fn()
        sync()
        samples.append((time.perf_counter_ns() - start) * 1e-9)
    return Samples(tuple(samples))


def iso_now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def _version(module_name: str) -> str | None:
    try:
        module = __import__(module_name)
    except Exception:  # absent or broken: provenance says so rather than failing calibration
        return None
    return str(getattr(module, "__version__", "unknown"))


def cpu_provenance() -> dict[str, object]:
    """Provenance of the NumPy backend: device is "cpu", never a GPU name."""
    return {
        "device": "cpu",
        "device_kind": "cpu",
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "date": iso_now(),
    }


def _nvidia_smi_clocks() -> dict[str, str]:
    """Current and maximum clocks as nvidia-smi reports them (empty when it is absent)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    fields = "clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,driver_version,power.limit"
    try:
        result = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in result.stdout.splitlines()[0].split(",")] if result.stdout else []
    return dict(zip(fields.split(","), values, strict=False))


def gpu_provenance(cupy: Any) -> dict[str, object]:
    """Device name, driver/CUDA/CuPy/torch versions, clocks and cache sizes of the current GPU."""
    runtime = cupy.cuda.runtime
    device = cupy.cuda.Device()
    props = runtime.getDeviceProperties(device.id)
    attributes = device.attributes
    smi = _nvidia_smi_clocks()
    name = props.get("name", b"unknown")
    return {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "device_kind": "gpu",
        "compute_capability": device.compute_capability,
        "num_sms": props.get("multiProcessorCount", attributes.get("MultiProcessorCount")),
        "l2_bytes": props.get("l2CacheSize", attributes.get("L2CacheSize")),
        "memory_bytes": int(props.get("totalGlobalMem", 0)),
        "driver_version": runtime.driverGetVersion(),
        "driver": smi.get("driver_version"),
        "cuda_runtime": runtime.runtimeGetVersion(),
        "cupy": cupy.__version__,
        "torch": _version("torch"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "sm_clock_max_khz": props.get("clockRate", attributes.get("ClockRate")),
        "mem_clock_max_khz": props.get("memoryClockRate", attributes.get("MemoryClockRate")),
        "nvidia_smi": smi,
        "date": iso_now(),
    }
