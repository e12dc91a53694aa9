"""A TensorRT ``ILogger`` that keeps every message, so build errors reach the trial's log and error text."""

from __future__ import annotations

from functools import cache
from typing import Any

ERROR_LEVELS = ("INTERNAL_ERROR", "ERROR")


def severity_name(severity: Any) -> str:
    """``ILogger.Severity.ERROR`` -> "ERROR" (pybind11 enums and Python enums alike)."""
    name = getattr(severity, "name", None)
    if isinstance(name, str):
        return name
    return str(severity).rsplit(".", 1)[-1]


@cache
def _logger_class(trt: Any) -> type:
    base = trt.ILogger

    class CapturingLogger(base):  # type: ignore[misc, valid-type]
        """Records (severity, message) pairs; VERBOSE messages are dropped to keep logs small."""

        def __init__(self) -> None:
            base.__init__(self)
            self.records: list[tuple[str, str]] = []

        def log(self, severity: Any, msg: str) -> None:
            level = severity_name(severity)
            if level != "VERBOSE":
                self.records.append((level, str(msg)))

        def errors(self) -> list[str]:
            return [msg for level, msg in self.records if level in ERROR_LEVELS]

        def text(self) -> str:
            return "\n".join(f"[TRT] [{level}] {msg}" for level, msg in self.records)

    return CapturingLogger


def make_logger(trt: Any) -> Any:
    """A new capturing logger for the imported ``tensorrt`` module ``trt``."""
    return _logger_class(trt)()
