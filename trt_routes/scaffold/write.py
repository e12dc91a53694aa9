"""A first tuning.yaml from inspected models (``init_manifest``), and the quickstart project
(``write_example``). The measurement protocol, strategies, fp32 tolerance and the backend's switch group
come from the packaged quickstart manifest, so ``init`` and the quickstart never disagree."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trt_routes import examples
from trt_routes.errors import UsageError
from trt_routes.files.artifacts import atomic_write_bytes, atomic_write_text
from trt_routes.manifest.schema import Manifest
from trt_routes.scaffold.inspect import INTEGER, ModelInfo, inspect_onnx

#: A symbolic dimension's profile: (min, opt, max).
DimChoice = tuple[int, int, int]
#: Asks for a symbolic dimension (its name, where it appears) when no --dim gives it; None: never ask.
Ask = Callable[[str, str], DimChoice]

#: Per backend: the target it tunes on this machine and the quickstart switch group it recommends there.
RECOMMENDED = {"onnxruntime": ("cpu", "{kind: cpu}", "ort-cpu")}
#: Tolerances by the model's floating-point precision (fp32 is the quickstart's).
TOLERANCES = {
    "float16": ("fp16", [{"metric": "cos", "threshold": 1.0e-3}, {"metric": "lInf", "threshold": 5.0e-2}]),
    "bfloat16": ("bf16", [{"metric": "cos", "threshold": 1.0e-2}, {"metric": "lInf", "threshold": 1.0e-1}]),
}
#: An integer input whose range the graph does not give gets [0, UNKNOWN_HIGH), marked to be checked.
UNKNOWN_HIGH = 2


@dataclass(frozen=True)
class InitResult:
    path: Path
    models: dict[str, Path]  # manifest model name -> file
    unchecked: list[str]  # "model.input" whose range init could not infer (marked "check:" in the file)


def parse_dim(text: str) -> tuple[str, DimChoice]:
    """``NAME=MIN,OPT,MAX`` or ``NAME=SIZE`` (static) -> (NAME, (min, opt, max))."""
    name, sep, values = text.partition("=")
    try:
        sizes = [int(v) for v in values.split(",")] if sep else []
    except ValueError:
        sizes = []
    if not name.strip() or len(sizes) not in (1, 3):
        raise UsageError(f"--dim '{text}': expected NAME=MIN,OPT,MAX or NAME=SIZE", "e.g. --dim batch=1,8,32")
    lo, opt, hi = sizes * 3 if len(sizes) == 1 else sizes
    if not 1 <= lo <= opt <= hi:
        raise UsageError(f"--dim '{text}': need 1 <= MIN <= OPT <= MAX", "e.g. --dim batch=1,8,32")
    return name.strip(), (lo, opt, hi)


def init_manifest(models: Sequence[Path], out: Path, *, dims: Mapping[str, DimChoice] | None = None,
                  backend: str = "onnxruntime", strategy: str = "tuned", force: bool = False,
                  ask: Ask | None = None) -> InitResult:
    """Write ``out`` (a tuning.yaml) that tunes every model in ``models`` on this machine. Nothing is written
    when ``out`` exists (unless ``force``), when a model cannot be read, or when a symbolic dimension has no
    size (from ``dims`` or ``ask``)."""
    if out.exists() and not force:
        raise UsageError(f"{out} already exists; nothing written", "pass --force to overwrite it")
    if not models:
        raise UsageError("no model given", "trt-routes init MODEL.onnx [MODEL.onnx ...], or init --example")
    if backend not in RECOMMENDED:
        raise UsageError(f"init writes manifests for {', '.join(RECOMMENDED)}, not '{backend}'",
                         "for TensorRT start from the packaged recipes (trt_routes/examples/recipes/tensorrt)")
    quick = yaml.safe_load(examples.quickstart_manifest().read_text(encoding="utf-8"))
    if strategy not in quick["strategies"]:
        raise UsageError(f"unknown strategy '{strategy}'", f"one of: {', '.join(quick['strategies'])}")
    infos = [inspect_onnx(p) for p in models]
    chosen = _dimensions(infos, dict(dims or {}), ask)
    names = _model_names(infos)
    text, unchecked = _manifest_text(infos, names, chosen, out, quick, backend, strategy)
    try:  # a bug here must not leave a manifest that does not load
        Manifest.model_validate(yaml.safe_load(text))
    except Exception as exc:  # pragma: no cover - the generator's own consistency check
        raise AssertionError(f"init generated an invalid manifest: {exc}\n{text}") from exc
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)
    return InitResult(out, {n: i.path for n, i in zip(names, infos, strict=True)}, unchecked)


def write_example(folder: Path, *, force: bool = False) -> InitResult:
    """The quickstart project in ``folder``: its tuning.yaml and the two generated models
    (``recipes/quickstart/*.onnx``, where the manifest names them)."""
    from trt_routes.examples.make_models import BUILDERS

    out = folder / "tuning.yaml"
    if out.exists() and not force:
        raise UsageError(f"{out} already exists; nothing written", "pass --force to overwrite it, or give "
                         "another folder: trt-routes init --example DIR")
    models = folder / "recipes" / "quickstart"
    models.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, build in BUILDERS.items():
        paths[name] = models / f"{name}.onnx"
        atomic_write_bytes(paths[name], build().SerializeToString(deterministic=True))
    atomic_write_text(out, examples.quickstart_manifest().read_text(encoding="utf-8"))
    return InitResult(out, paths, [])


def _dimensions(infos: list[ModelInfo], dims: dict[str, DimChoice], ask: Ask | None) -> dict[str, DimChoice]:
    symbols = list(dict.fromkeys(s for info in infos for s in info.symbols))
    unknown = sorted(set(dims) - set(symbols))
    if unknown:
        raise UsageError(f"--dim {', '.join(unknown)}: no model has such a symbolic dimension",
                         f"symbolic dimensions: {', '.join(symbols) or 'none (every shape is static)'}")
    for sym in symbols:
        if sym in dims:
            continue
        where = ", ".join(f"{info.path.name}:{i.name}[{i.dims.index(sym)}]"
                          for info in infos for i in info.inputs if sym in i.dims)
        if ask is None:
            raise UsageError(f"dimension '{sym}' is symbolic ({where}) and has no size; nothing written",
                             f"give it with --dim {sym}=MIN,OPT,MAX (e.g. --dim {sym}=1,8,32) or --dim {sym}=SIZE")
        dims[sym] = ask(sym, where)
    return dims


def _model_names(infos: list[ModelInfo]) -> list[str]:
    names: list[str] = []
    for info in infos:
        base = re.sub(r"[^A-Za-z0-9_.\-]+", "-", info.path.stem.replace("_", "-")).strip("-.").lower() or "model"
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
    return text.removesuffix("\n").removesuffix("\n...").strip()  # a scalar's dump ends the document


def _manifest_text(infos: list[ModelInfo], names: list[str], dims: dict[str, DimChoice], out: Path,
                   quick: dict[str, Any], backend: str, strategy: str) -> tuple[str, list[str]]:
    target, target_yaml, group = RECOMMENDED[backend]
    tolerances: dict[str, list[dict[str, Any]]] = {}
    model_tolerance: dict[str, str] = {}
    for name, info in zip(names, infos, strict=True):
        tname, checks = TOLERANCES.get(info.precision, ("fp32", quick["tolerances"]["fp32"]["checks"]))
        tolerances.setdefault(tname, checks)
        model_tolerance[name] = tname
    default_tol = model_tolerance[names[0]]
    shown = " ".join(str(info.path) for info in infos)
    lines = [
        f"# Written by `trt-routes init {shown}` for this machine: {backend} on the {target.upper()}.",
        "# Read every line marked `check:`, then run `trt-routes validate` and `trt-routes apply`.",
        "schema_version: 1",
        "",
        "measurement:  # the quickstart's protocol",
        *(f"  {k}: {_flow(v)}" for k, v in quick["measurement"].items()),
        "",
        "targets:",
        f"  {target}: {target_yaml}",
        "",
        "switch_groups:",
        f"  # {backend}'s recommended knobs here (the quickstart's group); `trt-routes knobs` lists them all.",
        f"  {group}: |",
        *(f"    {line}" for line in quick["switch_groups"][group].strip().splitlines()),
        "",
        "strategies:  # adaptive search with side-by-side confirmation; quick: trtexec's fast mode",
        *(f"  {k}: {_flow(v)}" for k, v in quick["strategies"].items()),
        "",
        "tolerances:  # every loss must stay strictly below its threshold",
    ]
    for tname, checks in tolerances.items():
        lines += [f"  {tname}:", "    checks:", *(f"      - {_flow(c)}" for c in checks)]
    lines += ["", "defaults:", f"  backend: {backend}", f"  targets: [{target}]", f"  switch_group: {group}",
              f"  strategy: {strategy}", f"  tolerance: {default_tol}", "", "models:"]
    unchecked: list[str] = []
    for name, info in zip(names, infos, strict=True):
        lines += [f"  {name}:", f"    path: {_flow(_rel(info.path, out.parent))}"]
        if model_tolerance[name] != default_tol:
            lines.append(f"    tolerance: {model_tolerance[name]}")
        lines += ["    shapes:", f"      {_profile(info, dims)}", "    inputs:"]
        for i in info.inputs:
            spec: dict[str, object]
            if i.dtype in INTEGER:
                if i.high is not None:
                    spec, note = {"dtype": i.dtype, "low": i.low, "high": i.high}, f"from the graph: {i.range_from}"
                else:
                    spec = {"dtype": i.dtype, "low": 0, "high": UNKNOWN_HIGH}
                    note = "check: range not inferred from the model; set [low, high) to the valid values"
                    unchecked.append(f"{name}.{i.name}")
            elif i.dtype == "bool":
                spec, note = {"dtype": "bool"}, "random true/false"
            else:
                spec, note = {"dtype": i.dtype, "low": -1.0, "high": 1.0}, "uniform in [low, high): the real range?"
            lines.append(f"      {_flow({i.name: spec})[1:-1]}  # {note}")
    return "\n".join(lines) + "\n", unchecked


def _profile(info: ModelInfo, dims: dict[str, DimChoice]) -> str:
    """One shape profile: ``static`` (every size fixed) or ``dynamic`` (min/opt/max per input)."""
    def sizes(which: int, d: tuple[int | str, ...]) -> list[int]:
        return [x if isinstance(x, int) else dims[x][which] for x in d]

    dynamic = any(dims[s][0] != dims[s][2] for s in info.symbols)
    profile: dict[str, Any] = {}
    for i in info.inputs:
        if dynamic and i.symbols:
            profile[i.name] = {"min": sizes(0, i.dims), "opt": sizes(1, i.dims), "max": sizes(2, i.dims)}
        else:
            profile[i.name] = sizes(1, i.dims)
    return f"{'dynamic' if dynamic else 'static'}: {_flow(profile)}"


def _rel(path: Path, base: Path) -> str:
    """``path`` relative to the manifest's folder when it lies inside it, else absolute."""
    full, root = path.resolve(), base.resolve()
    return os.path.relpath(full, root) if full.is_relative_to(root) else str(full)
