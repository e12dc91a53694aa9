"""A loaded TensorRT engine: device buffers through cuda-python, ``execute_async_v3`` on one stream,
per-iteration timing with CUDA events. Call ``close()`` (or use ``with``) to free device memory."""

from __future__ import annotations

import contextlib
import math
from types import ModuleType
from typing import Any

import numpy as np

from trt_routes.backends.base import Feeds
from trt_routes.backends.cuda_device import cuda_check, load_cudart
from trt_routes.errors import TrtRoutesError


class TensorRTRunError(TrtRoutesError):
    """An engine could not be prepared or executed."""


class TensorRTRunner:
    """Runs one engine with one execution context on one CUDA stream."""

    def __init__(
        self, trt: Any, runtime: Any, engine: Any, logger: Any, shapes: dict[str, list[int]]
    ) -> None:
        self._rt: ModuleType = load_cudart()
        self._trt = trt
        self._runtime = runtime  # the runtime must outlive the engine
        self._engine = engine
        self._logger = logger
        self._buffers: dict[str, tuple[int, int]] = {}  # name -> (device pointer, bytes)
        self._stream: Any = None
        self._closed = False
        self._context = engine.create_execution_context()
        if self._context is None:
            raise TensorRTRunError("could not create an execution context" + self._errors())
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if n not in self.inputs]
        self._dtypes: dict[str, np.dtype[Any]] = {}
        for name in names:
            trt_dtype = engine.get_tensor_dtype(name)
            try:
                self._dtypes[name] = np.dtype(trt.nptype(trt_dtype))
            except TypeError as exc:
                raise TensorRTRunError(
                    f"I/O tensor {name} has type {trt_dtype}, which numpy cannot hold"
                ) from exc
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._stream = self._call(self._rt.cudaStreamCreate(), "cudaStreamCreate")
        try:
            self._configure({n: tuple(shapes[n]) for n in self.inputs if n in shapes})
        except BaseException:
            self.close()
            raise

    # -- plumbing ---------------------------------------------------------------------------
    def _call(self, result: Any, what: str) -> Any:
        return cuda_check(self._rt, result, what)

    def _errors(self) -> str:
        errors = self._logger.errors() if self._logger is not None else []
        return (": " + "; ".join(errors)) if errors else ""

    def _configure(self, input_shapes: dict[str, tuple[int, ...]]) -> None:
        """Set input shapes, then (re)allocate every I/O buffer and bind its address."""
        for name in self.inputs:
            shape = input_shapes.get(name)
            if shape is None:
                shape = tuple(self._engine.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise TensorRTRunError(f"input {name} is dynamic {shape} and no shape was given for it")
            if not self._context.set_input_shape(name, shape):
                raise TensorRTRunError(
                    f"engine rejected shape {list(shape)} for input {name}" + self._errors()
                )
        for name in self.inputs + self.outputs:
            shape = tuple(int(d) for d in self._context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise TensorRTRunError(
                    f"output {name} has a data-dependent shape {shape}; "
                    "engines that need an output allocator are not supported"
                )
            nbytes = max(1, math.prod(shape) * self._dtypes[name].itemsize)
            ptr, size = self._buffers.get(name, (0, 0))
            if size < nbytes:
                if ptr:
                    self._call(self._rt.cudaFree(ptr), "cudaFree")
                    del self._buffers[name]
                ptr = int(self._call(self._rt.cudaMalloc(nbytes), "cudaMalloc"))
                self._buffers[name] = (ptr, nbytes)
            if not self._context.set_tensor_address(name, ptr):
                raise TensorRTRunError(f"set_tensor_address failed for {name}" + self._errors())
            self._shapes[name] = shape

    def _upload(self, feeds: Feeds) -> list[np.ndarray]:
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise TensorRTRunError(f"missing inputs {missing}; engine inputs: {self.inputs}")
        hosts = {n: np.ascontiguousarray(feeds[n], dtype=self._dtypes[n]) for n in self.inputs}
        wanted = {n: tuple(a.shape) for n, a in hosts.items()}
        if any(self._shapes.get(n) != s for n, s in wanted.items()):
            self._configure(wanted)
        kind = self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        for name, host in hosts.items():
            if host.nbytes:
                self._call(
                    self._rt.cudaMemcpyAsync(
                        self._buffers[name][0], host.ctypes.data, host.nbytes, kind, self._stream
                    ),
                    "cudaMemcpyAsync",
                )
        return list(hosts.values())  # keep host memory alive until the stream is synchronized

    def _enqueue(self) -> None:
        if not self._context.execute_async_v3(int(self._stream)):
            raise TensorRTRunError("execute_async_v3 failed" + self._errors())

    def _sync(self) -> None:
        self._call(self._rt.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    # -- Runner -----------------------------------------------------------------------------
    def run(self, feeds: Feeds) -> Feeds:
        """One inference; every output copied back to the host as numpy."""
        self._check_open()
        keep = self._upload(feeds)
        self._enqueue()
        outs: Feeds = {}
        kind = self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name in self.outputs:
            host = np.empty(self._shapes[name], dtype=self._dtypes[name])
            if host.nbytes:
                self._call(
                    self._rt.cudaMemcpyAsync(
                        host.ctypes.data, self._buffers[name][0], host.nbytes, kind, self._stream
                    ),
                    "cudaMemcpyAsync",
                )
            outs[name] = host
        self._sync()
        del keep
        return outs

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        """GPU time of each enqueue between two CUDA events, in ms (``iterations * repeats`` samples)."""
        self._check_open()
        keep = self._upload(feeds)
        for _ in range(warmup):
            self._enqueue()
        self._sync()
        samples: list[float] = []
        for _ in range(repeats):
            events: list[tuple[Any, Any]] = []
            try:
                for _ in range(iterations):
                    start = self._call(self._rt.cudaEventCreate(), "cudaEventCreate")
                    events.append((start, None))
                    end = self._call(self._rt.cudaEventCreate(), "cudaEventCreate")
                    events[-1] = (start, end)
                    self._call(self._rt.cudaEventRecord(start, self._stream), "cudaEventRecord")
                    self._enqueue()
                    self._call(self._rt.cudaEventRecord(end, self._stream), "cudaEventRecord")
                self._sync()
                for start, end in events:
                    ms = self._call(self._rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime")
                    samples.append(float(ms))
            finally:
                for start, end in events:
                    for event in (start, end):
                        if event is not None:
                            self._rt.cudaEventDestroy(event)
        del keep
        return samples

    # -- lifetime ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise TensorRTRunError("runner is closed")

    def close(self) -> None:
        """Free every device buffer and the stream; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._stream is not None:
                self._rt.cudaStreamSynchronize(self._stream)
            for ptr, _size in self._buffers.values():
                self._rt.cudaFree(ptr)
            self._buffers.clear()
            if self._stream is not None:
                self._rt.cudaStreamDestroy(self._stream)
                self._stream = None
        finally:
            self._context = None
            self._engine = None
            self._runtime = None

    def __enter__(self) -> TensorRTRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to report to
            self.close()
