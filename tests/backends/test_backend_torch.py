"""The torch-inductor backend on real torch: catalog, settings and knob checks at validate time, honest
model digests, references, and real CPU builds in both modes (Inductor's C++ path). The GPU test runs
where torch sees a CUDA device. Everything here skips when torch is not installed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from _paths import REPO  # noqa: E402

from trt_routes.backends import registry  # noqa: E402
from trt_routes.backends.base import BuildSpec  # noqa: E402
from trt_routes.backends.torch_inductor import ReferenceOverflow, TorchInductorBackend  # noqa: E402
from trt_routes.backends.torch_inductor.catalog import SPEC_BY_OPTION, route_config  # noqa: E402
from trt_routes.backends.torch_inductor.models import load_entry  # noqa: E402
from trt_routes.errors import ManifestError, RouteError  # noqa: E402
from trt_routes.project import open_project  # noqa: E402
from trt_routes.tune.apply import ApplyOptions, apply  # noqa: E402

MODELS = textwrap.dedent('''\
    import torch


    class MLP(torch.nn.Module):
        def __init__(self, scale: float = 1.0) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 8)
            self.scale = scale

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(torch.relu(self.fc1(x))) * self.scale


    def mlp(shapes):
        return MLP()


    def mlp_with_examples(shapes):
        return MLP(), {"x": torch.zeros(shapes["x"])}


    def overflows(shapes):
        return MLP(scale=1.0e6)  # fine in float32, inf in float16


    def nonfinite(shapes):
        return MLP(scale=float("inf"))


    def underflows(shapes):
        return MLP(scale=1.0e-10)  # fine in float32, all zeros in float16 (like a randomly initialised MobileNetV3)


    class Conv(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.conv(x)).mean(dim=(2, 3))


    def conv(shapes):
        return Conv()


    def unseeded(shapes):
        import time
        torch.manual_seed(time.perf_counter_ns())
        return MLP()
    ''')
FAST = {"warmup": 1, "iterations": 3, "repeats": 2, "timeout_s": 300}
SHAPES = {"b4": {"x": [4, 16]}}


@pytest.fixture(scope="module")
def backend() -> TorchInductorBackend:
    return registry.get("torch-inductor")  # type: ignore[return-value]


def project(root: Path, models: dict[str, Any], groups: dict[str, str] | None = None,
            targets: dict[str, Any] | None = None, **defaults: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "tiny.py").write_text(MODELS, encoding="utf-8")
    data: dict[str, Any] = {
        "schema_version": 1,
        "measurement": FAST,
        "switch_groups": groups or {"g": "-freezing=[0|1]"},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"backend": "torch-inductor", "switch_group": "g", "tolerance": "t", **defaults},
        "models": models,
    }
    if targets:
        data["targets"] = targets
    path = root / "tuning.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def manifest_error(path: Path) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        open_project(path).jobs  # noqa: B018
    return info.value


# -- catalog and signature -----------------------------------------------------------------------------


def test_catalog_is_read_from_the_installed_inductor_config(backend: TorchInductorBackend) -> None:
    import torch._inductor.config as config

    catalog = backend.catalog()
    values = config.get_config_copy()
    wanted = {"-triton.cudagraphs", "-freezing", "-epilogue_fusion", "-aggressive_fusion", "-shape_padding",
              "-layout_optimization", "-coordinate_descent_tuning", "-max_autotune_pointwise",
              "-max_autotune_gemm"}
    assert wanted <= set(catalog.options)
    for knob in catalog.knobs:
        if SPEC_BY_OPTION[knob.option].model:  # how trt-routes prepares the model: no Inductor switch
            assert knob.values == ("0", "1") and knob.default == "0" and knob.option[1:] not in values
            continue
        current = values[knob.option[1:]]
        if isinstance(current, bool):
            assert knob.values == ("0", "1") and knob.default == ("1" if current else "0")
        elif isinstance(current, int):
            assert knob.values is None and knob.default == str(current)
        else:
            assert knob.default == current and current in (knob.values or ())
    software = backend.software()
    assert software["backend_version"] == torch.__version__
    assert software["catalog_digest"] and software["catalog_digest"] != catalog.digest  # applicability included


def test_signature_carries_torch_version_and_catalog_digest(tmp_path: Path) -> None:
    path = project(tmp_path, {"m": {"entry": "tiny:mlp", "shapes": SHAPES}})
    (job,) = open_project(path).jobs
    assert job.signature is not None and job.blocked is None
    assert job.signature.fields["backend_version"] == torch.__version__
    assert job.signature.fields["catalog_digest"] == registry.get("torch-inductor").software()["catalog_digest"]


def test_route_config_applies_every_knob_of_the_mode_and_device(backend: TorchInductorBackend) -> None:
    cpu_jit = route_config(backend.catalog(), {"-freezing": "1"}, "jit", "cpu")
    assert cpu_jit["freezing"] is True
    assert "cpp.threads" in cpu_jit and "triton.cudagraphs" not in cpu_jit
    cuda_aot = route_config(backend.catalog(), {}, "aot", "cuda")
    assert "triton.cudagraphs" not in cuda_aot and "cpp_wrapper" not in cuda_aot
    assert "coordinate_descent_tuning" in cuda_aot and "cpp.threads" not in cuda_aot
    with pytest.raises(RouteError, match="does not apply in mode aot"):
        route_config(backend.catalog(), {"-triton.cudagraphs": "1"}, "aot", "cuda")


# -- validate-time errors ------------------------------------------------------------------------------


def test_knob_outside_its_mode_is_a_validate_error_at_the_token(tmp_path: Path) -> None:
    path = project(tmp_path, {"m": {"entry": "tiny:mlp", "shapes": SHAPES, "settings": {"mode": "aot"}}},
                   groups={"g": "-freezing=[0|1]\n-cpp_wrapper=[0|1]\n"})
    err = manifest_error(path)
    assert "model 'm'" in err.message and "-cpp_wrapper does not apply in mode aot" in err.message
    assert err.line is not None and "-cpp_wrapper" in (err.snippet or "")
    assert err.hint is not None and "settings.mode" in err.hint


def test_gpu_knob_on_a_cpu_target_and_cpu_knob_on_a_gpu_target(tmp_path: Path) -> None:
    path = project(tmp_path / "a", {"m": {"entry": "tiny:mlp", "shapes": SHAPES}},
                   groups={"g": "-triton.cudagraphs=[0|1]"})
    assert "does not apply on cpu targets" in manifest_error(path).message
    gpu = {"h200": {"kind": "gpu", "name": "*H200*"}}
    path = project(tmp_path / "b", {"m": {"entry": "tiny:mlp", "shapes": SHAPES}},
                   groups={"g": "-cpp.threads=[1|2]"}, targets=gpu)
    assert "does not apply on cuda targets" in manifest_error(path).message  # checked without the GPU


def test_cudagraphs_in_aot_names_the_reason(tmp_path: Path) -> None:
    gpu = {"h200": {"kind": "gpu", "name": "*H200*"}}
    path = project(tmp_path, {"m": {"entry": "tiny:mlp", "shapes": SHAPES, "settings": {"mode": "aot"}}},
                   groups={"g": "-triton.cudagraphs=[0|1]"}, targets=gpu)
    err = manifest_error(path)
    assert "-triton.cudagraphs does not apply in mode aot" in err.message and "C++ runner" in err.message


@pytest.mark.parametrize(("settings", "expected"), [
    ({"mdoe": "aot"}, "unknown torch-inductor setting 'mdoe' (did you mean 'mode'?)"),
    ({"dtype": "float64"}, "setting dtype: 'float64' is not allowed"),
    ({"device": "cuda"}, "setting device: cuda does not match the target"),
    ({"mode": "aot", "fullgraph": True}, "fullgraph applies in mode jit only"),
])
def test_bad_settings_point_at_the_setting(tmp_path: Path, settings: dict[str, Any], expected: str) -> None:
    path = project(tmp_path, {"m": {"entry": "tiny:mlp", "shapes": SHAPES, "settings": settings}})
    err = manifest_error(path)
    assert expected in err.message
    key = next(iter(settings)) if expected.find("fullgraph") < 0 else "fullgraph"
    assert key in (err.snippet or "")


def test_entry_needs_a_backend_that_takes_one(tmp_path: Path) -> None:
    path = project(tmp_path, {"m": {"entry": "tiny:mlp", "shapes": SHAPES}}, backend="onnxruntime",
                   groups={"g": "-graph_optimization_level=[basic|all]"})
    err = manifest_error(path)
    assert "backend 'onnxruntime' does not take a model entry" in err.message


def test_dynamic_profiles_are_rejected(tmp_path: Path) -> None:
    shapes = {"dyn": {"x": {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}}}
    path = project(tmp_path, {"m": {"entry": "tiny:mlp", "shapes": shapes}})
    assert "static shapes" in manifest_error(path).message


# -- model digests -------------------------------------------------------------------------------------


def digest_of(path: Path) -> str:
    (job,) = open_project(path).jobs
    assert job.blocked is None, job.blocked
    return job.model_digest


@pytest.mark.slow  # imports and digests torch models several times
def test_entry_digest_follows_code_and_weights(tmp_path: Path) -> None:
    path = project(tmp_path, {"m": {"entry": "tiny:mlp", "shapes": SHAPES}})
    first = digest_of(path)
    assert digest_of(path) == first  # deterministic: the factory runs under a fixed seed
    models = tmp_path / "tiny.py"
    models.write_text(models.read_text() + "\n# a comment is a code change\n")
    second = digest_of(path)
    assert second != first
    helper = tmp_path / "helper.py"  # code the entry imports from the project counts too
    helper.write_text("SCALE = 1.0\n")
    models.write_text(models.read_text().replace("return MLP()\n\n\ndef mlp_with",
                                                 "from helper import SCALE\n    return MLP(SCALE)\n\n\ndef mlp_with"))
    third = digest_of(path)
    helper.write_text("SCALE = 2.0\n")
    assert digest_of(path) not in (third, second)


def test_nondeterministic_or_broken_entries_block_the_job(tmp_path: Path) -> None:
    path = project(tmp_path, {"a": {"entry": "tiny:unseeded", "shapes": SHAPES},
                              "b": {"entry": "tiny:missing", "shapes": SHAPES},
                              "c": {"entry": "nosuchmodule:f", "shapes": SHAPES}})
    jobs = {j.model: j for j in open_project(path).jobs}
    assert all(j.block_kind == "invalid" for j in jobs.values())
    assert "returns different weights on each call" in (jobs["a"].blocked or "")
    assert "has no function missing" in (jobs["b"].blocked or "")
    assert "cannot import nosuchmodule" in (jobs["c"].blocked or "")


def test_a_profile_naming_an_input_forward_does_not_take_is_a_positioned_manifest_error(tmp_path: Path) -> None:
    """The manifest checked against the entry's model (issue 14: model-aware validation, torch entries too)."""
    from trt_routes.errors import ManifestError

    path = project(tmp_path, {"d": {"entry": "tiny:mlp", "shapes": {"b4": {"y": [4, 16]}}}})
    with pytest.raises(ManifestError) as info:
        open_project(path).jobs  # noqa: B018
    assert "takes no input named y" in info.value.message
    assert info.value.line is not None and "tuning.yaml" in str(info.value)


