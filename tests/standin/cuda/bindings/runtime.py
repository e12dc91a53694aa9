"""STAND-IN for tests of cuda-python's CUDA runtime bindings (``cuda.bindings.runtime``), host memory only.

It mirrors the call convention of cuda-python (every function returns a tuple whose first item is a
``cudaError_t``) for the subset trt-routes uses: cudaMalloc/cudaFree, cudaMemcpy(Async), streams, events
with cudaEventElapsedTime, device count/properties and versions. "Device" memory is ordinary host
memory (ctypes buffers) whose addresses behave as device pointers, so the stand-in TensorRT module can
read and write it. Stream capture records what the stand-in TensorRT enqueues on a capturing stream into a
graph (nothing runs until ``cudaGraphLaunch``), as CUDA does.
Sources: the cuda-python API reference (cuda.bindings.runtime) and the CUDA Runtime
API docs. Tests may edit DEVICES (e.g. empty it: no GPU) and inspect ``live_allocations()``."""

from __future__ import annotations

import ctypes
import time
from enum import IntEnum
from typing import Any


class cudaError_t(IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInvalidDevicePointer = 17
    cudaErrorInvalidDevice = 101
    cudaErrorNoDevice = 100
    cudaErrorInvalidResourceHandle = 400
    cudaErrorNotReady = 600
    cudaErrorStreamCaptureInvalidated = 901


class cudaMemcpyKind(IntEnum):
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3
    cudaMemcpyDefault = 4


class cudaStreamCaptureMode(IntEnum):
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


class _Handle:
    _next = 0x1000

    def __init__(self) -> None:
        _Handle._next += 16
        self._value = _Handle._next

    def __int__(self) -> int:
        return self._value

    def getPtr(self) -> int:
        return self._value


class cudaStream_t(_Handle):
    pass


class cudaEvent_t(_Handle):
    def __init__(self) -> None:
        super().__init__()
        self.recorded_ns: int | None = None


class cudaGraph_t(_Handle):
    def __init__(self, work: list[Any] | None = None) -> None:
        super().__init__()
        self.work = list(work or [])


class cudaGraphExec_t(_Handle):
    def __init__(self, work: list[Any] | None = None) -> None:
        super().__init__()
        self.work = list(work or [])


class cudaDeviceProp:
    def __init__(self, **fields: Any) -> None:
        self.name: bytes = fields["name"]
        self.major: int = fields["major"]
        self.minor: int = fields["minor"]
        self.multiProcessorCount: int = fields["multiProcessorCount"]
        self.totalGlobalMem: int = fields["totalGlobalMem"]


#: Visible devices; a test empties it to model a machine without a GPU.
DEVICES: list[dict[str, Any]] = [
    {
        "name": b"NVIDIA H200",
        "major": 9,
        "minor": 0,
        "multiProcessorCount": 132,
        "totalGlobalMem": 150_109_880_320,
    },
]
RUNTIME_VERSION = 12080
DRIVER_VERSION = 12080

_allocations: dict[int, Any] = {}
_streams: set[int] = set()
_events: dict[int, cudaEvent_t] = {}
_current_device = 0
_captures: dict[int, list[Any] | None] = {}  # stream -> recorded work (None: capture invalidated)
_graphs: set[int] = set()
_graph_execs: set[int] = set()
_last_error = cudaError_t.cudaSuccess


def live_allocations() -> dict[int, int]:
    """Device pointer -> size of every allocation not yet freed (for leak checks in tests)."""
    return {ptr: ctypes.sizeof(buf) for ptr, buf in _allocations.items()}


def _address(obj: Any) -> int:
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "ctypes"):  # numpy arrays
        return int(obj.ctypes.data)
    return int(obj)


def _is_device_range(ptr: int, count: int) -> bool:
    return any(base <= ptr and ptr + count <= base + ctypes.sizeof(buf) for base, buf in _allocations.items())


def cudaGetDeviceCount() -> tuple[cudaError_t, int]:
    if not DEVICES:
        return cudaError_t.cudaErrorNoDevice, 0
    return cudaError_t.cudaSuccess, len(DEVICES)


