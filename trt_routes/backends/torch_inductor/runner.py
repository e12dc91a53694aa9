"""Running and timing a compiled torch model: inputs placed once, warm-up until timings settle, CUDA
events on GPUs (one event pair per iteration), perf_counter on CPUs.

Timing on one GPU is serialized across processes with a file lock, so several applies sharing a GPU
never measure at the same time."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from filelock import FileLock

from trt_routes.backends import cuda_device
from trt_routes.backends.base import Feeds
from trt_routes.backends.torch_inductor.models import cast_input, flatten_outputs, to_numpy

__all__ = ["SettleInfo", "TorchRunner", "gpu_lock"]

#: Warm-up ends when the medians of two consecutive windows differ by less than this fraction...
SETTLE_TOLERANCE = 0.02
#: ...or after this many seconds / windows, whichever comes first.
SETTLE_MAX_S = 3.0
SETTLE_MAX_WINDOWS = 30


@dataclass
class SettleInfo:
    iterations: int = 0
    windows: int = 0
    seconds: float = 0.0
    settled: bool = False
    medians: list[float] = field(default_factory=list)


def gpu_lock(device: str) -> FileLock:
    """The per-GPU lock every backend's timing shares (``cuda_device.gpu_lock``) for ``cuda:N``."""
    index = device.partition(":")[2]
    return cuda_device.gpu_lock(int(index) if index.isdigit() else 0)  # type: ignore[no-any-return]


class TorchRunner:
    """Calls ``fn(**inputs)`` for a compiled model (torch.compile'd module or AOTInductor package)."""

    def __init__(self, fn: Callable[..., Any], device: str, dtype: str, *, step_marker: bool = False,
                 guard: Callable[[], Any] | None = None, channels_last: bool = False) -> None:
        self.fn = fn
        self.device = device
        self.dtype = dtype
        self.channels_last = channels_last  # the model knob: 4-D floating inputs fed in channels_last
        self.step_marker = step_marker  # CUDA graph trees: mark each call as a new step
        self.guard = guard  # context manager factory active around every call (e.g. no recompiles)
        self.settle = SettleInfo()
        #: how a recreated engine was compiled: its artifacts restored, FX-graph cache hits and misses
        self.compile_cache: dict[str, Any] = {}
        self._settled = False  # warm-up until settled runs once per loaded engine, at the first time()
        if self.on_gpu:  # peak device memory from here (weights resident) through every run: facts()
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)

    def facts(self) -> dict[str, Any]:
        """Torch's own accounting of the engine's peak device memory while it ran (NVML's used-memory delta
        reads 0 here: the caching allocator keeps what earlier trials and the warm-up reserved)."""
        if not self.on_gpu:
            return {}
        import torch

        return {"device_memory_mb": torch.cuda.max_memory_allocated(self.device) / 1e6,
                "memory_source": "torch.cuda.max_memory_allocated"}

    # -- helpers ---------------------------------------------------------------------------
    def _prepare(self, feeds: Feeds) -> dict[str, Any]:
        return {name: cast_input(np.asarray(v), self.dtype, self.device, self.channels_last)
                for name, v in feeds.items()}

    def _call(self, inputs: dict[str, Any]) -> Any:
        if self.step_marker:
            import torch

            torch.compiler.cudagraph_mark_step_begin()
        return self.fn(**inputs)

    def _context(self) -> Any:
        import contextlib

        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        if self.guard is not None:
            stack.enter_context(self.guard())
        return stack

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @contextlib.contextmanager
    def calling(self, feeds: Feeds) -> Iterator[Callable[[], Any]]:
        """One call of the engine as a timed run makes it (inputs prepared on the device once, outside the
        call), in the engine's context: what ``torch_inductor.profile`` profiles."""
        inputs = self._prepare(feeds)
        with self._context():
            yield lambda: self._call(inputs)

    # -- Runner protocol --------------------------------------------------------------------
    def run(self, feeds: Feeds) -> Feeds:
        inputs = self._prepare(feeds)
        with self._context():
            outputs = flatten_outputs(self._call(inputs))
            return to_numpy(outputs)

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        inputs = self._prepare(feeds)
        lock = gpu_lock(self.device) if self.on_gpu else None
        with self._context():
            if lock is not None:
                with lock:
                    return self._time(inputs, warmup, iterations, repeats)
            return self._time(inputs, warmup, iterations, repeats)

    def _time(self, inputs: dict[str, Any], warmup: int, iterations: int, repeats: int) -> list[float]:
        if not self._settled:
            self._settle(inputs, warmup, max(iterations, 10))
            self._settled = True
        else:
            for _ in range(warmup):
                self._call(inputs)
        samples: list[float] = []
        for _ in range(repeats):
            samples += self._window(inputs, iterations)
        return samples

    def _window(self, inputs: dict[str, Any], n: int) -> list[float]:
        """Per-iteration milliseconds of ``n`` back-to-back calls."""
        if self.on_gpu:
            import torch

            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(n)]
            torch.cuda.synchronize(self.device)
            for start, end in pairs:
                start.record()
                self._call(inputs)
                end.record()
            torch.cuda.synchronize(self.device)
            return [float(s.elapsed_time(e)) for s, e in pairs]
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            self._call(inputs)
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    def _settle(self, inputs: dict[str, Any], warmup: int, window: int) -> None:
        """``warmup`` calls, then timed windows until two consecutive medians agree (clocks and caches
        have settled), bounded by SETTLE_MAX_S and SETTLE_MAX_WINDOWS."""
        info = SettleInfo()
        t0 = time.perf_counter()
        for _ in range(warmup):
            self._call(inputs)
        info.iterations = warmup
        previous: float | None = None
        while info.windows < SETTLE_MAX_WINDOWS and time.perf_counter() - t0 < SETTLE_MAX_S:
            median = statistics.median(self._window(inputs, window))
            info.windows += 1
            info.iterations += window
            info.medians.append(round(median, 6))
            if previous is not None and abs(median - previous) <= SETTLE_TOLERANCE * max(previous, 1e-9):
                info.settled = True
                break
            previous = median
        info.seconds = time.perf_counter() - t0
        self.settle = info
