"""Jobs: the manifest expanded to model x shape profile x target, each with its keys and signature.

Resolving a job reads files (model digests) and asks backends for catalogs; it builds nothing."""

from __future__ import annotations

__all__ = ["Job", "find_job", "resolve_jobs"]

import difflib
import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

from trt_routes import PROTOCOL_VERSION, canonical
from trt_routes.backends import registry
from trt_routes.backends.base import Backend, BuildSpec, InputMismatch, SettingError
from trt_routes.backends.meters import unmeasurable
from trt_routes.catalog import Catalog
from trt_routes.errors import BackendUnavailable, RouteError, TrtRoutesError, UsageError
from trt_routes.files.model_files import ModelFileError, ModelFiles, read_model_files
from trt_routes.manifest.load import LoadedManifest
from trt_routes.manifest.model_check import check_models
from trt_routes.manifest.schema import (
    Baseline,
    DimRange,
    InputSpec,
    Measurement,
    Objective,
    ReferenceFiles,
    Strategy,
    Tolerance,
    job_name,
)
from trt_routes.routes import (
    DEFAULT_ROUTE,
    UNBOUNDED_LIMIT,
    Expression,
    count_text,
    parse_expression,
    parse_route,
    product_size,
)
from trt_routes.routes import canonical as canonical_route
from trt_routes.signature import Environment, Signature, job_signature

#: Why a job cannot run here. ``unavailable``: the backend is missing (apply exits 3);
#: ``absent``: the target's hardware is not on this machine (skipped, other machines run it);
#: ``invalid``: something in the manifest or its files must be fixed first.
BLOCK_KINDS = ("unavailable", "absent", "invalid")


class PlanAction(StrEnum):
    """What a plan does with a job (``plan.diff.JobPlan``); defined here, beside the job, so that the JSON
    documents can name it without importing the planner."""

    UP_TO_DATE = "up-to-date"
    TUNE = "tune"  # routes to build
    RESELECT = "reselect"  # every route cached: select and lock, no builds
    MATERIALIZE = "materialize"  # the lock stands; its engine is written again
    BLOCKED = "blocked"  # cannot run here (Job.blocked)
    SKIPPED = "skipped"  # its hardware is absent here: another machine runs it


