"""The ``replay`` backend: serves builds and measurements from a recorded landscape file, no hardware.

Set ``TRT_ROUTES_LANDSCAPE`` to a ``trt-routes/landscape@1`` file (``trt_routes.backends.landscape``) or a
generative ``trt-routes/landscape@2`` file (``trt_routes.backends.landscape_model``); its knobs are the catalog.
Point the model's ``path`` at the same file, so the model digest changes with it. A route's
recorded status is replayed: ``build-error`` raises, ``crashed`` (and any route absent from the file)
kills the worker, ``timeout`` hangs until the trial's time limit, ``accuracy-failed`` returns NaN outputs.
Timing samples are drawn as seeded blocks of recorded samples (@1) or from the model (@2, the profile named
like the job's shape profile): build setting ``replay_seed`` (default 0) picks the world, so one seed always
gives the same trials."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from trt_routes.backends.base import Backend, BuildSpec, Feeds, SettingError
from trt_routes.backends.landscape import Landscape, LandscapeRoute, load_any, route_seed
from trt_routes.backends.landscape_model import ModelLandscape
from trt_routes.catalog import Catalog
from trt_routes.errors import TrtRoutesError
from trt_routes.evidence import TrialStatus

ENV_VAR = "TRT_ROUTES_LANDSCAPE"
OUTPUT = "y"
_SIZE = 256


def reference_output() -> np.ndarray:
    """The replayed model's one output for any input: pairs of equal small values 0.01, 0.01, 0.0103, ...

    Small values leave room for the cosine losses that float32 rounding gives real models."""
    return np.repeat(0.01 * (1.0 + np.arange(_SIZE // 2) / (_SIZE // 2)), 2)


def output_with_losses(losses: Mapping[str, float | None]) -> np.ndarray:
    """An output whose ``lInf`` against ``reference_output()`` is the recorded one and whose ``cos`` loss
    matches the recorded one where both can hold at once (cos is capped at what lInf allows otherwise).
    A missing (non-finite) loss gives NaN outputs. Other metrics follow from the constructed difference.

    The difference is ``s * y`` (scaling changes no angle; its largest element is exactly lInf) plus
    ``a * v``, ``v`` orthogonal to ``y`` (opposite signs on pairs of equal values) and sized so that no
    element's difference exceeds lInf for ``0 <= a <= 1``; ``a`` is found by bisection."""
    y = reference_output()
    if any(v is None or not math.isfinite(v) for v in losses.values()):
        return np.full_like(y, np.nan)
    linf = float(losses.get("lInf", 0.0) or 0.0)
    cos = float(losses.get("cos", 0.0) or 0.0)
    scaled = y * (1.0 + linf / float(y.max()))
    sign = np.tile([1.0, -1.0], _SIZE // 2)
    v = sign * (linf - (scaled - y)) if linf > 0 else sign * float(y.min())

    def cos_loss(a: float) -> float:
        out = scaled + a * v
        return 1.0 - float(np.dot(out, y) / (np.linalg.norm(out) * np.linalg.norm(y)))

    if cos <= 0.0:
        return scaled
    if cos_loss(1.0) <= cos:
        return scaled + v
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cos_loss(mid) < cos else (lo, mid)
    return scaled + hi * v


def _route_text(route: Mapping[str, str]) -> str:
    return " ".join(f"{k}={route[k]}" for k in sorted(route))


class ReplayRunner:
    """A "loaded engine" of one recorded route: outputs from its losses, timings from its samples."""

    def __init__(self, recorded: LandscapeRoute, seed: int) -> None:
        self.recorded = recorded
        self.seed = seed
        self.calls = 0
        self.output = output_with_losses(recorded.losses)

    def run(self, feeds: Feeds) -> Feeds:
        if self.recorded.status == TrialStatus.ACCURACY_FAILED:
            return {OUTPUT: np.full(_SIZE, np.nan)}
        return {OUTPUT: self.output.copy()}

    def facts(self) -> dict[str, float]:
        """The route's recorded facts (memory, engine size, energy): the backend's own accounting."""
        return dict(self.recorded.facts)

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        """Blocks of recorded samples; each call draws anew, deterministically per (seed, route, call)."""
        self.calls += 1
        rng = np.random.default_rng(route_seed(self.seed, self.recorded.route, iterations, repeats, self.calls))
        samples = self.recorded.samples_ms
        n = len(samples)
        starts = rng.integers(0, n, size=repeats)
        return [float(samples[(s + i) % n]) for s in starts for i in range(iterations)]


class ModelRunner:
    """A "loaded engine" of one route of a ``landscape@2``: reference outputs (NaN when accuracy-failed),
    samples drawn from the model, anew per call, deterministically per (seed, route, profile, call)."""

    def __init__(self, land: ModelLandscape, route: str, profile: str, seed: int) -> None:
        self.land, self.route, self.profile, self.seed = land, route, profile, seed
        self.failed = land.status(route) == TrialStatus.ACCURACY_FAILED
        self.calls = 0

    def run(self, feeds: Feeds) -> Feeds:
        return {OUTPUT: np.full(_SIZE, np.nan) if self.failed else reference_output()}

    def facts(self) -> dict[str, float]:
        return {}

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        self.calls += 1
        rng = np.random.default_rng(route_seed(self.seed, self.route, self.profile, iterations, repeats, self.calls))
        return self.land.samples(self.route, self.profile, iterations, repeats, rng)


class ReplayBackend(Backend):
    """Replays a landscape file (see the module docstring)."""

    name: ClassVar[str] = "replay"
    engine_suffix: ClassVar[str] = ".replay.json"
    install_hint: ClassVar[str] = f"set {ENV_VAR}=path/to/landscape.json (a trt-routes/landscape@1 or @2 file)"
    host_timed: ClassVar[bool] = False  # its samples are drawn from the file

    def __init__(self) -> None:
        self._landscapes: dict[str, Landscape | ModelLandscape] = {}

    def landscape(self, path: str | None = None) -> Landscape | ModelLandscape:
        """The landscape at ``path`` (default: ``$TRT_ROUTES_LANDSCAPE``), read once per process."""
        path = path or os.environ.get(ENV_VAR, "")
        if not path:
            raise TrtRoutesError(f"the replay backend needs {ENV_VAR}", self.install_hint)
        key = os.path.abspath(path)
        if key not in self._landscapes:
            self._landscapes[key] = load_any(key)
        return self._landscapes[key]

    def _for(self, spec: BuildSpec) -> Landscape | ModelLandscape:
        if spec.model_path.endswith(".json"):
            return self.landscape(spec.model_path)
        return self.landscape()

    # -- coordinator side -------------------------------------------------------------------
    def unavailable_reason(self) -> str | None:
        """Unset or missing: the backend cannot run here. A file that is there but wrong is the manifest's error
        (``catalog``, ``check_job``), not a missing install."""
        path = os.environ.get(ENV_VAR, "")
        if not path:
            return f"the replay backend needs {ENV_VAR}"
        if not os.path.isfile(path):
            return f"{ENV_VAR}={path}: no such file"
        return None

    def _checked(self, path: str | None = None) -> Landscape | ModelLandscape:
        try:
            return self.landscape(path)
        except TrtRoutesError as exc:
            raise SettingError(None, exc.message, exc.hint or "fix the landscape file (docs/search-at-scale.md)") \
                from None

    def catalog(self) -> Catalog:
        return self._checked().catalog

    def check_job(self, spec: BuildSpec, options: Sequence[str]) -> None:
        """The model's landscape file reads, is the one ``$TRT_ROUTES_LANDSCAPE`` names (the catalog and the
        signature come from that one), and a ``landscape@2`` model has a profile for the job's shape."""
        if not spec.model_path.endswith(".json"):
            return
        land = self._checked(spec.model_path)
        if land.digest != self._checked().digest:
            raise SettingError(None, f"{spec.model_path} is not the landscape {ENV_VAR} names "
                               f"({os.environ.get(ENV_VAR)}): the catalog would come from one, the trials from "
                               "the other",
                               f"point {ENV_VAR} and the model's path at the same file")
        if isinstance(land, ModelLandscape):
            try:
                land.profile_name(spec.shape)
            except TrtRoutesError as exc:
                raise SettingError(None, exc.message, exc.hint) from None

    def reported_facts(self, target: Mapping[str, Any]) -> frozenset[str]:
        """The facts the landscape records for every ok route (replayed wherever it runs)."""
        land = self.landscape()
        if isinstance(land, ModelLandscape):
            return frozenset()
        ok = [r for r in land.routes.values() if r.status == TrialStatus.OK]
        return frozenset.intersection(*(frozenset(r.facts) for r in ok)) if ok else frozenset()

    def presets(self) -> tuple[str, ...]:
        """Stand-in presets for tests: the landscape's ``meta.presets`` (``{name: "-knob=value ..."}``)."""
        return tuple(self._preset_table())

    def _preset_table(self) -> dict[str, str]:
        table = self.landscape().meta.get("presets") or {}
        return {str(k): str(v) for k, v in table.items()} if isinstance(table, dict) else {}

    def preset(self, name: str, spec: BuildSpec) -> dict[str, str]:
        table = self._preset_table()
        if name not in table:
            return super().preset(name, spec)
        from trt_routes.routes import parse_route

        return dict(parse_route(table[name], self.catalog(), source=f"preset '{name}'"))

    def software(self) -> dict[str, str]:
        land = self.landscape()
        return {"backend": self.name, "backend_version": "1", "landscape": land.digest,
                "recorded_backend": land.backend}

    # -- worker side ------------------------------------------------------------------------
    def build(self, spec: BuildSpec, engine_path: Path) -> str:
        land = self._for(spec)
        route = _route_text(spec.route)
        if isinstance(land, ModelLandscape):
            status = land.status(spec.route)
            profile = land.profile_name(spec.shape)
            build_s = land.data.profiles[profile].build_s
        else:
            recorded = land.get(route)
            status = TrialStatus.CRASHED if recorded is None else recorded.status
            build_s = recorded.build_s if recorded is not None else 0.0
        if status == TrialStatus.CRASHED:
            os._exit(70)  # a crashed build: the worker dies, the coordinator records it
        if status == TrialStatus.TIMEOUT:
            time.sleep(10**6)
        if status == TrialStatus.BUILD_ERROR:
            raise RuntimeError(f"recorded build error for route '{route}'")
        Path(engine_path).write_text(json.dumps({"landscape": land.digest, "route": route}), encoding="utf-8")
        return f"replay: route '{route}' from {land.source} (recorded build {build_s:.3g} s)\n"

    def load(self, engine_path: Path, spec: BuildSpec) -> ReplayRunner | ModelRunner:
        land = self._for(spec)
        route = json.loads(Path(engine_path).read_text(encoding="utf-8"))["route"]
        seed = int(spec.settings.get("replay_seed", 0))
        if isinstance(land, ModelLandscape):
            return ModelRunner(land, route, land.profile_name(spec.shape), seed)
        recorded = land.get(route)
        if recorded is None:
            raise RuntimeError(f"route '{route}' is not in {land.source}")
        return ReplayRunner(recorded, seed)

    def reference(self, spec: BuildSpec, feeds: Feeds) -> Feeds:
        return {OUTPUT: reference_output()}

    def reference_version(self) -> str:
        return "replay:1"

    def describe(self) -> dict[str, Any]:
        land = self.landscape()
        if isinstance(land, ModelLandscape):
            return {"source": land.source, "format": land.data.format, "knobs": len(land.data.knobs),
                    "digest": land.digest}
        return {"source": land.source, "routes": len(land.routes), "digest": land.digest}
