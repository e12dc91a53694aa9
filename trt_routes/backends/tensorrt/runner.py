"""A loaded TensorRT engine: device buffers through cuda-python, ``execute_async_v3`` on one stream (or one
captured CUDA graph), per-iteration timing with CUDA events. Call ``close()`` (or use ``with``) to free
device memory."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from trt_routes.backends.base import Feeds
from trt_routes.backends.cuda_device import cuda_check, load_cudart
from trt_routes.errors import TrtRoutesError

#: Host types for TensorRT types numpy lacks (``trt.nptype`` raises for them), from ml_dtypes (an onnx
#: dependency). FP8 is E4M3 (NvInferRuntimeBase.h: "1 sign bit, 4 exponent bits, 3 mantissa bits").
ML_DTYPES = {"BF16": "bfloat16", "FP8": "float8_e4m3fn", "E8M0": "float8_e8m0fnu"}
#: Sub-byte types (DataType.itemsize 0.5): exchanged as their packed bytes, a flat uint8 array.
PACKED = ("INT4", "FP4")


class TensorRTRunError(TrtRoutesError):
    """An engine could not be prepared or executed."""


def _type_name(trt_dtype: Any) -> str:
    return str(getattr(trt_dtype, "name", trt_dtype)).rsplit(".", 1)[-1]


def host_dtype(trt: Any, trt_dtype: Any) -> np.dtype[Any]:
    """The numpy dtype that holds one tensor of ``trt_dtype`` on the host (uint8 bytes for packed types)."""
    try:
        return np.dtype(trt.nptype(trt_dtype))
    except TypeError:
        pass
    name = _type_name(trt_dtype)
    if name in PACKED:
        return np.dtype(np.uint8)
    if name in ML_DTYPES:
        try:
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, ML_DTYPES[name]))
        except (ImportError, AttributeError) as exc:
            raise TensorRTRunError(f"I/O type {name} needs ml_dtypes.{ML_DTYPES[name]}: {exc}") from exc
    raise TensorRTRunError(f"I/O tensor type {name} has no host representation here")


def tensor_bytes(trt_dtype: Any, host: np.dtype[Any], shape: tuple[int, ...]) -> int:
    """Bytes of one tensor: TensorRT's own ``DataType.itemsize`` (0.5 for INT4/FP4) times the volume,
    rounded up; the host type's size where TensorRT gives none (E8M0 in TensorRT 11.4)."""
    size = getattr(trt_dtype, "itemsize", None)
    if size is None:
        size = host.itemsize
    return math.ceil(math.prod(shape) * float(size))


