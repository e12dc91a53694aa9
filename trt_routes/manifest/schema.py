"""tuning.yaml schema (schema_version 1): pydantic models with extra='forbid'.

Only shape and cross-reference checks live here; route expressions are checked against a
backend's catalog in ``trt_routes.routes``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

# the models and field types of manifest.rules and manifest.schema_base are part of this module's names too
from trt_routes.manifest.rules import (  # noqa: F401
    FACTS,
    Check,
    Confirm,
    Objective,
    Strategy,
    Tolerance,
    switchable_section,
)
from trt_routes.manifest.schema_base import (  # noqa: F401
    ENTRY,
    MAX_ELEMENTS,
    MAX_WORKERS,
    NAME,
    Dim,
    Int,
    Metric,
    Name,
    Number,
    PathText,
    Strict,
    _no_nul,
    _not_bool,
)
from trt_routes.text import has_userinfo, looks_secret

SCHEMA_VERSION = 1


class DimRange(Strict):
    """A dynamic input: min/opt/max shapes. Timing and accuracy use ``opt``."""

    min: list[Dim] = Field(min_length=1, max_length=16)
    opt: list[Dim] = Field(min_length=1, max_length=16)
    max: list[Dim] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _ordered(self) -> DimRange:
        if not (len(self.min) == len(self.opt) == len(self.max)):
            raise ValueError("min, opt and max must have the same rank")
        for lo, mid, hi in zip(self.min, self.opt, self.max, strict=True):
            if not (1 <= lo <= mid <= hi):
                raise ValueError(f"need 1 <= min <= opt <= max in every dimension, got {lo}, {mid}, {hi}")
        _check_elements(self.max)
        return self


def _check_elements(dims: list[int]) -> list[int]:
    n = math.prod(dims)
    if n > MAX_ELEMENTS:
        raise ValueError(f"a shape of {n:,} elements is too large (at most {MAX_ELEMENTS:,} per input)")
    return dims


StaticShape = Annotated[list[Dim], Field(min_length=0, max_length=16), AfterValidator(_check_elements)]
InputShape = StaticShape | DimRange
#: A graph input's name, as the model spells it (ONNX allows any non-empty text).
InputName = Annotated[str, BeforeValidator(_no_nul), StringConstraints(min_length=1, max_length=1000)]
ShapeProfile = dict[InputName, InputShape]


class InputSpec(Strict):
    """How to generate an input when reference data is ``auto``."""

    dtype: Literal["float32", "float16", "int64", "int32", "bool"] = "float32"
    low: Number = -1.0
    high: Number = 1.0
    #: The input's values are a shape (a TensorRT shape tensor, e.g. a Reshape's target): each shape profile
    #: gives its values at min/opt/max instead of its dimensions (as trtexec's ``--shapes`` does), and those
    #: values are what it is fed.
    shape_tensor: bool = False

    @model_validator(mode="after")
    def _range(self) -> InputSpec:
        if self.shape_tensor and self.dtype not in ("int64", "int32"):
            raise ValueError(f"a shape tensor's values are integers: write dtype: int64 or int32, not {self.dtype}")
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) must not be above high ({self.high:g})")
        if self.dtype in ("int64", "int32") and self.low == self.high and self.low != int(self.low):
            raise ValueError(f"an integer input's range must contain an integer, got {self.low:g}")
        return self


class ReferenceFiles(Strict):
    """User-provided reference data: .npz files keyed by input and output tensor names."""

    inputs: PathText
    outputs: PathText


class Settle(Strict):
    """Warm-up until timings settle: windows of ``window`` untimed runs until a window's median is within
    ``tolerance`` of the previous window's, at most ``max_runs`` runs (then timing starts anyway)."""

    window: Int = Field(default=5, ge=2, le=10_000)
    tolerance: Number = Field(default=0.05, gt=0, lt=1)
    max_runs: Int = Field(default=200, ge=2, le=1_000_000)


