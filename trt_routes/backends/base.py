"""The backend contract: catalog, signature, build, load + run, reference.

Coordinator side (``available``, ``catalog``, ``software``, ``supports``) must be cheap and must
not need hardware beyond what it reports. Worker side (``build``, ``load``, ``reference``) runs
only inside an isolated worker process (``trt_routes.execute``)."""

from __future__ import annotations

__all__ = [
    "SPARE_CPUS_VAR", "Backend", "BuildSpec", "Feeds", "Runner", "SettingError", "parse_cpu_list",
    "start_on_spare_cpus", "time_on_host",
]

import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from trt_routes.catalog import Catalog
from trt_routes.errors import TrtRoutesError

if TYPE_CHECKING:  # the coordinator's commands import this module; only workers need numpy
    import numpy as np

    from trt_routes.evidence.layers import LayerProfile

Feeds = dict[str, "np.ndarray"]


@dataclass(frozen=True)
class BuildSpec:
    """What a backend needs to build and run one route of one job (picklable, no manifest)."""

    model_path: str
    route: dict[str, str]  # knob -> value, non-default knobs only (canonical route as a dict)
    profile: dict[str, dict[str, list[int]]]  # input -> {"min","opt","max"}; static inputs repeat one shape
    settings: dict[str, Any] = field(default_factory=dict)  # backend build settings from the manifest
    target: dict[str, Any] = field(default_factory=dict)  # the Target as data, plus the matched device
    work_dir: str = ""  # scratch folder for this trial
    #: "module:factory" for a model given as a Python entry point (``model_path`` is then the folder the
    #: module is imported from); "" for a model file.
    entry: str = ""
    #: Input generation specs by name: {"dtype", "low", "high", "shape"} (the manifest's ``inputs``).
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The job's shape profile name (``models.<m>.shapes.<name>``); "" where there is none.
    shape: str = ""

    @property
    def opt_shapes(self) -> dict[str, list[int]]:
        return {name: dims["opt"] for name, dims in self.profile.items()}


class Runner(Protocol):
    """A loaded engine."""

    def run(self, feeds: Feeds) -> Feeds:
        """One inference; returns every output by name."""
        ...

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        """Per-iteration latencies in milliseconds (``iterations * repeats`` samples)."""
        ...