class TensorRTRunner:
    """Runs one engine with one execution context on one CUDA stream."""

    def __init__(
        self,
        trt: Any,
        runtime: Any,
        engine: Any,
        logger: Any,
        shapes: dict[str, list[int]],
        *,
        cuda_graph: bool = False,
    ) -> None:
        self._rt: ModuleType = load_cudart()
        self._trt = trt
        self._runtime = runtime  # the runtime must outlive the engine
        self._engine = engine
        self._logger = logger
        self._cuda_graph = cuda_graph
        self._graph_exec: Any = None
        self._buffers: dict[str, tuple[int, int]] = {}  # name -> (device pointer, bytes)
        self._stream: Any = None
        self._closed = False
        with logger.capture() as log:
            self._context = engine.create_execution_context()
            if self._context is None:
                raise TensorRTRunError("could not create an execution context" + _said(log))
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if n not in self.inputs]
        self._types: dict[str, Any] = {name: engine.get_tensor_dtype(name) for name in names}
        self._dtypes: dict[str, np.dtype[Any]] = {name: host_dtype(trt, t) for name, t in self._types.items()}
        self._shapes: dict[str, tuple[int, ...]] = {}
        #: shape tensors' values, in host memory TensorRT reads (their profile entries give the first ones)
        self._values: dict[str, np.ndarray] = {
            n: np.ascontiguousarray(shapes.get(n, ()), dtype=self._dtypes[n])
            for n in self.inputs if engine.is_shape_inference_io(n)}
        self._stream = self._call(self._rt.cudaStreamCreate(), "cudaStreamCreate")
        try:
            self._configure({n: tuple(shapes[n]) for n in self.inputs if n in shapes})
        except BaseException:
            self.close()
            raise

    # -- plumbing ---------------------------------------------------------------------------
    def _call(self, result: Any, what: str) -> Any:
        return cuda_check(self._rt, result, what)

    def _packed(self, name: str) -> bool:
        return _type_name(self._types[name]) in PACKED

    def _nbytes(self, name: str) -> int:
        return tensor_bytes(self._types[name], self._dtypes[name], self._shapes[name])

    def _configure(self, input_shapes: dict[str, tuple[int, ...]]) -> None:
        """Set input shapes, then (re)allocate every I/O buffer and bind its address."""
        self._drop_graph()
        with self._logger.capture() as log:
            for name in self.inputs:
                if name in self._values:  # its shape is static; its values are read from host memory
                    static = tuple(int(d) for d in self._engine.get_tensor_shape(name))
                    if not self._context.set_input_shape(name, static) or \
                            not self._context.set_tensor_address(name, self._values[name].ctypes.data):
                        raise TensorRTRunError(f"engine rejected the values {self._values[name].tolist()} of "
                                               f"shape tensor {name}" + _said(log))
                    continue
                shape = input_shapes.get(name)
                if shape is None:
                    shape = tuple(self._engine.get_tensor_shape(name))
                    if any(d < 0 for d in shape):
                        raise TensorRTRunError(f"input {name} is dynamic {shape} and no shape was given for it")
                if not self._context.set_input_shape(name, shape):
                    raise TensorRTRunError(f"engine rejected shape {list(shape)} for input {name}" + _said(log))
            for name in [n for n in self.inputs if n not in self._values] + self.outputs:
                shape = tuple(int(d) for d in self._context.get_tensor_shape(name))
                if any(d < 0 for d in shape) and self._values:
                    given = ", ".join(f"{n}={v.tolist()}" for n, v in self._values.items())
                    raise TensorRTRunError(f"output {name} has no shape for the shape tensor values {given}: are "
                                           "they within the profile's min and max?" + _said(log))
                if any(d < 0 for d in shape):
                    raise TensorRTRunError(
                        f"output {name} has a data-dependent shape {shape}; "
                        "engines that need an output allocator are not supported"
                    )
                self._shapes[name] = shape
                nbytes = max(1, self._nbytes(name))
                ptr, size = self._buffers.get(name, (0, 0))
                if size < nbytes:
                    if ptr:
                        self._call(self._rt.cudaFree(ptr), "cudaFree")
                        del self._buffers[name]
                    ptr = int(self._call(self._rt.cudaMalloc(nbytes), "cudaMalloc"))
                    self._buffers[name] = (ptr, nbytes)
                if not self._context.set_tensor_address(name, ptr):
                    raise TensorRTRunError(f"set_tensor_address failed for {name}" + _said(log))

    def _host_input(self, name: str, value: np.ndarray) -> np.ndarray:
        if not self._packed(name):
            return np.ascontiguousarray(value, dtype=self._dtypes[name])
        return np.ascontiguousarray(value).view(np.uint8).reshape(-1)  # already packed by the caller

    def _upload(self, feeds: Feeds) -> list[np.ndarray]:
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise TensorRTRunError(f"missing inputs {missing}; engine inputs: {self.inputs}")
        hosts = {n: self._host_input(n, feeds[n]) for n in self.inputs if n not in self._values}
        wanted = {n: tuple(feeds[n].shape) for n in hosts if not self._packed(n)}
        values = {n: np.ascontiguousarray(feeds[n], dtype=self._dtypes[n]) for n in self._values}
        changed = [n for n, v in values.items() if not np.array_equal(v, self._values[n])]
        self._values.update({n: values[n] for n in changed})  # the next enqueue reads them where they are
        if changed or any(self._shapes.get(n) != s for n, s in wanted.items()):
            self._configure({**{n: self._shapes[n] for n in self.inputs if n in self._shapes}, **wanted})
        kind = self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        for name, host in hosts.items():
            if self._packed(name) and host.nbytes != self._nbytes(name):
                raise TensorRTRunError(
                    f"input {name} ({_type_name(self._types[name])}, shape {list(self._shapes[name])}) takes "
                    f"{self._nbytes(name)} packed bytes, got {host.nbytes}"
                )
            if host.nbytes:
                self._call(
                    self._rt.cudaMemcpyAsync(
                        self._buffers[name][0], host.ctypes.data, host.nbytes, kind, self._stream
                    ),
                    "cudaMemcpyAsync",
                )
        return list(hosts.values())  # keep host memory alive until the stream is synchronized

    def _enqueue_direct(self) -> None:
        with self._logger.capture() as log:
            if not self._context.execute_async_v3(int(self._stream)):
                raise TensorRTRunError("execute_async_v3 failed" + _said(log))

    def _enqueue(self) -> None:
        if not self._cuda_graph:
            self._enqueue_direct()
            return
        if self._graph_exec is None:
            self._capture_graph()
        self._call(self._rt.cudaGraphLaunch(self._graph_exec, self._stream), "cudaGraphLaunch")

    def _capture_graph(self) -> None:
        """Capture one enqueue as a CUDA graph, as trtexec's ``--useCudaGraph`` does: one plain enqueue
        first (TensorRT's lazy setup must not be captured), then begin/enqueue/end capture and instantiate.
        trtexec falls back to plain enqueues when capture fails; here the trial fails instead, so no
        route's samples silently measure something other than what the setting says."""
        self._enqueue_direct()
        self._sync()
        mode = self._rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        self._call(self._rt.cudaStreamBeginCapture(self._stream, mode), "cudaStreamBeginCapture")
        with self._logger.capture() as log:
            enqueued = self._context.execute_async_v3(int(self._stream))
        ended = self._rt.cudaStreamEndCapture(self._stream)
        if not enqueued or ended[0] != self._rt.cudaError_t.cudaSuccess:
            with contextlib.suppress(Exception):
                self._rt.cudaGetLastError()  # clear the capture error, as trtexec does
            raise TensorRTRunError(
                "CUDA graph capture failed: the engine has operations a graph cannot hold" + _said(log),
                "set cuda_graph: false for this job",
            )
        graph = ended[1]
        try:
            self._graph_exec = self._call(self._rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")
        finally:
            self._rt.cudaGraphDestroy(graph)

    def _drop_graph(self) -> None:
        """Forget the captured graph: shapes and addresses it baked in are about to change."""
        if self._graph_exec is not None:
            self._rt.cudaGraphExecDestroy(self._graph_exec)
            self._graph_exec = None

    def _sync(self) -> None:
        self._call(self._rt.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    # -- Runner -----------------------------------------------------------------------------
    def run(self, feeds: Feeds) -> Feeds:
        """One inference; every output copied back to the host as numpy (packed types as uint8 bytes)."""
        self._check_open()
        keep = self._upload(feeds)
        self._enqueue()
        outs: Feeds = {}
        kind = self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name in self.outputs:
            if self._packed(name):
                host = np.empty(self._nbytes(name), dtype=np.uint8)
            else:
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

    def engine_information(self) -> str:
        """The engine inspector's JSON (``EngineInspector.get_engine_information``): the layers' names, and
        their types and tactics where the engine was built at DETAILED profiling verbosity."""
        inspector = self._engine.create_engine_inspector()
        return str(inspector.get_engine_information(self._trt.LayerInformationFormat.JSON) or "")

    def profile_runs(self, feeds: Feeds, profiler: Any, warmup: int, runs: int,
                     after_run: Callable[[], None]) -> list[float]:
        """Wall ms of ``runs`` inferences with ``profiler`` (a ``trt.IProfiler``) attached, each reporting its
        layers' times after its stream synchronized (``enqueue_emits_profile`` off, ``report_to_profiler``;
        ``after_run`` then), after ``warmup`` plain ones. Never a CUDA graph (a replayed graph reports no
        layer). Close this runner afterwards: no timed run may have a profiler attached."""
        self._check_open()
        keep = self._upload(feeds)
        for _ in range(warmup):
            self._enqueue_direct()
        self._sync()
        self._context.profiler = profiler
        self._context.enqueue_emits_profile = False
        walls = []
        for _ in range(runs):
            start = time.perf_counter()
            self._enqueue_direct()
            self._sync()
            walls.append((time.perf_counter() - start) * 1000.0)
            if not self._context.report_to_profiler():
                raise TensorRTRunError("report_to_profiler failed: TensorRT reported no layer times")
            after_run()
        del keep
        return walls

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        """GPU time of each enqueue (or graph launch) between two CUDA events, in ms (``iterations *
        repeats`` samples). The events are created before the timed loop and reused by every repeat."""
        self._check_open()
        keep = self._upload(feeds)
        for _ in range(warmup):
            self._enqueue()
        if self._cuda_graph and self._graph_exec is None:
            self._enqueue()  # captures the graph outside the timed loop
        self._sync()
        samples: list[float] = []
        events: list[tuple[Any, Any]] = []
        try:
            for _ in range(iterations):
                start = self._call(self._rt.cudaEventCreate(), "cudaEventCreate")
                events.append((start, None))
                events[-1] = (start, self._call(self._rt.cudaEventCreate(), "cudaEventCreate"))
            for _ in range(repeats):
                for start, end in events:
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
        """Free the graph, every device buffer and the stream; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._stream is not None:
                self._rt.cudaStreamSynchronize(self._stream)
            self._drop_graph()
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


def _said(capture: Any) -> str:
    """``": <TensorRT's errors>"`` from a logger capture, or "" when it logged none."""
    errors = capture.errors()
    return (": " + "; ".join(errors)) if errors else ""