class Busy(Strict):
    """What a trial measured on a busy host means: other processes kept more than ``max_others`` of the
    CPUs busy while it was timed (the noise context every trial records). ``warn`` (the default) says so in
    apply, explain and the report; ``refuse`` does not keep such a trial (it is measured again next time)
    and fails the job. Not part of any key."""

    action: Literal["warn", "refuse", "ignore"] = "warn"
    max_others: Number = Field(default=0.25, gt=0, le=1, description="share of all CPUs other processes "
                               "kept busy while a trial was timed")


class Measurement(Strict):
    """The measurement protocol. Part of every trial's key (but ``timeout_s`` and ``busy``)."""

    warmup: Int = Field(default=10, ge=0, le=100_000)
    iterations: Int = Field(default=20, ge=1, le=1_000_000)
    repeats: Int = Field(default=5, ge=1, le=1_000)
    timeout_s: Number = Field(default=300.0, gt=0, le=7 * 24 * 3600,
                              description="per trial (build + measure), at most a week; not in the key")
    seed: Int = Field(default=0, ge=0, le=2**32 - 1)
    settle: Settle | None = Field(default_factory=lambda: Settle(), description="after `warmup`, warm up "
                                  "until timings settle (bounded); false: the fixed warm-up only")

    busy: Busy = Field(default_factory=Busy, description="warn|refuse when other processes load the host "
                       "while a trial is timed; not in the key")

    _settle_switch = field_validator("settle", mode="before")(switchable_section)

    @field_validator("busy", mode="before")
    @classmethod
    def _busy_word(cls, v: object) -> object:
        return {"action": v} if isinstance(v, str) else v

    def key_fields(self) -> dict[str, object]:
        return {"warmup": self.warmup, "iterations": self.iterations, "repeats": self.repeats,
                "seed": self.seed, "settle": self.settle.model_dump() if self.settle else None}


class Target(Strict):
    """Hardware a job runs on: the CPU, or GPUs matched by name pattern and/or compute capability."""

    kind: Literal["cpu", "gpu"]
    name: str | None = Field(default=None, description="fnmatch pattern on the GPU name, e.g. '*H200*'")
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")

    @model_validator(mode="after")
    def _gpu_needs_match(self) -> Target:
        if self.kind == "gpu" and self.name is None and self.compute_capability is None:
            raise ValueError("a gpu target needs 'name' (a pattern) or 'compute_capability'")
        if self.kind == "cpu" and (self.name or self.compute_capability):
            raise ValueError("a cpu target takes no 'name' or 'compute_capability'")
        return self


class Execution(Strict):
    """Where trials run. Not part of any key, except that CPU targets split over several workers are
    measured on fewer cores each, which the signature records (``cpu_count``, ``cpu_workers``)."""

    executor: Literal["local", "ray"] = "local"
    workers: Int | None = Field(default=None, ge=1, le=MAX_WORKERS, description="local: GPU workers (default: every "
                                "matching GPU) and CPU workers (default 1: measurement validity)")
    address: str | None = Field(default=None, description="ray: cluster address (ray://host:10001, auto)")
    cpus_per_trial: Int = Field(default=1, ge=1, le=1024, description="ray: CPUs a trial of a CPU target asks for")
    max_retries: Int = Field(default=2, ge=0, le=100, description="ray: retries of a trial whose worker or node died")


class Remote(Strict):
    """A named cache remote (``cache push/pull NAME``): its URL and fsspec storage options, never credentials
    (those come from the storage backend's own chain: the environment, ~/.aws/credentials...)."""

    url: PathText
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)
    default: bool = Field(default=False, description="push and pull use this remote when none is named")

    @field_validator("url")
    @classmethod
    def _no_userinfo(cls, v: str) -> str:
        if has_userinfo(v):
            raise ValueError("the URL carries credentials (user:password@): give them through the environment "
                             "(AWS_ACCESS_KEY_ID...) or ~/.aws/credentials, never in tuning.yaml")
        return v

    @field_validator("options")
    @classmethod
    def _no_secrets(cls, v: dict[str, object]) -> dict[str, object]:
        for key, value in v.items():
            if looks_secret(key) or (isinstance(value, str) and has_userinfo(value)):
                raise ValueError(f"option {key!r} looks like a credential: credentials are never written in "
                                 "tuning.yaml (the storage backend reads them from the environment)")
        return v


