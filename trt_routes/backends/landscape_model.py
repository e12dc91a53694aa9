"""Generative landscape files (``trt-routes/landscape@2``): a model of a switch group's times instead of a list
of its routes, so groups of hundreds of knobs (TensorRT's ~10^76 routes) can be replayed.

The JSON (exactly; ``header`` is free-form, for the writer's parameters)::

    {"format": "trt-routes/landscape@2",
     "knobs": [{"option": "-k", "values": ["0", "1"], "default": "0"}, ...],
     "failures": [{"when": {"-k": "1"}, "status": "crashed"}, ...],
     "profiles": {"a": {"base_ms": 2.0,
                        "effects": {"-k": {"1": -0.05}},
                        "interactions": [{"when": {"-k": "1", "-j": "2"}, "log": -0.1}],
                        "clip": [{"options": ["-x", "-y"], "limit": 0.003}],
                        "noise": {"trial": 0.01, "repeat": 0.005, "run": 0.01},
                        "build_s": 120.0,
                        "optimum": {"route": "-k=1", "ms": 1.9}}},
     "header": {...}}

A route has the status of the first ``failures`` entry whose every assignment it holds (a knob at its
default holds its default value), else ``ok``. Its true time in a profile is
``base_ms * exp(unclipped effects + clipped sums + interactions)``: ``effects`` are natural logs of time
factors (absent: 0); the effects of the options of one ``clip`` entry are summed and the sum clipped to
[-limit, +limit] (effects that do not compound); an interaction adds its ``log`` when every assignment holds.
A sample is the true time times three log-normal offsets: one per measurement (``noise.trial``), one per
repeat, one per run, drawn from a generator seeded by the build setting ``replay_seed``, the route, the
profile and the measurement's number, so a replay is reproducible. A job uses the profile named like its
shape profile, or the only profile when there is one."""

from __future__ import annotations

__all__ = ["FORMAT", "ModelLandscape", "validate_model"]

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trt_routes import canonical as canon
from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import RouteError, UsageError
from trt_routes.evidence import TrialStatus
from trt_routes.routes import canonical, route_dict

FORMAT = "trt-routes/landscape@2"
FAILED = tuple(s for s in TrialStatus if s != TrialStatus.OK)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelKnob(_Strict):
    option: str = Field(pattern=r"^-\S+$")
    values: list[str] = Field(min_length=1)
    default: str


class Failure(_Strict):
    when: dict[str, str] = Field(min_length=1)
    status: Literal["crashed", "build-error", "timeout", "accuracy-failed"]


class Interaction(_Strict):
    when: dict[str, str] = Field(min_length=1)
    log: float = Field(allow_inf_nan=False)


class Clip(_Strict):
    options: list[str] = Field(min_length=1)
    limit: float = Field(ge=0, allow_inf_nan=False)


class Noise(_Strict):
    """Standard deviations of log time: at most 1 (a factor of e), far beyond any measurement; larger ones drew
    times of 0 and 1e240 ms."""

    trial: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    repeat: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    run: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)


class Optimum(_Strict):
    route: str
    ms: float = Field(gt=0, allow_inf_nan=False)


class Profile(_Strict):
    base_ms: float = Field(gt=0, allow_inf_nan=False)
    effects: dict[str, dict[str, float]] = Field(default_factory=dict)
    interactions: list[Interaction] = Field(default_factory=list)
    clip: list[Clip] = Field(default_factory=list)
    noise: Noise = Field(default_factory=Noise)
    build_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    optimum: Optimum | None = None


class ModelFile(_Strict):
    format: Literal["trt-routes/landscape@2"]
    knobs: list[ModelKnob] = Field(min_length=1)
    failures: list[Failure] = Field(default_factory=list)
    profiles: dict[str, Profile] = Field(min_length=1)
    header: dict[str, Any] = Field(default_factory=dict, description="free-form: the writer's parameters")


@dataclass(frozen=True)
class _Compiled:
    """A profile as arrays: per knob, the log effect of each value; clip groups; interactions."""

    base_ms: float
    effects: dict[str, dict[str, float]]  # unclipped options only
    clipped: tuple[tuple[tuple[str, ...], float, dict[str, dict[str, float]]], ...]
    interactions: tuple[tuple[dict[str, str], float], ...]