@dataclass(frozen=True)
class Job:
    """One thing to tune, with everything that identifies its trials."""

    name: str
    model: str
    shape: str
    target: str
    backend: str
    model_path: Path
    model_digest: str
    profile: dict[str, dict[str, list[int]]]
    inputs: dict[str, dict[str, Any]]
    reference: ReferenceFiles | str
    reference_shas: tuple[str, str] | None  # (inputs, outputs) digests of user-given reference files
    settings: dict[str, Any]
    switch_group: str
    expression: Expression | None
    strategy_name: str
    strategy: Strategy
    tolerance_name: str
    tolerance: Tolerance
    measurement: Measurement
    target_data: dict[str, Any]
    signature: Signature | None = None
    catalog: Catalog | None = None
    reference_version: str = ""
    #: the backend's ``reload_each_turn``: its side-by-side turns load their engine afresh (the re-measurement
    #: key says so, ``selection.final.confirm_turns``)
    reload_each_turn: bool = False
    blocked: str | None = None
    block_kind: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    entry: str = ""  # module:factory for entry-point models (model_path is then the folder it imports from)
    #: the route the job must beat (``baseline:``; the default route unless the manifest names one), and
    #: how the manifest named it (``preset max-autotune``, ``route -k=v``, or ``default``)
    baseline: str = DEFAULT_ROUTE
    baseline_source: str = "default"
    #: ``baseline: {presets: [...]}``: every listed preset's (route, source), in the order listed (routes
    #: that coincide kept once). Each is always measured; the job's baseline is then the fastest eligible
    #: of them by median (``baseline_of``), and ``baseline`` above is only the first listed.
    baseline_choices: tuple[tuple[str, str], ...] = ()
    objective_name: str = ""  # the manifest's objectives: not part of any trial key (trt_routes.evidence.facts)
    objective: Objective | None = None

    @property
    def baseline_routes(self) -> tuple[str, ...]:
        """The routes always measured as baselines (none for a job without ``baseline:``)."""
        if self.baseline_choices:
            return tuple(r for r, _ in self.baseline_choices)
        return (self.baseline,) if self.baseline != DEFAULT_ROUTE else ()

    def baseline_source_of(self, route: str) -> str:
        """How the manifest named ``route`` as a baseline (``preset max-autotune``...)."""
        return next((src for r, src in self.baseline_choices if r == route), self.baseline_source)

    @cached_property
    def shape_key(self) -> str:
        return canonical.digest(self.profile, 16)

    @cached_property
    def settings_key(self) -> str:
        return canonical.digest(self.settings, 16)

    @cached_property
    def protocol_key(self) -> str:
        return measurement_protocol_key(self.measurement)

    @property
    def dynamic(self) -> bool:
        """Whether the shape profile lets any input vary (the accuracy gate then runs at min, opt and max)."""
        return any(dims["min"] != dims["max"] for dims in self.profile.values())

    @cached_property
    def reference_key(self) -> str:
        points = {"points": ["min", "opt", "max"]} if self.dynamic else {}  # static profiles: keys as before
        if self.reference_shas is not None:
            return canonical.digest({"files": list(self.reference_shas), **points}, 16)
        recipe: dict[str, Any] = {"auto": self.reference_version, "model": self.model_digest, "inputs": self.inputs,
                                  "seed": self.measurement.seed, **points}
        if "dtype" in self.settings:  # a float16 model's reference carries its own overflow check
            recipe["dtype"] = self.settings["dtype"]
        return canonical.digest(recipe, 16)

    @cached_property
    def tolerance_key(self) -> str:
        return canonical.digest(self.tolerance, 16)

    @cached_property
    def group_key(self) -> str:
        """Everything a trial's key holds except the route."""
        sig = self.signature.hash if self.signature else ""
        return canonical.digest(
            [sig, self.backend, self.model_digest, self.shape_key, self.settings_key, self.protocol_key,
             self.reference_key], 32)

    def trial_id(self, route: str) -> str:
        return canonical.digest([self.group_key, route], 32)

    def key_parts(self) -> dict[str, str]:
        return {"model_digest": self.model_digest, "shape_key": self.shape_key,
                "settings_key": self.settings_key, "protocol_key": self.protocol_key,
                "reference_key": self.reference_key}

    def build_spec(self, route: dict[str, str], work_dir: str = "") -> BuildSpec:
        return BuildSpec(model_path=str(self.model_path), route=route, profile=self.profile,
                         settings=dict(self.settings), target=self.target_data, work_dir=work_dir,
                         entry=self.entry, inputs=self.inputs, shape=self.shape)

    @property
    def l0_params(self) -> tuple[tuple[float, float], ...]:
        params = {(1e-5, 1e-5)}
        for checks in [self.tolerance.checks, *self.tolerance.outputs.values()]:
            for c in checks:
                if c.metric == "l0":
                    params.add(c.l0_params)
        return tuple(sorted(params))


def measurement_protocol_key(measurement: Measurement, protocol: str | None = None) -> str:
    """Key of how trials are measured: the manifest's measurement settings and trt-routes' protocol version
    (``protocol``: another version's, to tell a tool upgrade from a manifest change)."""
    return canonical.digest({**measurement.key_fields(), "protocol": protocol or PROTOCOL_VERSION}, 16)


