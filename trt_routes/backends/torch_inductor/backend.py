"""The torch-inductor backend: PyTorch Inductor's config switches as knobs, in two modes.

``aot``: torch.export + AOTInductor; the engine is the ``.pt2`` package, which is what is measured and
what the lockfile points at. ``jit``: torch.compile with the route as its options; the engine is a JSON
recipe (model, settings, every Inductor switch applied, torch version, generated-code digests, and the
build's compiled artifacts: ``compile_cache``) from which the same compiled module, with the kernels the
build chose, is recreated. torch is imported lazily, inside this package only."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from trt_routes import canonical
from trt_routes.backends.base import Backend, BuildSpec, Feeds, SettingError, start_on_spare_cpus
from trt_routes.backends.torch_inductor import compile_cache, models
from trt_routes.backends.torch_inductor.catalog import (
    PRESETS,
    build_catalog,
    catalog_digest,
    check_applicable,
    expand_preset,
    fixed_config,
    model_options,
    preset_table,
    route_config,
)
from trt_routes.backends.torch_inductor.models import check_low_precision
from trt_routes.backends.torch_inductor.runner import TorchRunner, gpu_lock
from trt_routes.backends.torch_inductor.settings import check_settings
from trt_routes.catalog import Catalog
from trt_routes.errors import TrtRoutesError
from trt_routes.evidence.layers import LayerProfile

MIN_TORCH = (2, 6)
RECIPE_FORMAT = "trt-routes/torch-jit-recipe@1"
#: Environment variables that change Inductor's behaviour beyond the catalog (cache folders excluded).
_ENV_PREFIXES = ("TORCHINDUCTOR_", "TORCH_COMPILE_", "TORCHDYNAMO_")
_ENV_IGNORED = ("TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_COMPILE_THREADS")


def _torch() -> Any:
    import torch

    return torch


def _start_compile_pool(device: str) -> None:
    """Start Inductor's compile-worker pool now (once per process; later calls are free): on the cores and
    at the priority ``start_on_spare_cpus`` gives helper processes, sharing Triton binaries across route
    scopes (``compile_cache``)."""
    from torch._inductor.async_compile import AsyncCompile

    compile_cache.share_triton_binaries(int(device.split(":")[1]) if device.startswith("cuda:") else 0)

    start_on_spare_cpus(AsyncCompile.warm_pool)


def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def _env_fingerprint() -> str:
    items = sorted((k, v) for k, v in os.environ.items()
                   if k.startswith(_ENV_PREFIXES) and k not in _ENV_IGNORED)
    return canonical.digest(items, 12) if items else "none"


@contextlib.contextmanager
def _precision(matmul_precision: str, allow_tf32: bool | None = None) -> Iterator[None]:
    """torch.set_float32_matmul_precision (and optionally cuDNN TF32) for the duration."""
    torch = _torch()
    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision(matmul_precision)
    if allow_tf32 is not None:
        torch.backends.cudnn.allow_tf32 = allow_tf32
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]


class TorchInductorBackend(Backend):
    """PyTorch Inductor (torch.compile / AOTInductor) on CPUs and NVIDIA GPUs."""

    name: ClassVar[str] = "torch-inductor"
    engine_suffix: ClassVar[str] = ".pt2"
    install_hint: ClassVar[str] = "pip install 'trt-routes[torch]'"
    model_sources: ClassVar[frozenset[str]] = frozenset({"path", "entry"})

    def __init__(self) -> None:
        self._catalog: Catalog | None = None
        self._software: dict[str, str] | None = None
        #: recipe sha256 -> (compiled module, cudagraphs, channels_last inputs)
        self._jit: dict[str, tuple[Any, bool, bool]] = {}
        self._presets: dict[str, dict[str, str]] | None = None
        #: jit runners handed out and still alive: while any is, a newly loaded recipe is compiled beside
        #: them (no Dynamo reset), so a side-by-side re-measurement can call each one without recompiling
        self._live: weakref.WeakSet[TorchRunner] = weakref.WeakSet()
        #: recipe sha256 -> how its load was compiled: artifacts restored; FX-graph hits and misses; whether
        #: every module this process generated and loaded is one the build generated (the recipe's digests; a
        #: max-autotune build also generated the candidates it benchmarked, which a cache hit never loads)
        self._restored: dict[str, dict[str, Any]] = {}

    # -- coordinator side -------------------------------------------------------------------
    def unavailable_reason(self) -> str | None:
        try:
            import torch._inductor.config
        except Exception as exc:  # a broken install raises more than ImportError
            return f"torch cannot be imported: {exc}"
        if _version_tuple(torch.__version__) < MIN_TORCH:
            return f"torch {torch.__version__} is older than {'.'.join(map(str, MIN_TORCH))} (no AOTInductor packages)"
        return None

    def catalog(self) -> Catalog:
        if self._catalog is None:
            torch = _torch()
            import torch._inductor.config as config

            self._catalog = build_catalog(config, str(torch.__version__))
        return self._catalog

    def preset_table(self) -> dict[str, dict[str, str]]:
        """torch.compile's named modes as knob values, from the installed torch's list_mode_options."""
        if self._presets is None:
            import torch._inductor

            self._presets = preset_table(torch._inductor.list_mode_options, self.catalog())
        return self._presets

    def presets(self) -> tuple[str, ...]:
        return tuple(p for p in PRESETS if p in self.preset_table())

    def preset(self, name: str, spec: BuildSpec) -> dict[str, str]:
        settings = check_settings(spec.settings, str(spec.target.get("kind", "cpu")))
        return expand_preset(self.preset_table(), name, settings["mode"], settings["device"])

    def software(self) -> dict[str, str]:
        if self._software is None:
            torch = _torch()
            try:
                import triton

                triton_version = str(triton.__version__)
            except Exception:
                triton_version = "none"
            self._software = {
                "backend": self.name,
                "backend_version": str(torch.__version__),
                "triton_version": triton_version,
                "torch_cuda": str(torch.version.cuda or "none"),
                "python": platform.python_version(),
                "catalog_digest": catalog_digest(self.catalog(), self.preset_table()),
                "inductor_env": _env_fingerprint(),
            }
        return dict(self._software)

    def engine_suffix_for(self, settings: Mapping[str, Any]) -> str:
        return ".pt2" if settings.get("mode") == "aot" else ".json"

    def check_job(self, spec: BuildSpec, options: Sequence[str]) -> None:
        settings = check_settings(spec.settings, str(spec.target.get("kind", "cpu")))
        dynamic = sorted(n for n, dims in spec.profile.items() if dims["min"] != dims["max"])
        if dynamic:
            raise SettingError(None, f"torch-inductor tunes static shapes; the profile gives min/opt/max ranges "
                               f"for {', '.join(dynamic)}", "give each shape profile one fixed shape per input "
                               "(one profile per batch size)")
        if not spec.entry and not spec.model_path.endswith(".pt2"):
            raise SettingError(None, f"torch-inductor takes a torch.export program (.pt2) or an entry point, "
                               f"not {Path(spec.model_path).name}", "use 'entry: package.module:factory' or a "
                               "file written by torch.export.save")
        check_applicable(options, settings["mode"], settings["device"])

    def model_digest(self, spec: BuildSpec) -> str:
        return models.entry_digest(spec)

    # -- worker side: helpers ---------------------------------------------------------------
    def _settings(self, spec: BuildSpec) -> dict[str, Any]:
        return check_settings(spec.settings, str(spec.target.get("kind", "cpu")))

    def _device(self, spec: BuildSpec, settings: Mapping[str, Any]) -> str:
        if settings["device"] == "cpu":
            return "cpu"
        torch = _torch()
        if not torch.cuda.is_available():
            raise TrtRoutesError(f"this torch build ({torch.__version__}) cannot use CUDA",
                                 "install a CUDA build of torch on GPU machines")
        wanted = (spec.target.get("device") or {}).get("gpu_name")
        for index in range(torch.cuda.device_count()):
            if wanted is None or torch.cuda.get_device_name(index) == wanted:
                return f"cuda:{index}"
        return "cuda:0"

    def _model(self, spec: BuildSpec, settings: Mapping[str, Any], device: str,
               options: Mapping[str, bool]) -> tuple[Any, dict[str, Any]]:
        """The prepared module and its example inputs; ``options``: the route's model knobs (``model_options``)."""
        loaded = models.load_model(spec)
        models.check_inputs(loaded, sorted(spec.profile), spec.opt_shapes)
        layout = bool(options.get("channels_last"))
        module = models.prepare_module(loaded.module, device, settings["dtype"], channels_last=layout)
        return module, models.example_inputs(loaded, spec, settings["dtype"], device, channels_last=layout)

    @staticmethod
    def _scope(values: Mapping[str, Any], options: Mapping[str, bool]) -> str:
        """A route's compile-cache scope: its Inductor switches and the model knobs it turns on (none: the
        scope is what it was before model knobs existed)."""
        return compile_cache.route_tag({**values, **{f"model.{k}": v for k, v in sorted(options.items())}})

    def _values(self, route: Mapping[str, str], settings: Mapping[str, Any]) -> dict[str, Any]:
        """The Inductor config a build applies: the fixed switches (no shared autotune caches), then
        every knob at the route's value or its default."""
        import torch._inductor.config as config

        return {**fixed_config(config.get_config_copy()),
                **route_config(self.catalog(), route, settings["mode"], settings["device"])}

    def serving(self, route: Mapping[str, str], settings: Mapping[str, Any], engine: str) -> dict[str, Any]:
        """The Inductor config the route compiles with (every knob acting in the job's mode and device, at the
        route's value or its default), the model knobs it turns on (channels_last: the module and inputs in
        that memory format), and the torch.compile call (mode jit) or the AOTInductor package (mode aot).
        The jit engine file holds the same, with the fixed switches (``inductor_config``)."""
        mode, device = str(settings.get("mode", "jit")), str(settings.get("device", "cpu"))
        config = route_config(self.catalog(), route, mode, device)
        options = model_options(self.catalog(), route)
        fullgraph = bool(settings.get("fullgraph", False))
        lines = ["import torch", ""]
        if options.get("channels_last"):
            lines.append("model = model.to(memory_format=torch.channels_last)  # and inputs alike")
        if mode == "aot":
            lines.append(f"compiled = torch._inductor.aoti_load_package({engine!r})")
            return {"mode": mode, "inductor_config": config, "model_options": options, "package": engine,
                    "python": "\n".join(lines) + "\n"}
        lines += [f"inductor_config = {config!r}",
                  f"compiled = torch.compile(model, backend='inductor', dynamic=False, fullgraph={fullgraph}, "
                  "options=inductor_config)"]
        return {"mode": mode, "inductor_config": config, "model_options": options,
                "compile": {"backend": "inductor", "dynamic": False, "fullgraph": fullgraph},
                "run": ("under torch.no_grad(); call torch.compiler.cudagraph_mark_step_begin() before each call"
                        if config.get("triton.cudagraphs") else "under torch.no_grad()"),
                "python": "\n".join(lines) + "\n"}

    @staticmethod
    def _sync(device: str) -> None:
        if device.startswith("cuda"):
            _torch().cuda.synchronize(device)

    # -- worker side: build -----------------------------------------------------------------
    def warm_up(self, spec: BuildSpec) -> None:
        """Import torch, create the device's CUDA context and start Inductor's compile-worker pool: what a
        fresh worker's first build would otherwise pay (several seconds)."""
        settings = self._settings(spec)
        device = self._device(spec, settings)
        torch = _torch()
        if device != "cpu":
            torch.zeros(1, device=device)
        _start_compile_pool(device)

    def build(self, spec: BuildSpec, engine_path: Path) -> str:
        settings = self._settings(spec)
        device = self._device(spec, settings)
        values = self._values(spec.route, settings)
        options = model_options(self.catalog(), spec.route)
        torch = _torch()
        lines = [f"torch {torch.__version__}, mode {settings['mode']}, dtype {settings['dtype']}, device {device}",
                 f"route: {' '.join(f'{k}={v}' for k, v in sorted(spec.route.items())) or '(default)'}"]
        _start_compile_pool(device)  # a replaced worker's first build: before compiling starts it on this thread
        t0 = time.perf_counter()
        with _precision(settings["matmul_precision"]):
            module, example = self._model(spec, settings, device, options)
            weights = models.state_digest(module)[:16]
            lines.append(f"model ready in {time.perf_counter() - t0:.2f} s (weights {weights})"
                         + (f"; model knobs {', '.join(sorted(options))}" if options else ""))
            if settings["mode"] == "aot":
                lines += self._build_aot(module, example, values, Path(engine_path))
            else:
                lines += self._build_jit(spec, settings, module, example, values, options, Path(engine_path),
                                         device)
        return "\n".join(lines) + "\n"

    def _build_aot(self, module: Any, example: dict[str, Any], values: dict[str, Any], path: Path) -> list[str]:
        import torch._inductor
        import torch._inductor.config as config

        t0 = time.perf_counter()
        with torch.no_grad():
            program = torch.export.export(module, args=(), kwargs=example, strict=False)
            exported_s = time.perf_counter() - t0
            path.parent.mkdir(parents=True, exist_ok=True)
            with config.patch(values):
                torch._inductor.aoti_compile_and_package(program, package_path=str(path),
                                                         inductor_configs=dict(values))
        if not path.is_file():
            raise RuntimeError(f"AOTInductor wrote no package to {path}")
        return [f"exported in {exported_s:.2f} s; AOTInductor package compiled in "
                f"{time.perf_counter() - t0 - exported_s:.2f} s ({path.stat().st_size} bytes)",
                f"inductor config: {json.dumps(values, sort_keys=True)}"]

    def _compile_jit(self, module: Any, example: dict[str, Any], values: dict[str, Any], fullgraph: bool,
                     device: str, beside: bool = False) -> tuple[Any, dict[str, Any]]:
        """torch.compile ``module`` with ``values`` and run it until compiled (and CUDA graphs recorded).

        Normally Dynamo is reset first (fresh caches, no graphs of earlier routes). ``beside``: other
        compiled models of this process are still in use (a side-by-side re-measurement), so nothing is
        reset: Dynamo caches compiled code per Python code object, and models of one class (every timm
        ConvNeXt block, say) share theirs; a reset would drop the others' entries and their next call
        would recompile (``BACKEND_MATCH`` guard failure). Each compiled model keeps its own entry,
        guarded by its own backend, so each call finds its own; the cache limits are raised to hold them."""
        import torch._dynamo
        from torch._dynamo.utils import counters

        if beside:
            for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                         "accumulated_cache_size_limit"):
                current = getattr(torch._dynamo.config, name, None)
                if isinstance(current, int) and current < 256:
                    setattr(torch._dynamo.config, name, 256)
        else:
            torch._dynamo.reset()
        counters.clear()
        before = self._generated_modules()
        compiled = torch.compile(module, backend="inductor", dynamic=False, fullgraph=fullgraph,
                                 options=dict(values))
        cudagraphs = bool(values.get("triton.cudagraphs"))
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(3 if cudagraphs else 1):  # cudagraph trees: warm-up run, record, first replay
                if cudagraphs:
                    torch.compiler.cudagraph_mark_step_begin()
                compiled(**example)
        self._sync(device)
        stats = {"compile_s": round(time.perf_counter() - t0, 3),
                 "graphs": int(counters["stats"].get("unique_graphs", 0)),
                 "graph_breaks": int(sum(counters["graph_break"].values())),
                 "generated": sorted(set(self._generated_modules()) - set(before))}
        if stats["graphs"] == 0:
            raise RuntimeError("torch.compile produced no graph: the model ran eagerly")
        return compiled, stats

    @staticmethod
    def _generated_modules() -> list[str]:
        """sha256 of every Python module Inductor has generated and loaded in this process."""
        try:
            from torch._inductor.codecache import PyCodeCache

            files = {getattr(m, "__file__", "") for m in getattr(PyCodeCache, "modules", [])}
            return sorted(hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files if f and Path(f).is_file())
        except Exception:  # introspection only; the recipe stays valid without it
            return []

    def _build_jit(self, spec: BuildSpec, settings: Mapping[str, Any], module: Any, example: dict[str, Any],
                   values: dict[str, Any], options: Mapping[str, bool], path: Path, device: str) -> list[str]:
        with compile_cache.capture(self._scope(values, options)) as captured:
            compiled, stats = self._compile_jit(module, example, values, bool(settings["fullgraph"]), device)
        torch = _torch()
        recipe = {
            "format": RECIPE_FORMAT,
            "model": {"entry": spec.entry} if spec.entry else {"path": Path(spec.model_path).name},
            "weights_sha256": models.state_digest(module),
            "profile": spec.profile,
            "settings": dict(settings),
            "route": dict(sorted(spec.route.items())),
            "inductor_config": values,
            **({"model_options": dict(options)} if options else {}),
            "compile": "torch.compile(model, backend='inductor', dynamic=False, "
                       f"fullgraph={bool(settings['fullgraph'])}, options=inductor_config)",
            "run": ("under torch.no_grad(); call torch.compiler.cudagraph_mark_step_begin() before each call"
                    if values.get("triton.cudagraphs") else "under torch.no_grad()"),
            "torch": str(torch.__version__),
            "software": self.software(),
            "graphs": stats["graphs"],
            "graph_breaks": stats["graph_breaks"],
            "generated_code_sha256": stats["generated"],
            "compile_cache": captured.record,
        }
        data = json.dumps(recipe, indent=2, sort_keys=True, default=str).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self._jit = {hashlib.sha256(data).hexdigest(): (compiled, bool(values.get("triton.cudagraphs")),
                                                        bool(options.get("channels_last")))}
        kept = captured.record
        return [f"compiled in {stats['compile_s']:.2f} s: {stats['graphs']} graph(s), "
                f"{stats['graph_breaks']} graph break(s), {len(stats['generated'])} generated module(s)",
                f"route scope {self._scope(values, options)}: FX-graph cache {captured.hits}; "
                + (f"kept {kept['bytes']} bytes of compiled artifacts {kept['artifacts']}" if kept
                   else "torch recorded no compiled artifacts (the engine recompiles when loaded elsewhere)"),
                f"inductor config: {json.dumps(values, sort_keys=True)}"]

    # -- worker side: load, reference ----------------------------------------------------------
    def load(self, engine_path: Path, spec: BuildSpec) -> TorchRunner:
        settings = self._settings(spec)
        device = self._device(spec, settings)
        torch = _torch()
        torch.set_float32_matmul_precision(settings["matmul_precision"])
        if settings["mode"] == "aot":
            package, keep = self._load_package(Path(engine_path), device)
            runner = TorchRunner(package, device, settings["dtype"],
                                 channels_last=bool(model_options(self.catalog(), spec.route).get("channels_last")))
            if keep is not None:  # the package may be read again after loading: keep its link while it lives
                weakref.finalize(runner, shutil.rmtree, keep, True)
            return runner
        data = Path(engine_path).read_bytes()
        key = hashlib.sha256(data).hexdigest()
        if key not in self._jit:  # another process built it: recreate from the recipe
            recipe = json.loads(data)
            if recipe.get("format") != RECIPE_FORMAT:
                raise TrtRoutesError(f"{engine_path} is not a torch-inductor jit recipe")
            options = dict(recipe.get("model_options") or {})
            module, example = self._model(spec, settings, device, options)
            beside = len(self._live) > 0
            values = recipe["inductor_config"]
            with compile_cache.scope(self._scope(values, options)):
                restored = compile_cache.restore(recipe.get("compile_cache"), str(engine_path))
                compiled, stats = self._compile_jit(module, example, values, bool(settings["fullgraph"]), device,
                                                    beside=beside)
            built, ran = set(recipe.get("generated_code_sha256") or []), set(stats["generated"])
            self._restored[key] = {"restored": restored, **compile_cache.restored(),
                                   "same_code": bool(ran) and ran <= built}
            entry = (compiled, bool(recipe["inductor_config"].get("triton.cudagraphs")),
                     bool(options.get("channels_last")))
            self._jit = {**self._jit, key: entry} if beside else {key: entry}
        compiled, cudagraphs, layout = self._jit[key]
        import torch._dynamo as dynamo

        runner = TorchRunner(compiled, device, settings["dtype"], step_marker=cudagraphs,
                             guard=lambda: dynamo.config.patch(error_on_recompile=True), channels_last=layout)
        runner.compile_cache = self._restored.get(key, {"restored": False, "built_here": True})
        self._live.add(runner)
        return runner

    def profile(self, engine_path: Path, spec: BuildSpec, feeds: Feeds) -> LayerProfile:
        """Where the engine spends its time (``torch_inductor.profile``): its own runs under torch.profiler."""
        from trt_routes.backends.torch_inductor.profile import profile_runner

        return profile_runner(self.load(engine_path, spec), feeds, backend=self.name,
                              route=" ".join(f"{k}={v}" for k, v in sorted(spec.route.items())))

    @staticmethod
    def _load_package(path: Path, device: str) -> tuple[Any, str | None]:
        """The loaded package, and the folder of the ``.pt2`` link made for a suffix-less blob (or None)."""
        import torch._inductor

        index = int(device.split(":")[1]) if device.startswith("cuda:") else -1
        if path.suffix == ".pt2":
            return torch._inductor.aoti_load_package(str(path), device_index=index), None
        folder = tempfile.mkdtemp(prefix="trt-routes-aoti-")  # blob store files have no suffix
        link = Path(folder) / "model.pt2"
        os.symlink(path.resolve(), link)
        return torch._inductor.aoti_load_package(str(link), device_index=index), folder

    def reference(self, spec: BuildSpec, feeds: Feeds) -> Feeds:
        """Eager float32 outputs (TF32 off) on the job's device. When the model runs in float16/bfloat16,
        eager is run in that dtype too: if it overflows where float32 does not, ReferenceOverflow."""
        torch = _torch()
        settings = self._settings(spec)
        device = self._device(spec, settings)
        loaded = models.load_model(spec)
        models.check_inputs(loaded, sorted(spec.profile), spec.opt_shapes)
        module = models.prepare_module(loaded.module, device, "float32")
        lock = gpu_lock(device) if device.startswith("cuda") else contextlib.nullcontext()
        with lock, torch.no_grad(), _precision("highest", allow_tf32=False):
            inputs = {n: models.cast_input(np.asarray(v), "float32", device) for n, v in feeds.items()}
            reference = models.to_numpy(models.flatten_outputs(module(**inputs)))
            if settings["dtype"] != "float32":
                module = module.to(dtype=models.torch_dtype(settings["dtype"]))
                inputs = {n: models.cast_input(np.asarray(v), settings["dtype"], device) for n, v in feeds.items()}
                low = models.to_numpy(models.flatten_outputs(module(**inputs)))
                for name, ref in reference.items():
                    check_low_precision(name, low[name], ref, settings["dtype"])
        return reference

    def reference_version(self) -> str:
        return f"torch:{_torch().__version__}:eager-float32-no-tf32"
