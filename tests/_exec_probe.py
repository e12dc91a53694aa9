"""A self-describing task for executor tests: reports the environment, CPU affinity and pid of the
worker process that ran it (optionally after sleeping, to overlap with other tasks), or fails."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from trt_routes.backends.base import BuildSpec
from trt_routes.execute.tasks import TaskResult

VARS = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TRT_ROUTES_CPU_THREADS",
        "TRT_ROUTES_HOST")


def spec_for(device: dict[str, str] | None) -> BuildSpec:
    return BuildSpec(model_path="", route={}, profile={}, target={"device": device} if device else {})


@dataclass(frozen=True)
class EnvProbe:
    spec: BuildSpec = field(default_factory=lambda: spec_for(None))
    sleep_s: float = 0.0
    label: str = ""
    status: str = "ok"  # what the probe reports ("build-error": a failure that replaces its worker)
    segfault: bool = False  # the worker dies with SIGSEGV instead

    def execute(self) -> TaskResult:
        start = time.time()
        time.sleep(self.sleep_s)
        if self.segfault:
            os.kill(os.getpid(), signal.SIGSEGV)
        meta: dict[str, Any] = {
            "pid": os.getpid(), "label": self.label, "start": start, "end": time.time(),
            "env": {k: os.environ.get(k) for k in VARS},
            "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [],
        }
        return TaskResult(status=self.status, meta=meta)


@dataclass(frozen=True)
class ModulesProbe:
    """Reports which of ``names`` the worker process has imported (``meta["loaded"]``) and its pid."""

    names: tuple[str, ...]
    spec: BuildSpec = field(default_factory=lambda: spec_for(None))

    def execute(self) -> TaskResult:
        import sys

        return TaskResult(status="ok", meta={"loaded": [n for n in self.names if n in sys.modules],
                                             "pid": os.getpid()})