# -- references ----------------------------------------------------------------------------------------


def spec_for(tmp_path: Path, entry: str, **settings: Any) -> BuildSpec:
    (tmp_path / "tiny.py").write_text(MODELS, encoding="utf-8")
    return BuildSpec(model_path=str(tmp_path), route={}, profile={"x": {"min": [4, 16], "opt": [4, 16],
                                                                         "max": [4, 16]}},
                     settings=settings, target={"kind": "cpu"}, entry=entry)


def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).uniform(-1, 1, (4, 16)).astype(np.float32)}


@pytest.mark.slow
def test_channels_last_is_a_model_knob_applied_where_the_engine_is_built_and_where_it_is_loaded(
        tmp_path: Path, backend: TorchInductorBackend) -> None:
    """-channels_last=1 (found on the H200: ResNet-50 6-8% faster than the best named mode) is no Inductor
    switch: the recipe records it, and a load in another backend (another process's view: the engine is
    recreated from its recipe) prepares the model and feeds every call in channels_last, or the compiled
    graph, guarded on its inputs' strides, would recompile (an error in a measured engine)."""
    catalog = backend.catalog()
    assert "channels_last" not in route_config(catalog, {"-channels_last": "1"}, "jit", "cpu")
    shape = [2, 3, 16, 16]
    (tmp_path / "tiny.py").write_text(MODELS, encoding="utf-8")
    spec = BuildSpec(model_path=str(tmp_path), route={"-channels_last": "1"},
                     profile={"x": {"min": shape, "opt": shape, "max": shape}}, settings={},
                     target={"kind": "cpu"}, entry="tiny:conv")
    engine = tmp_path / "cl.json"
    log = backend.build(spec, engine)
    assert "model knobs channels_last" in log
    recipe = json.loads(engine.read_text())
    assert recipe["model_options"] == {"channels_last": True}
    x = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
    eager = load_entry("tiny:conv", tmp_path, {"x": shape}).module.eval()
    with torch.no_grad():
        want = eager(torch.from_numpy(x)).numpy()
    fresh = TorchInductorBackend()
    runner = fresh.load(engine, spec)
    assert runner.channels_last
    np.testing.assert_allclose(runner.run({"x": x})["output"], want, rtol=1e-4, atol=1e-5)
    assert len(runner.time({"x": x}, 1, 2, 1)) == 2  # timed calls do not recompile either
    runner.channels_last = False  # the same engine fed as the caller's arrays come: the guard refuses it
    with pytest.raises(Exception, match="stride mismatch"):
        runner.run({"x": x})
    plain = BuildSpec(**{**spec.__dict__, "route": {}})
    backend.build(plain, tmp_path / "plain.json")
    assert "model_options" not in json.loads((tmp_path / "plain.json").read_text())  # older engines' bytes