def replay_catalog(knobs: Iterable[Any], version: str, digest: str, text: str) -> Catalog:
    """The replay backend's catalog of a landscape file's knobs (each with ``option``, ``values`` and
    ``default``; all build-phase), versioned by the file's format and digest."""
    return Catalog(backend="replay", version=version, tuner_version=digest,
                   knobs=tuple(Knob(k.option, tuple(k.values), k.default, text, "build") for k in knobs))


@dataclass(frozen=True)
class ModelLandscape:
    """A validated ``landscape@2``: catalog, statuses, true times and seeded samples."""

    data: ModelFile
    source: str = "<memory>"

    @cached_property
    def catalog(self) -> Catalog:
        return replay_catalog(self.data.knobs, "landscape@2", self.digest, "modelled in a landscape@2 file")

    @cached_property
    def digest(self) -> str:
        return canon.digest(self.data.model_dump(mode="json"), 16)

    @property
    def backend(self) -> str:
        return "model"

    @property
    def meta(self) -> dict[str, Any]:
        return self.data.header

    @cached_property
    def defaults(self) -> dict[str, str]:
        return {k.option: k.default for k in self.data.knobs}

    def expression_text(self) -> str:
        """The switch group that covers every knob of the file, as a tuning expression."""
        return " ".join(f"{k.option}=[{'|'.join(k.values)}]" for k in self.data.knobs)

    def assignment(self, route: str | Mapping[str, str]) -> dict[str, str]:
        """Every knob's value in ``route`` (defaults filled in)."""
        given = route_dict(route) if isinstance(route, str) else dict(route)
        return {**self.defaults, **given}

    def status(self, route: str | Mapping[str, str]) -> TrialStatus:
        """``ok`` or the status of the first failure rule the route holds."""
        full = self.assignment(route)
        for rule in self.data.failures:
            if all(full.get(o) == v for o, v in rule.when.items()):
                return TrialStatus(rule.status)
        return TrialStatus.OK

    def profile_name(self, shape: str = "") -> str:
        """The profile a job of shape profile ``shape`` uses (the only one when there is one)."""
        names = list(self.data.profiles)
        if shape in self.data.profiles:
            return shape
        if len(names) == 1:
            return names[0]
        raise UsageError(f"{self.source}: no profile named '{shape}' (profiles: {', '.join(names)})",
                         "name the model's shape profiles like the landscape's profiles")

    @cached_property
    def _compiled(self) -> dict[str, _Compiled]:
        out = {}
        for name, p in self.data.profiles.items():
            in_clip = {o for c in p.clip for o in c.options}
            out[name] = _Compiled(
                p.base_ms, {o: e for o, e in p.effects.items() if o not in in_clip},
                tuple((tuple(c.options), c.limit, {o: p.effects.get(o, {}) for o in c.options}) for c in p.clip),
                tuple((dict(i.when), i.log) for i in p.interactions))
        return out

    def log_factor(self, route: str | Mapping[str, str], profile: str) -> float:
        """The route's log time factor over ``base_ms`` in ``profile`` (the formula in the module doc)."""
        c = self._compiled[profile]
        full = self.assignment(route)
        total = sum(e.get(full[o], 0.0) for o, e in c.effects.items())
        for options, limit, effects in c.clipped:
            s = sum(effects[o].get(full[o], 0.0) for o in options)
            total += min(limit, max(-limit, s))
        total += sum(log for when, log in c.interactions if all(full.get(o) == v for o, v in when.items()))
        return total

    def true_ms(self, route: str | Mapping[str, str], profile: str) -> float:
        return self._compiled[profile].base_ms * math.exp(self.log_factor(route, profile))

    def samples(self, route: str, profile: str, iterations: int, repeats: int, rng: np.random.Generator) -> list[float]:
        """One measurement: ``repeats`` x ``iterations`` samples of the route's true time times the offsets."""
        noise = self.data.profiles[profile].noise
        trial = rng.normal(0.0, noise.trial) if noise.trial else 0.0
        rep = rng.normal(0.0, noise.repeat, size=(repeats, 1)) if noise.repeat else np.zeros((repeats, 1))
        run = rng.normal(0.0, noise.run, size=(repeats, iterations)) if noise.run else 0.0
        x = self.true_ms(route, profile) * np.exp(trial + rep + run) * np.ones((repeats, iterations))
        return x.ravel().tolist()  # type: ignore[no-any-return]