class Paths(Strict):
    """Where things live, relative to the manifest's folder."""

    cache: PathText = "caches/trials.sqlite"
    engines: PathText = "caches/engines"
    lockfile: PathText = "tuning.lock"
    out: PathText = "engines"


class Baseline(Strict):
    """The route a job must beat (``baseline:`` in ``defaults`` or a model): a route (``-knob=value ...``)
    or a backend preset (torch-inductor: ``reduce-overhead``, ``max-autotune``,
    ``max-autotune-no-cudagraphs``, expanded from the installed torch's ``list_mode_options``), or the
    best of several presets (``presets: [...]``: each is measured, the fastest eligible by median is the
    baseline). It is always measured, and confirmation compares winners against it instead of the default
    route.
    Without one, the baseline is the default route."""

    route: Annotated[str, BeforeValidator(_no_nul), StringConstraints(max_length=4096)] | None = None
    preset: Annotated[str, Field(pattern=NAME, max_length=100)] | None = None
    #: best of several presets: every one is always measured, and the job's baseline is the fastest
    #: eligible of them by median (ties: the order listed)
    presets: list[Annotated[str, Field(pattern=NAME, max_length=100)]] | None = Field(
        default=None, min_length=1, max_length=20,
        description="several backend presets; the baseline is the fastest eligible of them")

    @model_validator(mode="after")
    def _one(self) -> Baseline:
        if sum(v is not None for v in (self.route, self.preset, self.presets)) != 1:
            raise ValueError("give exactly one of 'route' (-knob=value ...), 'preset' (a backend preset name) "
                             "and 'presets' (a list of them: the fastest eligible is the baseline)")
        return self


class JobDefaults(Strict):
    """Settings a model may override."""

    backend: str = "onnxruntime"
    targets: list[Name] | None = Field(default=None, min_length=1)  # [] would make no job
    switch_group: Name | None = None
    strategy: Name | None = None
    tolerance: Name | None = None
    objective: Name | None = Field(default=None, description="a name in objectives; none: lowest latency.p50")
    settings: dict[str, str | int | float | bool] = Field(default_factory=dict)
    baseline: Baseline | None = None


class ModelDefaults(Strict):
    backend: str | None = None
    targets: list[Name] | None = Field(default=None, min_length=1)  # [] would make no job
    switch_group: Name | None = None
    strategy: Name | None = None
    tolerance: Name | None = None
    objective: Name | None = None
    settings: dict[str, str | int | float | bool] | None = None
    baseline: Baseline | None = None


class Model(ModelDefaults):
    """One model to tune and its shape profiles. The model is a file (``path``: ONNX, or a torch.export
    ``.pt2`` for torch-inductor) or a Python entry point (``entry: "package.module:factory"``, for
    backends that take one); exactly one of the two."""

    path: PathText | None = None
    entry: str | None = Field(default=None, pattern=ENTRY, description="module:factory, the module imported "
                              "with the manifest's folder first on sys.path")
    shapes: dict[Name, ShapeProfile] = Field(min_length=1, max_length=1000)
    inputs: dict[InputName, InputSpec] = Field(default_factory=dict)
    reference: Literal["auto"] | ReferenceFiles = "auto"
    make: str | None = Field(default=None, max_length=1000,
                             description="the command that writes the model file, run in the manifest's folder "
                             "(trt-routes runs nothing: a missing model's error shows it)")

    @model_validator(mode="after")
    def _one_source(self) -> Model:
        if (self.path is None) == (self.entry is None):
            raise ValueError("give exactly one of 'path' (a model file) and 'entry' (module:factory)")
        return self

    @field_validator("shapes")
    @classmethod
    def _distinct(cls, v: dict[str, ShapeProfile]) -> dict[str, ShapeProfile]:
        seen: dict[str, str] = {}  # each profile's inputs, as trial keys see them -> its name
        for name, prof in v.items():
            if not prof:
                raise ValueError(f"shape profile '{name}' names no input")
            dims = repr(sorted((i, (s.min, s.opt, s.max) if isinstance(s, DimRange) else (s, s, s))
                               for i, s in prof.items()))
            if dims in seen:  # trials are keyed by inputs: the two would be one job under two names
                raise ValueError(f"shape profiles '{seen[dims]}' and '{name}' give the same inputs, so their jobs "
                                 f"would share every trial: remove '{name}' or change its dimensions")
            seen[dims] = name
        return v


