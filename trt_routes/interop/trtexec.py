"""The ``trtexec`` command line that rebuilds a locked route, and tuning expressions in trtexec's form.

Flag names follow trtexec's help text (TensorRT 10.x/11.x sampleOptions): --minShapes/--optShapes/
--maxShapes, --setBuildRoute, --builderOptimizationLevel, --hardwareCompatibilityLevel, ... ."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trt_routes.backends.tensorrt.settings import check_settings
from trt_routes.catalog import Catalog
from trt_routes.errors import UsageError

_HWC = {"none": "none", "ampere_plus": "ampere+", "same_compute_capability": "sameComputeCapability"}
_TILING = {"none": 0, "fast": 1, "moderate": 2, "full": 3}
_PLAIN = {
    "builder_optimization_level": "--builderOptimizationLevel",
    "max_aux_streams": "--maxAuxStreams",
    "avg_timing_iterations": "--avgTiming",
    "max_num_tactics": "--maxTactics",
    "l2_limit_for_tiling": "--l2LimitForTiling",
}
#: Settings that do not change what is built, so the command leaves them out. ``cuda_graph`` is how the
#: engine is timed; trtexec 11.1 times with CUDA graphs by default (``--noCudaGraph`` turns it off,
#: ``--useCudaGraph`` is a deprecated no-op: samples/common/sampleOptions.cpp).
_NOT_ENGINE = ("timing_cache_dir", "timing_cache", "cuda_graph")


def _dynamic_inputs(model_path: str) -> set[str] | None:
    """Inputs of the ONNX file with a symbolic or missing dimension; None when the file is unreadable."""
    try:
        import onnx

        model = onnx.load(model_path, load_external_data=False)
    except Exception:
        return None
    initializers = {t.name for t in model.graph.initializer}
    out = set()
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        if not dims or any(not d.HasField("dim_value") for d in dims):
            out.add(value.name)
    return out


def _shape_spec(profile: Mapping[str, Mapping[str, list[int]]], names: Iterable[str], which: str) -> str:
    parts = []
    for name in sorted(names):
        shape = "x".join(str(int(d)) for d in profile[name].get(which, profile[name]["opt"]))
        label = f"'{name}'" if any(c in name for c in ":,'") else name
        parts.append(f"{label}:{shape}")
    return ",".join(parts)


def _setting_flags(settings: Mapping[str, Any]) -> list[str]:
    checked = check_settings(settings)
    flags: list[str] = []
    pools: list[str] = []
    for name, value in sorted(checked.items()):
        if name in _NOT_ENGINE:
            continue
        if name in _PLAIN:
            flags.append(f"{_PLAIN[name]}={value}")
        elif name == "hardware_compatibility_level":
            flags.append(f"--hardwareCompatibilityLevel={_HWC[value]}")
        elif name == "tiling_optimization_level":
            flags.append(f"--tilingOptimizationLevel={_TILING[value]}")
        elif name == "workspace_mib":
            pools.append(f"workspace:{value}M")
        elif name == "tactic_shared_memory_kib":
            pools.append(f"tacticSharedMem:{value}K")
        elif name == "version_compatible":
            if value:
                flags.append("--versionCompatible")
        elif name == "profiling_verbosity":
            flags.append(f"--profilingVerbosity={value}")
        elif name == "tf32":
            if not value:  # TF32 is trtexec's default too
                flags.append("--noTF32")
        elif name == "strict_nans" and not value:
            pass  # off is the default; trtexec has no flag that turns it on

        else:
            raise UsageError(
                f"trtexec has no flag for the setting '{name}'",
                "build this engine through trt-routes, or drop the setting",
            )
    if pools:
        flags.append(f"--memPoolSize={','.join(pools)}")
    return flags


def trtexec_command(
    model_path: str,
    route: str,
    profile: Mapping[str, Mapping[str, list[int]]],
    settings: Mapping[str, Any],
    *,
    engine_path: str | None = None,
) -> str:
    """``trtexec --onnx=... --minShapes=... --optShapes=... --maxShapes=... --setBuildRoute="..."`` (plus
    the build settings) that rebuilds ``route`` for ``profile``.

    Shapes are given for the model's dynamic inputs when the ONNX file can be read (trtexec refuses
    explicit shapes for a static model), else for every input of the profile."""
    args = ["trtexec", f"--onnx={model_path}"]
    dynamic = _dynamic_inputs(model_path) if Path(model_path).is_file() else None
    names = [n for n in profile if dynamic is None or n in dynamic]
    if names:
        for which, flag in (("min", "--minShapes"), ("opt", "--optShapes"), ("max", "--maxShapes")):
            args.append(f"{flag}={_shape_spec(profile, names, which)}")
    args += _setting_flags(settings)
    if engine_path:
        args.append(f"--saveEngine={engine_path}")
    words = [shlex.quote(a) for a in args]
    route = " ".join(route.split())
    if route:
        if any(c in route for c in '"$`\\'):
            words.append(shlex.quote(f"--setBuildRoute={route}"))
        else:
            words.append(f'--setBuildRoute="{route}"')
    return " ".join(words)


def expression_for_trtexec(expr_text: str, catalog: Catalog | None = None) -> str:
    """A tuning expression (ours may span lines and carry ``#`` comments) as one ``--tuneBuildRoutes``
    value. With a catalog, values are checked and a list on an open integer knob is refused, as
    trtexec refuses it (Torch-TensorRT accepts it)."""
    from trt_routes.routes import parse_expression

    expression = parse_expression(expr_text, catalog)
    if catalog is not None:
        for token in expression.varied:
            knob = catalog.get(token.option)
            if knob is not None and knob.values is None:
                raise UsageError(
                    f"trtexec rejects a list on the open integer knob {token.option}",
                    f"pin one value, e.g. {token.option}={token.values[0]}, "
                    "or run the sweep through trt-routes or Torch-TensorRT",
                )
    return expression.text()
