"""Inductor knobs: which ``torch._inductor.config`` switches are worth tuning, where each one applies
(device: cpu/cuda; mode: jit/aot), and the catalog read from the installed torch (real types and values).

A knob that cannot act in a job's mode or on its device is rejected when the manifest is validated,
never silently built as the default."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trt_routes import canonical
from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import RouteError

#: Bumped whenever the meaning of a knob (its mapping onto Inductor, its applicability) changes.
KNOBS_VERSION = "inductor-knobs/3"
DEVICES = ("cpu", "cuda")
MODES = ("jit", "aot")
BOTH_DEVICES = frozenset(DEVICES)
BOTH_MODES = frozenset(MODES)
CUDA = frozenset({"cuda"})
CPU = frozenset({"cpu"})
JIT = frozenset({"jit"})
AOT = frozenset({"aot"})

WHY_TRITON = "it configures Triton kernels, which Inductor generates for CUDA devices only (CPU code is C++)"
WHY_CPP = "it configures Inductor's C++/OpenMP code for CPUs; CUDA devices get Triton kernels"
WHY_CUDAGRAPHS = ("CUDA graph trees wrap torch.compile's Python wrapper; an AOTInductor package runs its own "
                  "C++ runner and never captures CUDA graphs")
WHY_CPP_WRAPPER = "AOTInductor always generates a C++ wrapper: the switch has nothing to change in mode aot"
WHY_AOTI = "it configures AOTInductor packages; torch.compile (mode jit) does not read it"
WHY_PADDING = "Inductor pads matmul shapes and strides for GPU memory alignment only (it skips padding on CPU)"


@dataclass(frozen=True)
class KnobSpec:
    """One Inductor config switch we tune: where it acts and why not elsewhere."""

    name: str  # dotted name in torch._inductor.config
    help: str
    devices: frozenset[str] = BOTH_DEVICES
    modes: frozenset[str] = BOTH_MODES
    why_device: str = ""  # why it does not act on the devices it lacks
    why_mode: str = ""  # why it does not act in the modes it lacks
    choices: tuple[str, ...] = ()  # closed values for str knobs (the installed default is always added)
    #: how much longer a build gets with the knob on, as a factor of a default build (a hint: it orders
    #: nothing by itself; see ``Catalog.route_cost``): 1 none, 1.5 some extra passes, 3+ benchmarks during the build
    cost: float = 1.0
    #: a knob of how trt-routes prepares the model and its inputs (``model_options``), not an Inductor switch:
    #: off by default, applied the same way wherever the engine is built, measured or loaded
    model: bool = False

    @property
    def option(self) -> str:
        return f"-{self.name}"


SPECS: tuple[KnobSpec, ...] = (
    # -- both devices, both modes ---------------------------------------------------------------
    KnobSpec("channels_last", "Put the model's 4-D weights and its 4-D floating inputs in channels_last (NHWC) "
             "memory format before compiling, and feed every call so (a model knob: an Inductor graph "
             "otherwise keeps the caller's layout at its inputs). A convolution network's win on GPUs.",
             model=True),
    KnobSpec("freezing", "Treat parameters as constants (inference only): constant-fold weight transforms, "
             "fold Conv+BatchNorm, pre-pack weights (mkldnn on CPU). Often the largest CPU win.", cost=1.2),
    KnobSpec("layout_optimization", "Let Inductor switch convolution graphs to channels-last when its heuristic "
             "expects a gain (always on CPU with mkldnn)."),
    KnobSpec("epilogue_fusion", "Fuse pointwise ops that follow a GEMM/conv template into the template kernel "
             "(acts together with max_autotune_gemm templates)."),
    KnobSpec("aggressive_fusion", "Fuse nodes even when they share no memory access (fewer, larger kernels; "
             "can spill registers)."),
    KnobSpec("max_autotune", "Umbrella switch: autotune GEMM/conv templates and pointwise/reduction configs by "
             "benchmarking during the build (long builds).", cost=6.0),
    KnobSpec("max_autotune_gemm", "Benchmark GEMM/conv template kernels (Triton on CUDA, C++ on CPU) against "
             "the library kernels and keep the fastest.", cost=5.0),
    KnobSpec("max_autotune_gemm_search_space", "How many GEMM template configs max-autotune tries.",
             choices=("DEFAULT", "EXHAUSTIVE"), cost=3.0),
    KnobSpec("max_fusion_size", "Upper bound on the number of nodes fused into one kernel."),
    KnobSpec("pattern_matcher", "Run Inductor's pattern-matcher rewrites (attention, mm+bias, quantization "
             "patterns...)."),
    KnobSpec("permute_fusion", "Fold permutes/transposes into neighbouring matmuls where possible."),
    KnobSpec("reorder_for_locality", "Reorder nodes so that consumers run close to their producers."),
    KnobSpec("loop_ordering_after_fusion", "Choose loop orders after fusion to improve memory access."),
    KnobSpec("conv_1x1_as_mm", "Lower 1x1 convolutions to matrix multiplies."),
    KnobSpec("split_reductions", "Split large reductions into several kernels for parallelism."),
    KnobSpec("unroll_reductions_threshold", "Reductions of at most this many elements are unrolled."),
    # -- CUDA only -------------------------------------------------------------------------------
    KnobSpec("shape_padding", "Pad matmul dimensions to aligned sizes (pad_mm pass).", devices=CUDA,
             why_device=WHY_PADDING, cost=1.2),
    KnobSpec("comprehensive_padding", "Pad strides of intermediate tensors for aligned GPU accesses.",
             devices=CUDA, why_device=WHY_PADDING),
    KnobSpec("max_autotune_pointwise", "Benchmark more Triton configs for pointwise and reduction kernels.",
             devices=CUDA, why_device=WHY_TRITON, cost=3.0),
    KnobSpec("coordinate_descent_tuning", "Tune each Triton kernel's block sizes by coordinate descent at its "
             "first run (can help or hurt; long builds).", devices=CUDA, why_device=WHY_TRITON, cost=4.0),
    KnobSpec("coordinate_descent_check_all_directions", "Coordinate descent also tries moving several block "
             "sizes at once.", devices=CUDA, why_device=WHY_TRITON, cost=2.0),
    KnobSpec("coordinate_descent_search_radius", "How far coordinate descent steps (in powers of two).",
             devices=CUDA, why_device=WHY_TRITON, cost=2.0),
    KnobSpec("benchmark_fusion", "Benchmark fused against unfused Triton kernels before fusing.", devices=CUDA,
             why_device=WHY_TRITON, cost=3.0),
    KnobSpec("combo_kernels", "Horizontally fuse independent small Triton kernels into one launch.",
             devices=CUDA, why_device=WHY_TRITON, cost=1.3),
    KnobSpec("triton.persistent_reductions", "Use persistent (single-block) Triton reductions when they fit.",
             devices=CUDA, why_device=WHY_TRITON),
    KnobSpec("triton.multi_kernel", "Generate several reduction variants and pick one at run time "
             "(0 off, 1-3 more variants).", devices=CUDA, why_device=WHY_TRITON, cost=1.5),
    KnobSpec("triton.use_block_ptr", "Use Triton block pointers for loads and stores.", devices=CUDA,
             why_device=WHY_TRITON),
    KnobSpec("triton.prefer_nd_tiling", "Prefer N-dimensional tiling of pointwise kernels.", devices=CUDA,
             why_device=WHY_TRITON),
    KnobSpec("triton.autotune_pointwise", "Autotune block sizes of pointwise kernels at their first run.",
             devices=CUDA, why_device=WHY_TRITON, cost=1.5),
    KnobSpec("triton.cooperative_reductions", "Use cooperative (multi-block) Triton reductions.", devices=CUDA,
             why_device=WHY_TRITON),
    KnobSpec("triton.enable_persistent_tma_matmul", "Let max-autotune try persistent TMA matmul templates "
             "(Hopper and newer).", devices=CUDA, why_device=WHY_TRITON, cost=2.0),
    # -- CUDA, jit only --------------------------------------------------------------------------
    KnobSpec("triton.cudagraphs", "Capture the compiled graph in CUDA graphs and replay it (removes launch "
             "overhead; the largest win for small batches).", devices=CUDA, modes=JIT,
             why_device="CUDA graphs exist on CUDA devices only", why_mode=WHY_CUDAGRAPHS),
    KnobSpec("triton.cudagraph_trees", "Use CUDA graph trees (shared memory pool) rather than plain CUDA graphs "
             "when triton.cudagraphs is on.", devices=CUDA, modes=JIT,
             why_device="CUDA graphs exist on CUDA devices only", why_mode=WHY_CUDAGRAPHS),
    # -- jit only --------------------------------------------------------------------------------
    KnobSpec("cpp_wrapper", "Generate the wrapper that launches kernels in C++ rather than Python (lower "
             "launch overhead).", modes=JIT, why_mode=WHY_CPP_WRAPPER),
    # -- aot only --------------------------------------------------------------------------------
    KnobSpec("aot_inductor.use_runtime_constant_folding", "Fold constants when the package loads rather than "
             "at build time.", modes=AOT, why_mode=WHY_AOTI),
    # -- CPU only --------------------------------------------------------------------------------
    KnobSpec("cpp.threads", "OpenMP threads of generated C++ kernels (-1: torch's intra-op thread count).",
             devices=CPU, why_device=WHY_CPP),
    KnobSpec("cpp.weight_prepack", "Pre-pack weights for mkldnn kernels (acts with freezing).", devices=CPU,
             why_device=WHY_CPP),
    KnobSpec("cpp.dynamic_threads", "Choose the OpenMP thread count at run time.", devices=CPU,
             why_device=WHY_CPP),
    KnobSpec("cpp.enable_tiling_heuristics", "Let heuristics decide 2-D tiling of C++ kernels.", devices=CPU,
             why_device=WHY_CPP),
    KnobSpec("cpp.enable_loop_tail_vec", "Vectorize loop tails of C++ kernels.", devices=CPU, why_device=WHY_CPP),
    KnobSpec("cpp.enable_floating_point_contract_flag", "Floating-point contraction (FMA) flag for the C++ "
             "compiler.", devices=CPU, why_device=WHY_CPP, choices=("off", "on", "fast")),
    KnobSpec("cpp.min_chunk_size", "Smallest chunk of work per OpenMP thread.", devices=CPU, why_device=WHY_CPP),
    KnobSpec("cpp.max_horizontal_fusion_size", "Most kernels fused horizontally in C++.", devices=CPU,
             why_device=WHY_CPP),
)
SPEC_BY_OPTION: dict[str, KnobSpec] = {s.option: s for s in SPECS}


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def config_value(knob: Knob, text: str) -> Any:
    """A route value (text) as the Python value Inductor's config takes."""
    if knob.values == ("0", "1"):
        return text == "1"
    if knob.values is None:
        return int(text)
    return text