@pytest.mark.slow
def test_layer_profile_names_operators_the_generated_graph_and_what_a_route_adds(tmp_path: Path) -> None:
    """torch.profiler over a loaded engine (issue 32), on the call a timed run makes: the aten operators Inductor
    calls out to and the compiled graph's own time (its generated C++ kernels). -cpp_wrapper=1 calls the
    convolution from C++ (no aten::convolution dispatch): explain --layers shows a layer only the default has."""
    from trt_routes.evidence.layers import compare

    shape = [2, 3, 16, 16]
    (tmp_path / "tiny.py").write_text(MODELS, encoding="utf-8")
    x = {"x": np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)}
    profiles = []
    for route in ({}, {"-cpp_wrapper": "1"}):
        spec = BuildSpec(model_path=str(tmp_path), route=route, profile={"x": {"min": shape, "opt": shape,
                                                                               "max": shape}},
                         settings={}, target={"kind": "cpu"}, entry="tiny:conv")
        engine = tmp_path / f"{len(route)}.json"
        TorchInductorBackend().build(spec, engine)
        profiles.append(TorchInductorBackend().profile(engine, spec, x))  # a fresh backend: another process
    for p in profiles:
        names = {layer.name for layer in p.layers}
        assert p.backend == "torch-inductor" and p.runs == 10 and p.wall_ms is not None and p.wall_ms > 0
        assert {"CompiledFxGraph", "aten::_convolution"} <= names and all(layer.ms > 0 for layer in p.layers)
        assert all(layer.where == "cpu" for layer in p.layers) and "generated C++ kernels" in p.note
    assert profiles[1].route == "-cpp_wrapper=1"
    only_default = {row.name for row in compare(*profiles).rows if row.winner_ms is None}
    assert "aten::convolution" in only_default, only_default


