"""What native code writes to file descriptor 2 (ONNX Runtime's and TensorRT's C++ loggers bypass
sys.stderr): captured around a block, terminal control stripped, one line per item. The ONNX Runtime
backend captures a build's log this way; the worker captures a whole task's and appends it to the trial's
log. Captures nest (an inner one restores the outer sink) and are serialized between threads."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from trt_routes.text import sanitize

_LOCK = threading.RLock()  # fd 2 is one per process; the same thread may nest captures


@contextmanager
def captured_fd2() -> Iterator[list[str]]:
    """Yield a list that holds, once the block ends, every non-empty line written to fd 2 inside it."""
    lines: list[str] = []
    with _LOCK, tempfile.TemporaryFile(mode="w+b") as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sanitize(sink.read().decode("utf-8", errors="replace"))
            lines.extend(line for line in text.splitlines() if line.strip())