def _knob(spec: KnobSpec, current: Any) -> Knob | None:
    """The catalog knob for ``spec`` given its value in the installed config; None when untunable."""
    where = []
    if spec.devices != BOTH_DEVICES:
        where.append("devices: " + ", ".join(sorted(spec.devices)))
    if spec.modes != BOTH_MODES:
        where.append("modes: " + ", ".join(sorted(spec.modes)))
    help_text = spec.help + (f" [{'; '.join(where)}]" if where else "")
    if spec.cost > 1.0:
        help_text += f" [build cost: about {spec.cost:g}x a default build]"
    if isinstance(current, bool):
        return Knob(spec.option, ("0", "1"), _value_text(current), help_text, cost=spec.cost)
    if isinstance(current, int):
        return Knob(spec.option, None, str(current), help_text, cost=spec.cost)
    if isinstance(current, str) and spec.choices:
        values = tuple(dict.fromkeys([current, *spec.choices]))
        return Knob(spec.option, values, current, help_text, cost=spec.cost)
    return None  # None-valued or unknown-typed switches are not offered


def build_catalog(config: Any, version: str) -> Catalog:
    """The catalog from the installed ``torch._inductor.config`` (its current values are the defaults)."""
    values = config.get_config_copy()
    knobs = [k for spec in SPECS if (spec.model or spec.name in values)
             and (k := _knob(spec, False if spec.model else values[spec.name])) is not None]
    return Catalog(backend="torch-inductor", version=version, knobs=tuple(knobs), tuner_version=KNOBS_VERSION)