def test_reference_is_eager_float32(tmp_path: Path, backend: TorchInductorBackend) -> None:
    out = backend.reference(spec_for(tmp_path, "tiny:mlp", dtype="bfloat16"), feeds())
    assert list(out) == ["output"] and out["output"].dtype == np.float32 and out["output"].shape == (4, 8)
    again = backend.reference(spec_for(tmp_path, "tiny:mlp_with_examples"), feeds())
    np.testing.assert_array_equal(out["output"], again["output"])  # same seeded weights either way


def test_float16_reference_that_overflows_is_an_error_of_the_reference(tmp_path: Path,
                                                                       backend: TorchInductorBackend) -> None:
    spec = spec_for(tmp_path, "tiny:overflows", dtype="float16")
    with pytest.raises(ReferenceOverflow, match="eager float16 reference itself overflows"):
        backend.reference(spec, feeds())
    assert np.isfinite(backend.reference(spec_for(tmp_path, "tiny:overflows"), feeds())["output"]).all()


def test_float16_reference_that_underflows_names_the_dtype_to_use(tmp_path: Path,
                                                                  backend: TorchInductorBackend) -> None:
    spec = spec_for(tmp_path, "tiny:underflows", dtype="float16")
    with pytest.raises(ReferenceOverflow, match="eager float16 model underflows") as caught:
        backend.reference(spec, feeds())
    assert "float32" in (caught.value.hint or "")
    assert np.abs(backend.reference(spec_for(tmp_path, "tiny:underflows"), feeds())["output"]).max() > 0


