"""Landscape files (``trt-routes/landscape@1``): every route of a switch group with its recorded timing
samples, losses and build time, so search strategies can be evaluated without hardware.

The ``replay`` backend serves trials from one; ``bench/search.py`` runs every strategy over a folder of
them. Samples are drawn as blocks of consecutive recorded samples (a block bootstrap), so drift and
sessions that the recorder captured (a launch-bound route that is fast in one session and slow in the
next) show up as differences between re-measurements, as they do on real hardware."""

from __future__ import annotations

__all__ = ["SCHEMA", "Landscape", "LandscapeRoute", "dump", "load", "load_any", "route_seed", "validate"]

import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trt_routes import canonical as canon
from trt_routes.backends.landscape_model import ModelLandscape, replay_catalog, validate_model
from trt_routes.catalog import Catalog
from trt_routes.errors import RouteError, UsageError
from trt_routes.evidence import TrialStatus
from trt_routes.routes import canonical, parse_route

SCHEMA = "trt-routes/landscape@1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LandscapeKnob(_Strict):
    """One knob of the recorded switch group: its values (closed list) and its catalog default."""

    option: str = Field(pattern=r"^-\S+$")
    values: list[str] = Field(min_length=1)
    default: str

    @model_validator(mode="after")
    def _default_listed(self) -> LandscapeKnob:
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"{self.option}: values repeat")
        if self.default not in self.values:
            raise ValueError(f"{self.option}: default '{self.default}' is not one of its values {self.values}")
        return self


class LandscapeRoute(_Strict):
    """One recorded route: canonical route string ("" = default), status, samples (ms), losses, build time."""

    route: str
    status: TrialStatus = TrialStatus.OK
    samples_ms: list[float] = Field(default_factory=list)
    losses: dict[str, float | None] = Field(
        default_factory=dict, description="metric -> loss of the one output; null: not finite (NaN/Inf outputs)")
    build_s: float = Field(default=0.0, ge=0)
    facts: dict[str, float] = Field(default_factory=dict, description="recorded facts beside the samples "
                                    "(device_memory_mb, engine_mb, energy, ...: trt_routes.evidence.facts); absent: "
                                    "not recorded")

    @field_validator("facts")
    @classmethod
    def _known_facts(cls, v: dict[str, float]) -> dict[str, float]:
        from trt_routes.manifest.schema import FACTS

        for key, value in v.items():
            if key not in FACTS:
                raise ValueError(f"unknown fact '{key}' (facts: {', '.join(FACTS)})")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"fact '{key}' must be a finite non-negative number, got {value}")
        return v

    @field_validator("samples_ms")
    @classmethod
    def _finite_positive(cls, v: list[float]) -> list[float]:
        if any(not math.isfinite(x) or x <= 0 for x in v):
            raise ValueError("samples_ms must be finite positive milliseconds")
        return v

    @model_validator(mode="after")
    def _ok_has_samples(self) -> LandscapeRoute:
        if self.status == TrialStatus.OK and not self.samples_ms:
            raise ValueError(f"route '{self.route}' has status ok but no samples_ms")
        return self


class LandscapeFile(_Strict):
    """The file as JSON: ``schema``, ``backend`` (what recorded it), ``knobs``, ``routes``, optional ``meta``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["trt-routes/landscape@1"] = Field(alias="schema")
    backend: str
    knobs: list[LandscapeKnob] = Field(min_length=1)
    routes: list[LandscapeRoute] = Field(min_length=1)
    meta: dict[str, Any] = Field(default_factory=dict, description="free-form: machine, date, job, protocol")


@dataclass(frozen=True)
class Landscape:
    """A validated landscape: routes by canonical string, a catalog, true medians and a sampler."""

    data: LandscapeFile
    source: str = "<memory>"

    @cached_property
    def catalog(self) -> Catalog:
        return replay_catalog(self.data.knobs, "landscape@1", self.digest, "recorded in a landscape file")

    @cached_property
    def digest(self) -> str:
        return canon.digest(self.to_json(), 16)

    @cached_property
    def routes(self) -> dict[str, LandscapeRoute]:
        return {r.route: r for r in self.data.routes}

    @property
    def backend(self) -> str:
        return self.data.backend

    @property
    def meta(self) -> dict[str, Any]:
        return self.data.meta

    def get(self, route: str) -> LandscapeRoute | None:
        """The recorded route, or None (an absent route behaves as a crashed build)."""
        return self.routes.get(route)

    def true_median(self, route: str) -> float | None:
        """Median of every recorded sample of an ok route (the "truth" benchmarks score against)."""
        r = self.routes.get(route)
        if r is None or r.status != TrialStatus.OK:
            return None
        return float(np.median(r.samples_ms))

    def expression_text(self) -> str:
        """The switch group that covers every knob of the file, as a tuning expression."""
        return " ".join(f"{k.option}=[{'|'.join(k.values)}]" for k in self.data.knobs)

    def draw(self, route: str, iterations: int, repeats: int, rng: np.random.Generator) -> list[float]:
        """``repeats`` blocks of ``iterations`` consecutive recorded samples, each block starting at a
        random offset (wrapping around). Raises KeyError for a route that is absent or not ok."""
        r = self.routes[route]
        if r.status != TrialStatus.OK:
            raise KeyError(route)
        return draw_blocks(r.samples_ms, iterations, repeats, rng)

    def draw_at(self, route: str, position: float, iterations: int) -> list[float]:
        """``iterations`` consecutive recorded samples starting at ``position`` (0 to 1) of the recording.

        Recordings made by ``bench/record_landscape.py`` hold every route's samples in the same
        interleaved rounds, so one position is one moment for all routes: side-by-side re-measurements
        drawn at one position share that moment's contention, as interleaved slots do on hardware."""
        r = self.routes[route]
        if r.status != TrialStatus.OK:
            raise KeyError(route)
        n = len(r.samples_ms)
        start = int(position * n) % n
        return [float(r.samples_ms[(start + i) % n]) for i in range(iterations)]

    def to_json(self) -> dict[str, Any]:
        """The file as JSON; a route without recorded facts has no ``facts`` key (so landscapes recorded
        before facts existed keep their digest)."""
        data = self.data.model_dump(mode="json", by_alias=True)
        for row in data["routes"]:
            if not row.get("facts"):
                row.pop("facts", None)
        return data