#: torch.compile's named modes offered as baselines (``baseline: {preset: NAME}``), in torch's spelling.
PRESETS = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: Inductor switches a named mode may set that are not tunable knobs but are applied as is.
PRESET_EXTRA: frozenset[str] = frozenset()


def preset_table(list_mode_options: Any, catalog: Catalog) -> dict[str, dict[str, str]]:
    """Each preset as knob values of ``catalog`` (route text), read from the installed torch's
    ``torch._inductor.list_mode_options(mode)``. A mode option that is no knob of the catalog is kept
    under its own name with a ``?`` mark, so ``preset`` can refuse it rather than build something else."""
    table: dict[str, dict[str, str]] = {}
    for mode in PRESETS:
        try:
            options = dict(list_mode_options(mode) or {})
        except Exception:  # a torch without this mode
            continue
        route: dict[str, str] = {}
        for name, value in sorted(options.items()):
            option = f"-{name}"
            if option in catalog and isinstance(value, (bool, int, str)):
                route[option] = _value_text(value)
            else:
                route[f"?{name}"] = _value_text(value)
        table[mode] = route
    return table


def expand_preset(table: Mapping[str, Mapping[str, str]], name: str, mode: str, device: str) -> dict[str, str]:
    """Preset ``name`` as a route for a job in ``mode`` on ``device``: knobs that do not act there are
    left out, as torch.compile's mode leaves them without effect (CUDA graphs on a CPU, say)."""
    if name not in table:
        raise RouteError(f"torch-inductor has no preset '{name}' with this torch (presets: "
                         f"{', '.join(table) or 'none'})", f"use one of {', '.join(PRESETS)}, or give 'route:'")
    route: dict[str, str] = {}
    for option, value in table[name].items():
        if option.startswith("?"):
            raise RouteError(f"preset '{name}' sets Inductor's {option[1:]}={value}, which trt-routes has no knob "
                             "for, so the baseline cannot be built as torch.compile builds it",
                             "give the baseline as 'route: -knob=value ...' instead")
        spec = SPEC_BY_OPTION[option]
        if device in spec.devices and mode in spec.modes:
            route[option] = value
    return route