@pytest.mark.slow  # a torch apply end to end
def test_nonfinite_reference_fails_the_job_not_each_trial(tmp_path: Path) -> None:
    path = project(tmp_path, {"m": {"entry": "tiny:nonfinite", "shapes": SHAPES}})
    result = apply(open_project(path), ApplyOptions())
    (outcome,) = result.outcomes
    assert result.exit_code == 4 and outcome.built == 0
    assert "reference itself has non-finite values" in (outcome.error or "")


# -- real builds on the CPU ------------------------------------------------------------------------------


@pytest.mark.slow
def test_apply_on_cpu_in_both_modes(tmp_path: Path) -> None:
    """jit and aot builds of a tiny MLP through real workers; a torch.export .pt2 model too."""
    from torch._inductor import aoti_load_package

    with torch.no_grad():
        torch.export.save(torch.export.export(torch.nn.Linear(16, 8).eval(), (torch.zeros(4, 16),)),
                          str(tmp_path / "linear.pt2"))
    path = project(tmp_path, {
        "mlp": {"entry": "tiny:mlp", "shapes": SHAPES},
        "mlp-aot": {"entry": "tiny:mlp_with_examples", "shapes": SHAPES, "settings": {"mode": "aot"}},
        "exported": {"path": "linear.pt2", "shapes": {"b4": {"input": [4, 16]}}, "switch_group": "none"},
    }, groups={"g": "-freezing=[0|1]", "none": "-freezing=0"})
    result = apply(open_project(path), ApplyOptions())
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    assert result.built == 5
    lock = yaml.safe_load((tmp_path / "tuning.lock").read_text())["jobs"]
    jit, aot, exported = lock["mlp/b4/cpu"], lock["mlp-aot/b4/cpu"], lock["exported/b4/cpu"]
    assert jit["model"]["entry"] == "tiny:mlp" and jit["engine"]["path"].endswith(".json")
    assert aot["engine"]["path"].endswith(".pt2") and exported["model"]["path"] == "linear.pt2"
    recipe = json.loads((tmp_path / jit["engine"]["path"]).read_text())
    assert recipe["format"] == "trt-routes/torch-jit-recipe@1" and recipe["graphs"] >= 1
    assert recipe["inductor_config"]["freezing"] is (jit["route"] == "-freezing=1")
    assert recipe["software"]["backend_version"] == torch.__version__
    # the locked package is the measured engine, loadable without trt-routes
    package = aoti_load_package(str(tmp_path / aot["engine"]["path"]))
    x = torch.from_numpy(feeds()["x"])
    eager = load_entry("tiny:mlp_with_examples", tmp_path, {"x": [4, 16]}).module.eval()
    with torch.no_grad():
        torch.testing.assert_close(package(x=x), eager(x), rtol=1e-4, atol=1e-5)
    assert aot["losses"]["output"]["cos"] < 1e-4
    with open_project(path).open_cache() as cache:
        trials = cache.trials_for_job("mlp/b4/cpu")
    assert all(len(t.samples) == FAST["iterations"] * FAST["repeats"] for t in trials if t.status == "ok")
    again = apply(open_project(path), ApplyOptions())
    assert again.built == 0 and again.exit_code == 0