def cudaGetDeviceProperties(device: int) -> tuple[cudaError_t, cudaDeviceProp | None]:
    if not 0 <= device < len(DEVICES):
        return cudaError_t.cudaErrorInvalidDevice, None
    return cudaError_t.cudaSuccess, cudaDeviceProp(**DEVICES[device])


def cudaSetDevice(device: int) -> tuple[cudaError_t]:
    global _current_device
    if not 0 <= device < len(DEVICES):
        return (cudaError_t.cudaErrorInvalidDevice,)
    _current_device = device
    return (cudaError_t.cudaSuccess,)


def cudaGetDevice() -> tuple[cudaError_t, int]:
    return cudaError_t.cudaSuccess, _current_device


def cudaRuntimeGetVersion() -> tuple[cudaError_t, int]:
    return cudaError_t.cudaSuccess, RUNTIME_VERSION


def cudaDriverGetVersion() -> tuple[cudaError_t, int]:
    return cudaError_t.cudaSuccess, DRIVER_VERSION if DEVICES else 0


def cudaMalloc(size: int) -> tuple[cudaError_t, int]:
    if not DEVICES:
        return cudaError_t.cudaErrorNoDevice, 0
    if size <= 0:
        return cudaError_t.cudaErrorInvalidValue, 0
    buf = ctypes.create_string_buffer(size)
    ptr = ctypes.addressof(buf)
    _allocations[ptr] = buf
    return cudaError_t.cudaSuccess, ptr


def cudaFree(devPtr: int) -> tuple[cudaError_t]:
    if _allocations.pop(_address(devPtr), None) is None:
        return (cudaError_t.cudaErrorInvalidDevicePointer,)
    return (cudaError_t.cudaSuccess,)


def cudaMemcpy(dst: Any, src: Any, count: int, kind: cudaMemcpyKind) -> tuple[cudaError_t]:
    d, s = _address(dst), _address(src)
    if kind == cudaMemcpyKind.cudaMemcpyHostToDevice and not _is_device_range(d, count):
        return (cudaError_t.cudaErrorInvalidValue,)
    if kind == cudaMemcpyKind.cudaMemcpyDeviceToHost and not _is_device_range(s, count):
        return (cudaError_t.cudaErrorInvalidValue,)
    if kind == cudaMemcpyKind.cudaMemcpyDeviceToDevice and not (
        _is_device_range(d, count) and _is_device_range(s, count)
    ):
        return (cudaError_t.cudaErrorInvalidValue,)
    ctypes.memmove(d, s, count)
    return (cudaError_t.cudaSuccess,)


def cudaMemcpyAsync(
    dst: Any, src: Any, count: int, kind: cudaMemcpyKind, stream: cudaStream_t | int
) -> tuple[cudaError_t]:
    if int(stream) != 0 and int(stream) not in _streams:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    return cudaMemcpy(dst, src, count, kind)


def cudaStreamCreate() -> tuple[cudaError_t, cudaStream_t]:
    stream = cudaStream_t()
    _streams.add(int(stream))
    return cudaError_t.cudaSuccess, stream


def cudaStreamSynchronize(stream: cudaStream_t | int) -> tuple[cudaError_t]:
    ok = int(stream) == 0 or int(stream) in _streams
    return (cudaError_t.cudaSuccess if ok else cudaError_t.cudaErrorInvalidResourceHandle,)


def cudaStreamDestroy(stream: cudaStream_t) -> tuple[cudaError_t]:
    if int(stream) not in _streams:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    _streams.discard(int(stream))
    return (cudaError_t.cudaSuccess,)


def live_streams() -> int:
    return len(_streams)


def cudaEventCreate() -> tuple[cudaError_t, cudaEvent_t]:
    event = cudaEvent_t()
    _events[int(event)] = event
    return cudaError_t.cudaSuccess, event


def cudaEventRecord(event: cudaEvent_t, stream: cudaStream_t | int) -> tuple[cudaError_t]:
    if int(event) not in _events or (int(stream) != 0 and int(stream) not in _streams):
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    event.recorded_ns = time.perf_counter_ns()
    return (cudaError_t.cudaSuccess,)


