"""A self-describing task that writes to file descriptor 2 the way native backend code does (os.write, with
ANSI colour codes, bypassing sys.stderr), then succeeds: the worker must capture it into the result's log."""

from __future__ import annotations

import os
from dataclasses import dataclass

from trt_routes.execute.tasks import TaskResult


@dataclass(frozen=True)
class NativeStderrProbe:
    text: str = "\x1b[1;31m2025-01-01 [W:onnxruntime:, graph.cc:42] a native warning\x1b[m\n"

    def execute(self) -> TaskResult:
        os.write(2, self.text.encode())
        return TaskResult(status="ok", log="built")