def draw_blocks(samples: Sequence[float], iterations: int, repeats: int, rng: np.random.Generator) -> list[float]:
    """The block bootstrap ``Landscape.draw`` uses, on a plain list of samples."""
    x = np.asarray(samples, dtype=np.float64)
    n = x.size
    starts = rng.integers(0, n, size=repeats)
    idx = (starts[:, None] + np.arange(iterations)[None, :]) % n
    return x[idx].ravel().tolist()  # type: ignore[no-any-return]


def route_seed(*parts: object) -> list[int]:
    """A numpy seed sequence from arbitrary parts (routes, seeds, counters): stable across processes."""
    return [zlib.crc32(str(p).encode()) for p in parts]


def validate(data: Mapping[str, Any], source: str = "<memory>") -> Landscape:
    """Check a landscape's JSON data; raises UsageError naming ``source`` and the offending field."""
    try:
        model = LandscapeFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise UsageError(f"{source}: not a valid {SCHEMA} file: {where}: {first['msg']}{more}",
                         "see trt_routes/backends/landscape.py for the format") from None
    landscape = Landscape(model, source)
    seen: set[str] = set()
    for i, r in enumerate(model.routes):
        try:
            assign = parse_route(r.route, None, source=f"routes[{i}]")
            canon_route = canonical(assign, landscape.catalog)
        except RouteError as exc:
            raise UsageError(f"{source}: routes[{i}].route '{r.route}': {exc.message}", exc.hint) from None
        if canon_route != r.route:
            raise UsageError(f"{source}: routes[{i}].route '{r.route}' is not canonical",
                             f"write it as '{canon_route}' (defaults dropped, knobs sorted by name)")
        if r.route in seen:
            raise UsageError(f"{source}: routes[{i}]: route '{r.route}' appears twice")
        seen.add(r.route)
    return landscape


def load(path: Path | str) -> Landscape:
    """Read and validate a ``landscape@1`` file."""
    land = load_any(path)
    if not isinstance(land, Landscape):
        raise UsageError(f"{path}: a {land.data.format} file where a {SCHEMA} file (every route listed) is needed")
    return land


def load_any(path: Path | str) -> Landscape | ModelLandscape:
    """Read and validate a landscape file of either format: ``landscape@1`` (recorded routes) or
    ``landscape@2`` (a generative model, ``trt_routes.backends.landscape_model``)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read landscape file {p}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{p}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{p}: a landscape file holds one JSON object")
    if "format" in data and "schema" not in data:
        return validate_model(data, str(p))
    return validate(data, str(p))


def dump(landscape: Landscape | Mapping[str, Any]) -> str:
    """The file's text: the JSON object with one route per line, samples rounded to 6 significant digits."""
    data = landscape.to_json() if isinstance(landscape, Landscape) else dict(landscape)
    head = {k: v for k, v in data.items() if k != "routes"}
    lines = []
    for r in data["routes"]:
        row = dict(r)
        row["samples_ms"] = [float(f"{s:.6g}") for s in row.get("samples_ms", [])]
        row["losses"] = {k: (v if v is not None and math.isfinite(v) else None)
                         for k, v in (row.get("losses") or {}).items()}
        lines.append("    " + json.dumps(row, separators=(",", ":"), allow_nan=False))
    text = json.dumps(head, indent=2)[:-2]  # drop the closing "\n}"
    return text + ',\n  "routes": [\n' + ",\n".join(lines) + "\n  ]\n}\n"
