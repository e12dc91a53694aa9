"""A fault-injecting backend for isolation tests: the real ONNX Runtime backend plus one knob,
``-fault``, whose values make the worker segfault, hang, raise or emit NaN/Inf at build or run time.

It is registered through TRT_ROUTES_BACKENDS (so spawned workers see it too) and exercises the
real subprocess isolation: the crashes are real signals in a real worker process."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from trt_routes.backends.base import BuildSpec, Feeds
from trt_routes.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeRunner
from trt_routes.catalog import Catalog, Knob

FAULTS = ("none", "segv", "abort", "hang", "raise", "nan", "inf", "slow")


class FaultyRunner:
    def __init__(self, inner: OnnxRuntimeRunner, fault: str) -> None:
        self.inner = inner
        self.fault = fault

    def run(self, feeds: Feeds) -> Feeds:
        out = self.inner.run(feeds)
        if self.fault in ("nan", "inf"):
            first = sorted(out)[0]
            arr = out[first].copy()
            arr.flat[0] = np.nan if self.fault == "nan" else np.inf
            out[first] = arr
        return out

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        if self.fault == "slow":
            time.sleep(0.5)
        return self.inner.time(feeds, warmup, iterations, repeats)


class FaultBackend(OnnxRuntimeBackend):
    name = "faulty"

    def catalog(self) -> Catalog:
        base = super().catalog()
        fault = Knob("-fault", FAULTS, "none", "inject a fault into the worker (tests only)", "build")
        return Catalog(backend=self.name, version=base.version, knobs=(*base.knobs, fault),
                       tuner_version=base.tuner_version)

    def software(self) -> dict[str, str]:
        return {**super().software(), "backend": self.name}

    @staticmethod
    def _split(spec: BuildSpec) -> tuple[BuildSpec, str]:
        route = dict(spec.route)
        fault = route.pop("-fault", "none")
        return replace(spec, route=route), fault

    def build(self, spec: BuildSpec, engine_path: Path) -> str:
        inner, fault = self._split(spec)
        if fault == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "abort":
            ctypes.CDLL(None).abort()
        if fault == "hang":
            time.sleep(3600)
        if fault == "raise":
            raise RuntimeError("injected build failure")
        return super().build(inner, engine_path)

    def load(self, engine_path: Path, spec: BuildSpec) -> Any:
        inner, fault = self._split(spec)
        return FaultyRunner(super().load(engine_path, inner), fault)