def applicability_table(catalog: Catalog) -> dict[str, dict[str, list[str]]]:
    """Where each catalog knob acts (enters the catalog digest in the signature)."""
    return {k.option: {"devices": sorted(SPEC_BY_OPTION[k.option].devices),
                       "modes": sorted(SPEC_BY_OPTION[k.option].modes)} for k in catalog.knobs}


def catalog_digest(catalog: Catalog, presets: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The catalog's own digest extended with the applicability table, the fixed settings and the
    presets' expansion (a torch whose named modes mean other switches is another catalog)."""
    data: dict[str, Any] = {"catalog": catalog.digest, "applies": applicability_table(catalog),
                            "fixed": FIXED}
    if presets:
        data["presets"] = {k: dict(v) for k, v in presets.items()}
    return canonical.digest(data, 16)


def check_applicable(options: Iterable[str], mode: str, device: str) -> None:
    """RouteError naming the first knob that does not act in ``mode`` on ``device``."""
    for option in options:
        spec = SPEC_BY_OPTION.get(option)
        if spec is None:
            continue  # unknown knobs are reported by the expression parser
        if device not in spec.devices:
            raise RouteError(
                f"knob {option} does not apply on {device} targets: {spec.why_device}",
                f"remove `{option}` from this model's switch group, or use a switch group for {device} models")
        if mode not in spec.modes:
            raise RouteError(
                f"knob {option} does not apply in mode {mode}: {spec.why_mode}",
                f"remove `{option}` from the switch group of mode-{mode} models, or set settings.mode to "
                f"{' or '.join(sorted(spec.modes))}")


#: Inductor switches applied to every build whatever the route, where the installed torch has them. Each
#: route compiles in a cache folder of its own (``compile_cache.scope``), so the local caches are on: the
#: FX-graph cache and the autotune caches (GEMM/conv template timings, coordinate-descent and pointwise
#: block sizes) hold that route's results only, which the engine keeps (``compile_cache.capture``) and a
#: load restores. Remote caches are off: they are keyed without the route's scope.
FIXED: dict[str, Any] = {"fx_graph_cache": True, "autotune_local_cache": True, "autotune_remote_cache": False,
                         "bundled_autotune_remote_cache": False, "fx_graph_remote_cache": False}


def fixed_config(config_values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``FIXED`` switches the installed config has."""
    return {k: v for k, v in FIXED.items() if k in config_values}


def route_config(catalog: Catalog, route: Mapping[str, str], mode: str, device: str) -> dict[str, Any]:
    """Every knob that acts in ``mode`` on ``device``, at the route's value or its default, as Inductor
    config values. Applied explicitly, so no environment variable can change what a route means."""
    unknown = sorted(o for o in route if o not in catalog)
    if unknown:
        raise RouteError(f"unknown torch-inductor knob(s) for torch {catalog.version}: {', '.join(unknown)}",
                         "run `trt-routes knobs --backend torch-inductor` to list them")
    check_applicable(route, mode, device)
    out: dict[str, Any] = {}
    for knob in catalog.knobs:
        spec = SPEC_BY_OPTION[knob.option]
        if spec.model:
            continue  # model_options
        if device in spec.devices and mode in spec.modes:
            text = route.get(knob.option, knob.default)
            if not knob.allows(text):
                raise RouteError(f"{knob.option}={text} is not allowed", f"allowed: {knob.allowed_text()}")
            out[spec.name] = config_value(knob, text)
    return out


def model_options(catalog: Catalog, route: Mapping[str, str]) -> dict[str, bool]:
    """The model knobs the route turns on (``KnobSpec.model``), by name: ``{"channels_last": True}``; empty
    for a route that turns none on, so such routes' engines and cache scopes are what they were before
    model knobs existed."""
    out: dict[str, bool] = {}
    for knob in catalog.knobs:
        spec = SPEC_BY_OPTION[knob.option]
        if spec.model and route.get(knob.option, knob.default) == "1":
            out[spec.name] = True
    return out