class Manifest(Strict):
    """The whole of tuning.yaml."""

    schema_version: Literal[1]
    paths: Paths = Field(default_factory=Paths)
    execution: Execution = Field(default_factory=Execution)
    measurement: Measurement = Field(default_factory=Measurement)
    targets: dict[Name, Target] = Field(default_factory=lambda: {"cpu": Target(kind="cpu")}, min_length=1)
    switch_groups: dict[Name, str] = Field(default_factory=dict)
    strategies: dict[Name, Strategy] = Field(default_factory=lambda: {"adaptive": Strategy()})
    tolerances: dict[Name, Tolerance] = Field(default_factory=dict)
    objectives: dict[Name, Objective] = Field(default_factory=dict)
    defaults: JobDefaults = Field(default_factory=JobDefaults)
    models: dict[Name, Model] = Field(min_length=1)
    remotes: dict[Name, Remote] = Field(default_factory=dict, description="named cache remotes for cache "
                                        "push/pull")

    @model_validator(mode="after")
    def _one_default_remote(self) -> Manifest:
        marked = sorted(n for n, r in self.remotes.items() if r.default)
        if len(marked) > 1:
            raise ValueError(f"remotes: {' and '.join(marked)} are both marked default: mark one")
        return self

    @model_validator(mode="after")
    def _references(self) -> Manifest:
        for mname in self.models:
            eff = self.effective(mname)
            for tname in eff.targets or []:
                if tname not in self.targets:
                    raise ValueError(_missing("target", tname, self.targets, f"models.{mname}"))
            for kind, name, table in (
                ("switch group", eff.switch_group, self.switch_groups),
                ("strategy", eff.strategy, self.strategies),
                ("tolerance", eff.tolerance, self.tolerances),
                ("objective", eff.objective, self.objectives),
            ):
                if name is None:
                    if kind in ("strategy", "objective"):
                        continue
                    raise ValueError(f"model '{mname}' has no {kind}: set defaults.{_field(kind)} "
                                     f"or models.{mname}.{_field(kind)}")
                if name not in table:
                    raise ValueError(_missing(kind, name, table, f"models.{mname}"))
        return self

    def effective(self, model: str) -> JobDefaults:
        """The model's settings with defaults filled in."""
        m = self.models[model]
        d = self.defaults
        return JobDefaults(
            backend=m.backend or d.backend,
            targets=m.targets if m.targets is not None else (
                d.targets if d.targets is not None else list(self.targets)),
            switch_group=m.switch_group or d.switch_group,
            strategy=m.strategy or d.strategy or next((n for n in ("adaptive", "fast") if n in self.strategies),
                                                      None),
            tolerance=m.tolerance or d.tolerance,
            objective=m.objective or d.objective,
            settings={**d.settings, **(m.settings or {})},
            baseline=m.baseline if m.baseline is not None else d.baseline,
        )

    def objective_for(self, model: str) -> tuple[str, Objective | None]:
        """The model's objective by name; ("", None) without one (the lowest latency.p50 wins, as always)."""
        name = self.effective(model).objective
        return (name, self.objectives[name]) if name else ("", None)

    def strategy_for(self, model: str) -> tuple[str, Strategy]:
        name = self.effective(model).strategy
        if name is None:
            return "adaptive", Strategy()
        return name, self.strategies[name]


def _field(kind: str) -> str:
    return kind.replace(" ", "_")


def _missing(kind: str, name: str, table: Mapping[str, object], where: str) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(table), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f"; defined: {', '.join(sorted(table)) or 'none'}"
    return f"{where}: unknown {kind} '{name}'{hint}"


def job_name(model: str, shape: str, target: str) -> str:
    return f"{model}/{shape}/{target}"


JOB_PATTERN = re.compile(NAME)


def manifest_dir(path: Path) -> Path:
    return path.resolve().parent