def cudaEventSynchronize(event: cudaEvent_t) -> tuple[cudaError_t]:
    return (cudaError_t.cudaSuccess if int(event) in _events else cudaError_t.cudaErrorInvalidResourceHandle,)


def cudaEventElapsedTime(start: cudaEvent_t, end: cudaEvent_t) -> tuple[cudaError_t, float]:
    if start.recorded_ns is None or end.recorded_ns is None:
        return cudaError_t.cudaErrorInvalidResourceHandle, 0.0
    return cudaError_t.cudaSuccess, (end.recorded_ns - start.recorded_ns) / 1e6


def cudaEventDestroy(event: cudaEvent_t) -> tuple[cudaError_t]:
    if _events.pop(int(event), None) is None:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    return (cudaError_t.cudaSuccess,)


def live_events() -> int:
    return len(_events)


# -- stream capture and graphs ----------------------------------------------------------------------------
def _capture_of(stream: Any) -> list[Any] | None:
    """Stand-in hook for the stand-in TensorRT: the work list of a capturing stream, else None."""
    return _captures.get(int(stream)) if int(stream) in _captures else None


def _invalidate_capture(stream: Any) -> None:
    """Stand-in hook: an operation not permitted under capture was enqueued on ``stream``."""
    global _last_error
    if int(stream) in _captures:
        _captures[int(stream)] = None
        _last_error = cudaError_t.cudaErrorStreamCaptureInvalidated


def _is_capturing(stream: Any) -> bool:
    return int(stream) in _captures


def cudaStreamBeginCapture(stream: cudaStream_t, mode: cudaStreamCaptureMode) -> tuple[cudaError_t]:
    if int(stream) not in _streams or int(stream) in _captures:
        return (cudaError_t.cudaErrorInvalidValue,)
    _captures[int(stream)] = []
    return (cudaError_t.cudaSuccess,)


def cudaStreamEndCapture(stream: cudaStream_t) -> tuple[cudaError_t, cudaGraph_t | None]:
    if int(stream) not in _captures:
        return cudaError_t.cudaErrorInvalidValue, None
    work = _captures.pop(int(stream))
    if work is None:
        return cudaError_t.cudaErrorStreamCaptureInvalidated, None
    graph = cudaGraph_t(work)
    _graphs.add(int(graph))
    return cudaError_t.cudaSuccess, graph


def cudaGraphInstantiate(graph: cudaGraph_t, flags: int) -> tuple[cudaError_t, cudaGraphExec_t | None]:
    if int(graph) not in _graphs:
        return cudaError_t.cudaErrorInvalidValue, None
    graph_exec = cudaGraphExec_t(graph.work)
    _graph_execs.add(int(graph_exec))
    return cudaError_t.cudaSuccess, graph_exec


def cudaGraphLaunch(graphExec: cudaGraphExec_t, stream: cudaStream_t | int) -> tuple[cudaError_t]:
    if int(graphExec) not in _graph_execs or (int(stream) != 0 and int(stream) not in _streams):
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    for step in graphExec.work:
        if not step():
            return (cudaError_t.cudaErrorInvalidValue,)
    return (cudaError_t.cudaSuccess,)


def cudaGraphDestroy(graph: cudaGraph_t) -> tuple[cudaError_t]:
    if int(graph) not in _graphs:
        return (cudaError_t.cudaErrorInvalidValue,)
    _graphs.discard(int(graph))
    return (cudaError_t.cudaSuccess,)


def cudaGraphExecDestroy(graphExec: cudaGraphExec_t) -> tuple[cudaError_t]:
    if int(graphExec) not in _graph_execs:
        return (cudaError_t.cudaErrorInvalidValue,)
    _graph_execs.discard(int(graphExec))
    return (cudaError_t.cudaSuccess,)


def cudaGetLastError() -> tuple[cudaError_t]:
    global _last_error
    error, _last_error = _last_error, cudaError_t.cudaSuccess
    return (error,)


def live_graphs() -> int:
    """Graphs and executable graphs not yet destroyed (for leak checks in tests)."""
    return len(_graphs) + len(_graph_execs)