def _check_assign(where: str, assign: Mapping[str, str], knobs: Mapping[str, ModelKnob]) -> None:
    for option, value in assign.items():
        knob = knobs.get(option)
        if knob is None:
            raise ValueError(f"{where}.{option}: unknown knob '{option}'")
        if value not in knob.values:
            raise ValueError(f"{where}.{option}: value '{value}' is not one of {knob.values}")


def _semantic_checks(model: ModelFile, landscape: ModelLandscape) -> None:
    knobs: dict[str, ModelKnob] = {}
    for i, k in enumerate(model.knobs):
        if k.option in knobs:
            raise ValueError(f"knobs.{i}.option: '{k.option}' appears twice")
        if len(set(k.values)) != len(k.values):
            raise ValueError(f"knobs.{i}.values: values of {k.option} repeat")
        if k.default not in k.values:
            raise ValueError(f"knobs.{i}.default: '{k.default}' is not one of {k.values}")
        knobs[k.option] = k
    for i, f in enumerate(model.failures):
        _check_assign(f"failures.{i}.when", f.when, knobs)
    for name, p in model.profiles.items():
        at = f"profiles.{name}"
        for option, values in p.effects.items():
            for value in values:
                _check_assign(f"{at}.effects", {option: value}, knobs)
            for value, log in values.items():
                if not math.isfinite(log):
                    raise ValueError(f"{at}.effects.{option}.{value}: not a finite number")
        for i, inter in enumerate(p.interactions):
            _check_assign(f"{at}.interactions.{i}.when", inter.when, knobs)
        seen: set[str] = set()
        for i, c in enumerate(p.clip):
            for option in c.options:
                if option not in knobs:
                    raise ValueError(f"{at}.clip.{i}.options: unknown knob '{option}'")
                if option in seen:
                    raise ValueError(f"{at}.clip.{i}.options: '{option}' is in more than one clip entry")
                seen.add(option)
        low, high = _log_range(p, knobs)
        fastest, slowest = p.base_ms * math.exp(max(low, -700.0)), p.base_ms * math.exp(min(high, 700.0))
        if fastest < MIN_MS or slowest > MAX_MS:
            raise ValueError(f"{at}: its routes' times could run from {fastest:.3g} to {slowest:.3g} ms; base_ms "
                             f"and the effects must keep every route between {MIN_MS:g} and {MAX_MS:g} ms")
        if p.optimum is not None:
            try:
                assign = route_dict(p.optimum.route)
                _check_assign(f"{at}.optimum.route", assign, knobs)
                canon_route = canonical(assign, landscape.catalog)
            except RouteError as exc:
                raise ValueError(f"{at}.optimum.route '{p.optimum.route}': {exc.message}") from None
            if canon_route != p.optimum.route:
                raise ValueError(f"{at}.optimum.route: write it as '{canon_route}' (canonical)")


#: The times a model may give (ms): a route's time must be a finite positive float, whatever its values.
MIN_MS, MAX_MS = 1e-6, 1e9


def _log_range(p: Profile, knobs: Mapping[str, ModelKnob]) -> tuple[float, float]:
    """Bounds on a route's log time factor: each unclipped knob's lowest and highest value effect, each clip
    entry's limit, every interaction that lowers or raises the time."""
    clipped = {o for c in p.clip for o in c.options}
    low = high = 0.0
    for option, knob in knobs.items():
        if option in clipped:
            continue
        logs = [p.effects.get(option, {}).get(v, 0.0) for v in knob.values]
        low, high = low + min(logs), high + max(logs)
    for c in p.clip:
        low, high = low - c.limit, high + c.limit
    for inter in p.interactions:
        low, high = low + min(inter.log, 0.0), high + max(inter.log, 0.0)
    return low, high


def validate_model(data: Mapping[str, Any], source: str = "<memory>") -> ModelLandscape:
    """Check a ``landscape@2`` file's JSON; raises UsageError naming ``source`` and the field's path."""
    hint = "see docs/search-at-scale.md (Generative landscapes) for the format"
    try:
        model = ModelFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise UsageError(f"{source}: not a valid {FORMAT} file: {where}: {first['msg']}{more}", hint) from None
    landscape = ModelLandscape(model, source)
    try:
        _semantic_checks(model, landscape)
    except ValueError as exc:
        raise UsageError(f"{source}: not a valid {FORMAT} file: {exc}", hint) from None
    return landscape