def gpu_project(tmp_path: Path, models: dict[str, Any]) -> Path:
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    name = torch.cuda.get_device_name(0)
    return project(tmp_path, models, groups={"g": "-freezing=[0|1]", "jit": "-triton.cudagraphs=[0|1]"},
                   targets={"gpu": {"kind": "gpu", "name": name}})


@pytest.mark.gpu
def test_apply_on_gpu_jit_with_cuda_graphs(tmp_path: Path) -> None:
    """Where torch sees a CUDA GPU: float16 jit routes with and without CUDA graphs, timed with CUDA events."""
    path = gpu_project(tmp_path, {"mlp": {"entry": "tiny:mlp", "shapes": SHAPES, "settings": {"dtype": "float16"},
                                          "switch_group": "jit"}})
    result = apply(open_project(path), ApplyOptions())
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    entry = yaml.safe_load((tmp_path / "tuning.lock").read_text())["jobs"]["mlp/b4/gpu"]
    assert entry["signature"]["fields"]["gpu_name"] == torch.cuda.get_device_name(0)
    recipe = json.loads((tmp_path / entry["engine"]["path"]).read_text())
    assert recipe["settings"]["device"] == "cuda" and recipe["settings"]["dtype"] == "float16"


@pytest.mark.gpu
@pytest.mark.xfail(torch.__version__.startswith("2.11."), strict=False,
                   reason="torch 2.11's aoti_load_package segfaults on the team's H200 image (bench/RESULTS.md)")
def test_apply_on_gpu_aot(tmp_path: Path) -> None:
    """Where torch sees a CUDA GPU: an AOTInductor package built, loaded and measured. (On the team's H200 image,
    torch 2.11.0+cu130, loading any AOTInductor package segfaults; see bench/RESULTS.md.)"""
    path = gpu_project(tmp_path, {"mlp-aot": {"entry": "tiny:mlp", "shapes": SHAPES,
                                              "settings": {"dtype": "float16", "mode": "aot"}}})
    result = apply(open_project(path), ApplyOptions())
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    entry = yaml.safe_load((tmp_path / "tuning.lock").read_text())["jobs"]["mlp-aot/b4/gpu"]
    assert entry["engine"]["path"].endswith(".pt2")


def test_every_spec_has_a_reason_for_what_it_excludes() -> None:
    for spec in SPEC_BY_OPTION.values():
        assert spec.help
        assert spec.devices == {"cpu", "cuda"} or spec.why_device
        assert spec.modes == {"jit", "aot"} or spec.why_mode


@pytest.mark.slow
def test_gpu_recipe_validates_without_a_gpu() -> None:
    """recipes/torch-gpu: every knob fits its job's mode and device, every factory loads and is deterministic."""
    recipe = REPO / "recipes" / "torch-gpu" / "tuning.yaml"
    jobs = open_project(recipe).jobs
    assert len(jobs) == 8
    for job in jobs:
        assert job.model_digest and job.entry.startswith("models:")
        assert job.block_kind in (None, "absent"), job.blocked
    modes = {j.model: j.settings.get("mode", "jit") for j in jobs}
    assert sorted(modes.values()).count("aot") == 4
