"""A fault-injecting backend for isolation tests: the real ONNX Runtime backend plus one knob,
``-fault``, whose values make the worker segfault, hang, raise or emit NaN/Inf at build or run time
(or NaN timings),
and one, ``-sleep_ms``, that adds a fixed delay to every timed run (a landscape with a clear winner);
``-build_ms`` sleeps that long in every build, and ``-costly`` declares a build cost of 50 (``Knob.cost``,
as Inductor's autotuning switches declare theirs) and changes nothing: budget tests.

``-fault=kill-host-once`` kills the process hosting the worker (the Ray worker, under the Ray
executor) the first time any trial uses it, then builds normally: a worker dying mid-trial. It needs
TRT_ROUTES_FAULT_MARKER (a file path that records the first attempt).

With TRT_ROUTES_FAULT_LOADS (a file path), every ``load`` appends a line to that file.

With TRT_ROUTES_FAULT_GATES (a folder), every build first touches ``<folder>/<model stem>.started``;
when ``<folder>/<model stem>.waitfor`` exists, the build then waits (up to a minute) until the file it
names (in that folder) appears: tests order events across workers with files, not sleeps.

It is registered through TRT_ROUTES_BACKENDS (so spawned workers see it too) and exercises the
real subprocess isolation: the crashes are real signals in a real worker process."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from trt_routes.backends.base import BuildSpec, Feeds, time_on_host
from trt_routes.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeRunner
from trt_routes.catalog import Catalog, Knob

FAULTS = ("none", "segv", "abort", "hang", "raise", "nan", "inf", "nan-timing", "slow", "kill-host-once",
          "wrong-at-max", "enospc", "stop-self")  # wrong-at-max: outputs off by 1 at the profile's max shapes;
# enospc: the build fails with "No space left on device" (the machine's failure, not the route's);
# stop-self: the worker stops itself (SIGSTOP), as `kill -STOP` from another terminal would


def kill_host_once() -> None:
    """First call (per marker file): SIGKILL the hosting process (under Ray) and this worker."""
    marker = Path(os.environ["TRT_ROUTES_FAULT_MARKER"])
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # a retry: behave
    os.write(fd, f"{os.getpid()} {os.getppid()}".encode())
    os.close(fd)
    if os.environ.get("TRT_ROUTES_HOST") == "ray":
        os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


GATE_WAIT_S = 60.0


def gate(model_path: str) -> None:
    """Announce this build and wait for the file this model's ``.waitfor`` names (TRT_ROUTES_FAULT_GATES)."""
    folder = os.environ.get("TRT_ROUTES_FAULT_GATES")
    if not folder:
        return
    stem = Path(model_path).stem
    (Path(folder) / f"{stem}.started").touch()
    rule = Path(folder) / f"{stem}.waitfor"
    if not rule.exists():
        return
    wanted = Path(folder) / rule.read_text().strip()
    deadline = time.monotonic() + GATE_WAIT_S
    while not wanted.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gate: {wanted} did not appear within {GATE_WAIT_S:g} s")
        time.sleep(0.01)


class FaultyRunner:
    def __init__(self, inner: OnnxRuntimeRunner, fault: str, sleep_ms: int = 0,
                 max_shapes: dict[str, list[int]] | None = None) -> None:
        self.inner = inner
        self.fault = fault
        self.sleep_ms = sleep_ms
        self.max_shapes = max_shapes or {}

    def run(self, feeds: Feeds) -> Feeds:
        out = self.inner.run(feeds)
        if self.fault == "wrong-at-max" and all(list(np.shape(feeds[n])) == s for n, s in self.max_shapes.items()):
            out = {name: arr + 1.0 for name, arr in out.items()}
        if self.fault in ("nan", "inf"):
            first = sorted(out)[0]
            arr = out[first].copy()
            arr.flat[0] = np.nan if self.fault == "nan" else np.inf
            out[first] = arr
        return out

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        if self.fault == "slow":
            time.sleep(0.5)
        if self.fault == "nan-timing":  # a broken timer: the outputs are fine, the timings are not
            return [float("nan")] * (iterations * repeats)
        if self.sleep_ms:
            delay = self.sleep_ms / 1e3
            return time_on_host(lambda f: (time.sleep(delay), self.inner.run(f)), feeds, warmup, iterations,
                                repeats)
        return self.inner.time(feeds, warmup, iterations, repeats)


class FaultBackend(OnnxRuntimeBackend):
    name = "faulty"

    def catalog(self) -> Catalog:
        base = super().catalog()
        fault = Knob("-fault", FAULTS, "none", "inject a fault into the worker (tests only)", "build")
        sleep = Knob("-sleep_ms", None, "4", "sleep this long in every timed run (tests only)", "runtime")
        build = Knob("-build_ms", None, "0", "sleep this long in every build (tests only)", "build")
        costly = Knob("-costly", ("0", "1"), "0", "declares a build cost of 50x (tests only)", "build", cost=50.0)
        return Catalog(backend=self.name, version=base.version, knobs=(*base.knobs, fault, sleep, build, costly),
                       tuner_version=base.tuner_version)

    def software(self) -> dict[str, str]:
        return {**super().software(), "backend": self.name}

    @staticmethod
    def _split(spec: BuildSpec) -> tuple[BuildSpec, str]:
        route = dict(spec.route)
        fault = route.pop("-fault", "none")
        for option in ("-sleep_ms", "-build_ms", "-costly"):
            route.pop(option, None)
        return replace(spec, route=route), fault

    def build(self, spec: BuildSpec, engine_path: Path) -> str:
        inner, fault = self._split(spec)
        gate(str(spec.model_path))
        time.sleep(int(spec.route.get("-build_ms", "0")) / 1000.0)
        if fault == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "abort":
            ctypes.CDLL(None).abort()
        if fault == "hang":
            time.sleep(3600)
        if fault == "raise":
            raise RuntimeError("injected build failure")
        if fault == "kill-host-once":
            kill_host_once()
        if fault == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device", str(engine_path))
        if fault == "stop-self":
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().build(inner, engine_path)

    def load(self, engine_path: Path, spec: BuildSpec) -> Any:
        loads = os.environ.get("TRT_ROUTES_FAULT_LOADS")
        if loads:  # one line per engine loaded (tests count what a side-by-side re-measurement loads)
            with open(loads, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()} {spec.route.get('-sleep_ms', '4')}\n")
        sleep_ms = int(spec.route.get("-sleep_ms", "4"))
        inner, fault = self._split(spec)
        return FaultyRunner(super().load(engine_path, inner), fault, sleep_ms,
                            {name: dims["max"] for name, dims in spec.profile.items()})