def time_on_host(run: Any, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
    """Wall-clock timing with perf_counter for backends that run synchronously on the host."""
    for _ in range(warmup):
        run(feeds)
    samples: list[float] = []
    for _ in range(repeats):
        for _ in range(iterations):
            t0 = time.perf_counter()
            run(feeds)
            samples.append((time.perf_counter() - t0) * 1e3)
    return samples


#: Set by the local executor for GPU workers side by side: the cores (``0-15,32``) that helper processes a
#: backend starts (Inductor's compile pool) may spread over, at the lowest priority (``start_on_spare_cpus``).
SPARE_CPUS_VAR = "TRT_ROUTES_SPARE_CPUS"


def parse_cpu_list(text: str) -> frozenset[int]:
    """``"0-3,8"`` -> {0, 1, 2, 3, 8} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus)


def start_on_spare_cpus(start: Any) -> None:
    """Call ``start()`` (which starts helper processes) from a thread bound to the cores ``SPARE_CPUS_VAR``
    names, at the lowest CPU priority; without it, or where the OS cannot, just call it. Processes it
    starts inherit that thread's cores and priority: a worker's compile pool then uses any core the other
    workers leave idle yet yields at once to their timed runs, while this worker's own thread stays on
    its own cores at normal priority."""
    spare = os.environ.get(SPARE_CPUS_VAR, "")
    if not spare or not hasattr(os, "sched_setaffinity"):
        start()
        return
    failure: list[BaseException] = []

    def bound() -> None:
        try:
            try:
                os.sched_setaffinity(0, parse_cpu_list(spare))  # this thread only
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            except (OSError, ValueError):
                pass  # not allowed here: start them as this worker is
            start()
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=bound, name="trt-routes-spare-cpus")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


class Backend(ABC):
    """A compiler with knobs. Subclasses are registered in ``trt_routes.backends.registry``."""

    name: ClassVar[str]
    #: File suffix of engines this backend writes (".onnx", ".engine", ".pt2").
    engine_suffix: ClassVar[str]
    #: How to install what this backend needs.
    install_hint: ClassVar[str]
    #: True when building the same route on the same signature gives the same engine bytes, so
    #: ``apply --frozen`` can verify a rebuild by digest (TensorRT engines are not bit-reproducible).
    reproducible_engines: ClassVar[bool] = False
    #: True when a loaded engine keeps taking CPU after its runs (ONNX Runtime's intra-op threads spin for
    #: tens of milliseconds), so engines kept loaded side by side slow each other: the side-by-side
    #: re-measurement then loads each turn's engine afresh and releases it after the turn
    #: (``trt_routes.execute.remeasure``).
    reload_each_turn: ClassVar[bool] = False
    #: False where timings do not come from running on this host (the replay backend draws them from a file):
    #: no load is read while they are taken, so no busy-host warning or refusal applies to them.
    host_timed: ClassVar[bool] = True

    def engine_identity(self, engine: Path) -> str | None:
        """What every build of one route on one signature shares, where the engine bytes do not (ONNX
        Runtime: the optimized graph's structure, names ignored); None where only the bytes can say."""
        return None

    # -- coordinator side -------------------------------------------------------------------
    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when usable here, else a one-line reason (the install hint is added by callers)."""

    @abstractmethod
    def catalog(self) -> Catalog:
        """Every knob with its default; cached by the backend."""

    @abstractmethod
    def software(self) -> dict[str, str]:
        """Software signature fields (backend name and version, tuner version, ...)."""

    def supports(self, target: Mapping[str, Any]) -> str | None:
        """None when this backend can build for ``target`` (a Target as data), else why not."""
        return None

    def reported_facts(self, target: Mapping[str, Any]) -> frozenset[str]:
        """Facts (``trt_routes.evidence.facts``) this backend's runners report themselves on ``target`` (a runner's
        ``facts()``), beyond what the worker measures; validation lets objectives use them anywhere."""
        return frozenset()

    # -- worker side ------------------------------------------------------------------------
    @abstractmethod
    def build(self, spec: BuildSpec, engine_path: Path) -> str:
        """Build ``spec.route`` and write the engine to ``engine_path``; return the build log.

        Raise any exception for a build error; its text becomes the trial's error."""

    @abstractmethod
    def load(self, engine_path: Path, spec: BuildSpec) -> Runner:
        """Load an engine built by ``build`` (runtime knobs of ``spec.route`` applied)."""

    def profile(self, engine_path: Path, spec: BuildSpec, feeds: Feeds) -> LayerProfile:
        """Where the engine spends its time, layer by layer (``trt_routes.evidence.layers``): runs of its own,
        never a timed run's. Default: this backend has no profiler (TrtRoutesError says so)."""
        raise TrtRoutesError(f"backend {self.name} gives no layer profile",
                             "explain --layers works for the onnxruntime, onnxruntime-cuda, torch-inductor and "
                             "tensorrt backends")

    def warm_up(self, spec: BuildSpec) -> None:
        """Do in a fresh worker, ahead of its first task, what that task would otherwise pay for (import
        the compiler, create the device context, start compile pools). Optional; default: nothing."""
        return

    @abstractmethod
    def reference(self, spec: BuildSpec, feeds: Feeds) -> Feeds:
        """Reference outputs for ``feeds``: a plain float32 run at the lowest optimization."""

    def reference_version(self) -> str:
        """Identifies how ``reference`` computes outputs (enters the reference cache key)."""
        return f"{self.name}:{self.software().get('backend_version', '')}"

    # -- optional hooks (defaults suit backends that build model files) -------------------------
    #: Where models may come from: "path" (a model file) and/or "entry" (a Python ``module:factory``).
    model_sources: ClassVar[frozenset[str]] = frozenset({"path"})

    def engine_suffix_for(self, settings: Mapping[str, Any]) -> str:
        """The suffix of engines built with ``settings`` (for backends whose artifact depends on one)."""
        return self.engine_suffix

    def check_job(self, spec: BuildSpec, options: Sequence[str]) -> None:
        """Validate-time check of one job (no build): its settings, target and the knobs its switch group
        names (``options``). Raise SettingError or RouteError (naming the knob); default: accept all."""
        return

    def serving(self, route: Mapping[str, str], settings: Mapping[str, Any], engine: str) -> dict[str, Any] | None:
        """What a serving process must set to run ``engine`` (a locked engine's path) as ``route`` was
        measured (``lock show``): runtime options that live outside the engine's bytes, with a snippet to
        paste under ``"python"``. None where the engine carries everything (or the backend has its own
        command: TensorRT's ``lock show --trtexec``). RouteError on a route the backend does not have."""
        return None

    def presets(self) -> tuple[str, ...]:
        """Names of the baselines this backend can expand (``baseline: {preset: NAME}``); none by default:
        there, the baseline is the default route or a route the manifest spells out."""
        return ()

    def preset(self, name: str, spec: BuildSpec) -> dict[str, str]:
        """The route (``{option: value}``) preset ``name`` means for the job ``spec``. RouteError when the
        backend has no such preset."""
        from trt_routes.errors import RouteError

        known = ", ".join(self.presets()) or "none"
        raise RouteError(f"backend {self.name} has no preset '{name}' (presets: {known})",
                         "give the baseline as 'route: -knob=value ...', or leave it out (the default route)")

    def model_digest(self, spec: BuildSpec) -> str:
        """Digest of an ``entry`` model for ``spec`` (code and weights); backends taking entries override it.

        Raise SettingError (setting None) when the entry cannot be loaded."""
        raise NotImplementedError(f"backend {self.name} does not take Python entry points")


class SettingError(TrtRoutesError):
    """A job's settings or model source do not fit the backend; ``setting`` names the offending setting
    (None: the model itself), so the manifest error can point at it."""

    def __init__(self, setting: str | None, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.setting = setting


class InputMismatch(SettingError):
    """The manifest's inputs (profile names, shapes, dtypes) do not match what the model takes: a manifest
    error at the model's ``shapes`` (validate and plan refuse it), not a job that cannot run here."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(None, message, hint)