def _profile(shapes: dict[str, list[int] | DimRange]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for name, spec in sorted(shapes.items()):
        if isinstance(spec, DimRange):
            out[name] = {"min": list(spec.min), "opt": list(spec.opt), "max": list(spec.max)}
        else:
            out[name] = {"min": list(spec), "opt": list(spec), "max": list(spec)}
    return out


class Resolver:
    """Expands a loaded manifest into jobs; caches digests, catalogs and parsed expressions."""

    def __init__(self, loaded: LoadedManifest, env: Environment) -> None:
        self.loaded = loaded
        self.env = env
        self._digests: dict[Path, str] = {}
        self._backends: dict[str, Backend | BackendUnavailable | UsageError] = {}
        self._reloads: dict[str, bool] = {}  # Backend.reload_each_turn, also of a backend unusable here
        self._expressions: dict[tuple[str, str], Expression] = {}
        self._entry_digests: dict[tuple[str, str, str], tuple[str | None, str]] = {}
        self._model_files: dict[Path, ModelFiles] = {}

    def backend(self, name: str) -> Backend | TrtRoutesError:
        if name not in self._backends:
            try:
                backend = registry.get(name)
                self._reloads[name] = backend.reload_each_turn
                reason = backend.unavailable_reason()
                self._backends[name] = (
                    BackendUnavailable(reason, backend.install_hint) if reason else backend)
            except (BackendUnavailable, UsageError) as exc:
                self._backends[name] = exc
        return self._backends[name]

    def digest(self, path: Path) -> str | None:
        if path not in self._digests:
            if not path.is_file():
                return None
            self._digests[path] = canonical.file_sha256(path)
        return self._digests[path]

    def model_files(self, mname: str, path: Path) -> ModelFiles:
        """The model files of model ``mname`` (its file and external data); a ManifestError at its
        ``path`` when the file is missing, a directory, empty or not ONNX."""
        if path not in self._model_files:
            try:
                self._model_files[path] = read_model_files(path)
            except ModelFileError as exc:
                make = self.loaded.manifest.models[mname].make
                hint = (f"make it: {make} (in {self.loaded.path.parent})" if make and not path.exists()
                        else exc.hint)
                raise self.loaded.error(("models", mname, "path"), exc.message, hint) from exc
        return self._model_files[path]

    def entry_digest(self, backend: Backend, spec: BuildSpec) -> tuple[str | None, str]:
        """(digest, "") of an entry-point model at one shape profile, or (None, why it cannot be loaded)."""
        key = (spec.entry, spec.model_path, canonical.digest(spec.profile, 16))
        if key not in self._entry_digests:
            try:
                self._entry_digests[key] = (backend.model_digest(spec), "")
            except InputMismatch:
                raise  # the manifest does not fit the model: a positioned error (jobs), not a blocked job
            except SettingError as exc:
                self._entry_digests[key] = (None, str(exc))
        return self._entry_digests[key]

    def check_objective(self, backend: Backend, mname: str, target: dict[str, Any]) -> None:
        """An objective that ranks by or limits a fact this host cannot measure for the target (energy
        without RAPL or NVML) is an error at validate, at the fact: every route would lack it."""
        name, objective = self.loaded.manifest.objective_for(mname)
        if objective is None:
            return
        found = unmeasurable(objective.facts, target, backend.reported_facts(target))
        if found is None:
            return
        fact, why = found
        where = ("objectives", name, "rank") if objective.rank == fact else ("objectives", name, "limits", fact)
        raise self.loaded.error(where, f"objective '{name}' needs {fact}, which model '{mname}' cannot measure on "
                                f"target '{target.get('target')}': {why}",
                                "rank or limit by facts this host measures (latency.p50, latency.p99, throughput, "
                                "device_memory_mb, engine_mb, build_s), or give the model another objective")

    def check_job(self, backend: Backend, mname: str, spec: BuildSpec, expression: Expression | None,
                  group: str) -> None:
        """The backend's validate-time check of one job, as a ManifestError pointing at the culprit."""
        options = [t.option for t in expression.tokens] if expression is not None else []
        try:
            backend.check_job(spec, options)
        except SettingError as exc:
            model = self.loaded.manifest.models[mname]
            if exc.setting is None:
                where: tuple[str, ...] = ("models", mname, "entry" if model.entry else "path")
            elif exc.setting in (model.settings or {}):
                where = ("models", mname, "settings", exc.setting)
            elif exc.setting in self.loaded.manifest.defaults.settings:
                where = ("defaults", "settings", exc.setting)
            else:
                where = ("models", mname)
            raise self.loaded.error(where, f"model '{mname}': {exc.message}", exc.hint) from exc
        except RouteError as exc:
            option = next((o for o in sorted(options, key=len, reverse=True) if o in exc.message), "")
            raise self.loaded.error_in(("switch_groups", group), option, f"model '{mname}': {exc.message}",
                                       exc.hint) from exc

    def baseline(self, backend: Backend, mname: str, baseline: Baseline | None, spec: BuildSpec,
                 catalog: Catalog) -> tuple[tuple[str, str], ...]:
        """The job's baseline as (canonical route, source) pairs: one, or (``presets:``) one per listed
        preset, routes that coincide kept once; a ManifestError pointing at ``baseline:`` (or the
        listed preset at fault)."""
        if baseline is None:
            return ((DEFAULT_ROUTE, "default"),)
        model = self.loaded.manifest.models[mname]
        where: tuple[str | int, ...] = ("models", mname, "baseline") if model.baseline is not None else \
            ("defaults", "baseline")
        if baseline.presets is not None:
            choices: dict[str, str] = {}
            for i, name in enumerate(baseline.presets):
                route = self._baseline_route(backend, mname, spec, catalog, (*where, "presets", i), preset=name)
                choices.setdefault(route, f"preset {name}")
            return tuple(choices.items())
        if baseline.preset is not None:
            return ((self._baseline_route(backend, mname, spec, catalog, where, preset=baseline.preset),
                     f"preset {baseline.preset}"),)
        return ((self._baseline_route(backend, mname, spec, catalog, where, route=baseline.route or ""),
                 f"route {baseline.route}"),)

    def _baseline_route(self, backend: Backend, mname: str, spec: BuildSpec, catalog: Catalog,
                        where: tuple[str | int, ...], *, preset: str | None = None, route: str = "") -> str:
        try:
            if preset is not None:
                assign = backend.preset(preset, spec)
            else:
                assign = parse_route(route, catalog, source="baseline route")
            backend.check_job(spec, list(assign))
            return canonical_route(assign, catalog)
        except (RouteError, SettingError) as exc:
            raise self.loaded.error(where, f"model '{mname}': baseline: {exc.message}", exc.hint) from exc

    def check_full_size(self, strategy_name: str, strategy: Strategy, group: str,
                        expression: Expression | None) -> None:
        """Mode ``full`` without a budget over more than ``UNBOUNDED_LIMIT`` routes cannot finish: refused here,
        pointing at the strategy, with the route count."""
        if expression is None or strategy.mode != "full" or strategy.max_builds or strategy.max_minutes:
            return
        size = product_size(expression.varied)
        if size > UNBOUNDED_LIMIT:
            where: tuple[str, ...] = ("strategies", strategy_name) if strategy_name in \
                self.loaded.manifest.strategies else ("switch_groups", group)
            raise self.loaded.error(
                where, f"strategy '{strategy_name}' (mode full) would build every one of {count_text(size)} routes of "
                f"switch group '{group}' (more than {UNBOUNDED_LIMIT:,})",
                "set max_builds or max_minutes on the strategy, or use mode adaptive (it fits its budget)")

    def expression(self, group: str, catalog: Catalog, model: str) -> Expression:
        key = (group, catalog.backend)
        if key not in self._expressions:
            text = self.loaded.manifest.switch_groups[group]
            try:
                self._expressions[key] = parse_expression(text, catalog, source=f"switch group '{group}'")
            except RouteError as exc:
                token = re.search(r"token `([^`]+)`", exc.message)
                raise self.loaded.error_in(("switch_groups", group), token.group(1) if token else "",
                                           exc.message, exc.hint) from exc
        return self._expressions[key]

    def jobs(self) -> list[Job]:
        m = self.loaded.manifest
        jobs: list[Job] = []
        check_models(self.loaded, {mname: self.model_files(mname, self.loaded.resolve(model.path))
                                   for mname, model in m.models.items() if model.path is not None})
        for mname, model in m.models.items():
            eff = m.effective(mname)
            backend = self.backend(eff.backend)
            if isinstance(backend, UsageError):
                raise self.loaded.error(("models", mname, "backend") if model.backend else
                                        ("defaults", "backend"), backend.message, backend.hint)
            source = "entry" if model.entry is not None else "path"
            if isinstance(backend, Backend) and source not in backend.model_sources:
                raise self.loaded.error(
                    ("models", mname, source), f"backend '{eff.backend}' does not take a model {source}",
                    "give the model as 'path: <file>'" if source == "entry" else
                    "give the model as 'entry: package.module:factory'")
            path = self.loaded.path.parent if model.entry is not None else self.loaded.resolve(model.path or "")
            digest = self.model_files(mname, path).digest if model.entry is None else None
            ref_shas: tuple[str, str] | None = None
            ref_missing = None
            if isinstance(model.reference, ReferenceFiles):
                pin, pout = (self.loaded.resolve(model.reference.inputs),
                             self.loaded.resolve(model.reference.outputs))
                din, dout = self.digest(pin), self.digest(pout)
                if din is None or dout is None:
                    ref_missing = f"reference file not found: {pin if din is None else pout}"
                else:
                    ref_shas = (din, dout)
            strategy_name, strategy = m.strategy_for(mname)
            tol_name = eff.tolerance or ""
            try:
                catalog = backend.catalog() if isinstance(backend, Backend) else None
            except SettingError as exc:  # the backend's catalog is read from a file the model names (replay)
                raise self.loaded.error(("models", mname, "path"), f"model '{mname}': {exc.message}", exc.hint) \
                    from None
            expression = (self.expression(eff.switch_group or "", catalog, mname)
                          if catalog is not None else None)
            self.check_full_size(strategy_name, strategy, eff.switch_group or "", expression)
            for sname, shapes in model.shapes.items():
                profile = _profile(shapes)
                inputs = {
                    name: {**(_input_spec(model.inputs[name]) if name in model.inputs else
                              {"dtype": "float32", "low": -1.0, "high": 1.0}),
                           "shape": dims["opt"]}
                    for name, dims in profile.items()
                }
                entry_error = ""
                if model.entry is not None and isinstance(backend, Backend):
                    try:
                        digest, entry_error = self.entry_digest(backend, BuildSpec(
                            model_path=str(path), route={}, profile=profile, settings=dict(eff.settings),
                            entry=model.entry, inputs=inputs))
                    except InputMismatch as exc:
                        raise self.loaded.error(("models", mname, "shapes", sname),
                                                f"model '{mname}': {exc.message}", exc.hint) from None
                for tname in eff.targets or []:
                    target = m.targets[tname]
                    blocked, kind = None, None
                    hardware = self.env.match(target)
                    signature = None
                    if isinstance(backend, TrtRoutesError):
                        blocked, kind = str(backend.message), "unavailable"
                    elif (why := backend.supports(target.model_dump())) is not None:
                        blocked, kind = why, "invalid"
                    elif hardware is None:
                        blocked, kind = self.env.describe_missing(target), "absent"
                    elif digest is None:
                        blocked, kind = entry_error or f"model file not found: {path}", "invalid"
                    elif ref_missing:
                        blocked, kind = ref_missing, "invalid"
                    if isinstance(backend, Backend) and hardware is not None and catalog is not None:
                        signature = job_signature(hardware, backend.software(), catalog.digest)
                    choices: tuple[tuple[str, str], ...] = ((DEFAULT_ROUTE, "default"),)
                    if isinstance(backend, Backend):
                        check_spec = BuildSpec(
                            model_path=str(path), route={}, profile=profile, settings=dict(eff.settings),
                            target={"name": tname, **target.model_dump(), "device": hardware or {}},
                            entry=model.entry or "", inputs=inputs, shape=sname)
                        self.check_job(backend, mname, check_spec, expression, eff.switch_group or "")
                        if catalog is not None:
                            choices = self.baseline(backend, mname, eff.baseline, check_spec, catalog)
                    (baseline, baseline_source), many = choices[0], eff.baseline is not None and \
                        eff.baseline.presets is not None and choices[0][1] != "default"
                    objective_name, objective = m.objective_for(mname)
                    if hardware is not None and blocked is None and isinstance(backend, Backend):
                        self.check_objective(backend, mname,
                                             {**target.model_dump(), "device": hardware, "target": tname})
                    jobs.append(Job(
                        name=job_name(mname, sname, tname), model=mname, shape=sname, target=tname,
                        backend=eff.backend, model_path=path, model_digest=digest or "",
                        profile=profile, inputs=inputs, reference=model.reference,
                        reference_shas=ref_shas, settings=dict(eff.settings),
                        switch_group=eff.switch_group or "", expression=expression,
                        strategy_name=strategy_name, strategy=strategy, tolerance_name=tol_name,
                        tolerance=m.tolerances[tol_name], measurement=m.measurement,
                        target_data={"name": tname, **target.model_dump(), "device": hardware or {},
                                     "target": tname},  # "name" is the GPU pattern once dumped
                        signature=signature, catalog=catalog,
                        reference_version=backend.reference_version() if isinstance(backend, Backend) else "",
                        reload_each_turn=self._reloads.get(eff.backend, False),
                        blocked=blocked, block_kind=kind, entry=model.entry or "",
                        baseline=baseline, baseline_source=baseline_source,
                        baseline_choices=choices if many else (),
                        objective_name=objective_name, objective=objective,
                    ))
        return jobs


def resolve_jobs(loaded: LoadedManifest, env: Environment) -> list[Job]:
    return Resolver(loaded, env).jobs()


def find_job(jobs: Sequence[Job], name: str) -> Job:
    """The one job named ``name`` (or matched by it as a glob), else a UsageError with the closest names."""
    matches = [j for j in jobs if j.name == name] or [j for j in jobs if fnmatch.fnmatchcase(j.name, name)]
    if len(matches) != 1:
        names = [j.name for j in jobs]
        close = difflib.get_close_matches(name, names, n=3)
        raise UsageError(
            f"no job named '{name}'" if not matches else f"'{name}' matches {len(matches)} jobs",
            f"did you mean {' or '.join(close)}?" if close else f"jobs: {', '.join(names)}",
        )
    return matches[0]


def _input_spec(spec: InputSpec) -> dict[str, Any]:
    """How an input is generated, as data; ``shape_tensor`` only where set, so every other input's spec (and
    the keys its trials are cached under) stays as it was."""
    data = spec.model_dump(exclude={"shape_tensor"})
    return {**data, "shape_tensor": True} if spec.shape_tensor else data
