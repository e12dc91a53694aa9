"""The one TensorRT ``ILogger`` of the process, and captures that give each build or run its own messages.

TensorRT treats the logger as a process-wide singleton (the ILogger docs of TensorRT 7-8: "multiple
instances of IRuntime and/or IBuilder must all use the same logger"; Polygraphy keeps one global logger),
so every Builder, Runtime and parser gets the same object. A build or a run opens a ``capture()`` and
reads its own errors from it; messages logged while nothing captures go to a short ``background`` list."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from functools import cache
from types import ModuleType
from typing import Any

from trt_routes.backends.tensorrt.process import process_state

ERROR_LEVELS = ("INTERNAL_ERROR", "ERROR")
BACKGROUND_KEPT = 200


def severity_name(severity: Any) -> str:
    """``ILogger.Severity.ERROR`` -> "ERROR" (pybind11 enums and Python enums alike)."""
    name = getattr(severity, "name", None)
    if isinstance(name, str):
        return name
    return str(severity).rsplit(".", 1)[-1]


class Capture:
    """The (severity, message) pairs TensorRT logged while one capture was open."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str]] = []

    def errors(self) -> list[str]:
        return [msg for level, msg in self.records if level in ERROR_LEVELS]

    def text(self) -> str:
        return "\n".join(f"[TRT] [{level}] {msg}" for level, msg in self.records)


@cache
def _logger_class(trt: Any) -> type:
    base = trt.ILogger

    class CapturingLogger(base):  # type: ignore[misc, valid-type]
        """Hands each message to every open capture; VERBOSE messages are dropped to keep logs small.

        TensorRT may log from its own threads (the ILogger contract asks for thread safety): a lock guards
        the captures, and a capture sees messages from every thread while it is open."""

        def __init__(self) -> None:
            base.__init__(self)
            self._lock = threading.Lock()
            self._open: list[Capture] = []
            self.background: deque[tuple[str, str]] = deque(maxlen=BACKGROUND_KEPT)

        def log(self, severity: Any, msg: str) -> None:
            level = severity_name(severity)
            if level == "VERBOSE":
                return
            with self._lock:
                if self._open:
                    for capture in self._open:
                        capture.records.append((level, str(msg)))
                elif level != "INFO":
                    self.background.append((level, str(msg)))

        @contextlib.contextmanager
        def capture(self) -> Iterator[Capture]:
            """Collect the messages logged inside the ``with`` block (nested captures each get them)."""
            found = Capture()
            with self._lock:
                self._open.append(found)
            try:
                yield found
            finally:
                with self._lock:
                    self._open.remove(found)

    return CapturingLogger


_CREATE = threading.Lock()


def process_logger(trt: ModuleType) -> Any:
    """The capturing logger of this process for the imported ``tensorrt`` module ``trt`` (made once, kept
    in the module's ``process_state`` beside its runtime)."""
    state = process_state(trt)
    with _CREATE:
        if state.logger is None:
            state.logger = _logger_class(trt)()
        return state.logger
