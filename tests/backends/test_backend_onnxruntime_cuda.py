"""The onnxruntime-cuda backend (ONNX Runtime's CUDA execution provider). What needs no GPU runs everywhere: the
catalog and its filtering by the installed build's provider options, target routing, the serving snippet, the
float16 conversion, the recipe's missing-model hint and ``doctor``. The GPU tests run where onnxruntime-gpu
sees a CUDA device (the H200 machine) and skip elsewhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from _paths import REPO
from _project import FAST, edit_manifest, write_manifest
from onnx import TensorProto, helper, numpy_helper

from trt_routes.backends import registry
from trt_routes.backends.onnxruntime_cuda import CUDA_OPTIONS, OnnxRuntimeCudaBackend, _catalog, probe, to_float16
from trt_routes.errors import ManifestError
from trt_routes.project import open_project


def conv_model(folder: Path, name: str = "cnn.onnx", seed: int = 0) -> Path:
    """A small Conv + Relu + global pool + Gemm network, dynamic batch, float32 in and out."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((10, 8)) * 0.3).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / name))
    return folder / name


def installed(options: dict[str, str]) -> OnnxRuntimeCudaBackend:
    """The backend as it is on a machine whose probe found ``options`` (a recorded probe result: the
    coordinator reads exactly this from its memo)."""
    backend = OnnxRuntimeCudaBackend()
    backend._install = {"unavailable": None, "provider_options": options,
                        "software": {"backend": "onnxruntime-cuda", "backend_version": "1.31.1"}}
    return backend


def test_catalog_is_the_static_list_filtered_and_defaulted_by_the_installed_build() -> None:
    static = _catalog(None, "1.31.1")
    assert {k.option for k in static.knobs} == {"-precision", "-graph_optimization_level",
                                                *(f"-{o}" for o in CUDA_OPTIONS)}
    assert all(k.default in (k.values or ()) for k in static.knobs)
    assert static.get("-precision").phase == "build"  # type: ignore[union-attr]
    assert {k.phase for k in static.knobs if k.option != "-precision"} == {"runtime"}
    # a build that lacks an option drops its knob; the build's own default wins where it is a known value
    here = _catalog({"prefer_nhwc": "0", "use_tf32": "0", "cudnn_conv_algo_search": "NOT_A_VALUE"}, "1.31.1")
    assert {k.option for k in here.knobs} == {"-precision", "-graph_optimization_level", "-prefer_nhwc",
                                              "-use_tf32", "-cudnn_conv_algo_search"}
    assert here.get("-use_tf32").default == "0"  # type: ignore[union-attr]
    assert here.get("-cudnn_conv_algo_search").default == "EXHAUSTIVE"  # type: ignore[union-attr]
    assert here.digest != static.digest


def test_each_backend_names_the_other_for_the_targets_it_refuses() -> None:
    cpu, gpu = {"kind": "cpu"}, {"kind": "gpu", "name": "*H200*"}
    assert registry.get("onnxruntime").supports(gpu) is not None
    assert "onnxruntime-cuda" in (registry.get("onnxruntime").supports(gpu) or "")
    cuda = installed({o: v[1] for o, v in CUDA_OPTIONS.items()})
    assert cuda.supports(gpu) is None
    assert "backend onnxruntime" in (cuda.supports(cpu) or "")


def test_serving_names_every_provider_option_and_the_snippet_is_python() -> None:
    backend = installed({o: v[1] for o, v in CUDA_OPTIONS.items()})
    served = backend.serving({"-prefer_nhwc": "1", "-enable_cuda_graph": "1", "-use_tf32": "0"}, {}, "e.onnx")
    assert served["providers"] == ["CUDAExecutionProvider"]
    options = served["provider_options"][0]
    assert options["prefer_nhwc"] == "1" and options["enable_cuda_graph"] == "1" and options["use_tf32"] == "0"
    assert set(options) == set(CUDA_OPTIONS)  # every option at its value, defaults spelled out
    assert served["session_config"] == {"session.disable_cpu_ep_fallback": "1"}
    compile(served["python"], "serving.py", "exec")
    assert "io_binding" in served["python"]  # a CUDA graph needs fixed addresses: the snippet says so
    assert "enable_fallback=0" in served["python"]  # no silent retry on the CPU in serving either


def test_every_session_refuses_onnxruntime_s_silent_retry_on_the_cpu() -> None:
    # onnxruntime's Python API retries a session that fails on the CUDA provider (at its start or in a run) on
    # the CPU provider and only prints so; seen on the H200 (bench/RESULTS.md, gpu_search.py). Every session
    # the backend opens goes through _session, and onnxruntime reads the flag _session passes (it ignores a
    # keyword it does not know, so the real session's flag is checked)
    import ast
    import inspect
    import warnings

    import onnxruntime as ort

    from trt_routes.backends import onnxruntime_cuda as module

    calls = [n for n in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "InferenceSession"]
    assert len(calls) == 1 and [k.arg for k in calls[0].keywords] == ["providers", "enable_fallback"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # without a CUDA provider the session opens on the CPU, with a warning
        session = module._session(ort, module._tiny_model(), ort.SessionOptions(), {})
    assert session._enable_fallback is False


def test_an_option_the_installed_build_lacks_is_an_error_at_its_position(tmp_path: Path) -> None:
    backend = installed({"prefer_nhwc": "0"})
    from trt_routes.errors import RouteError

    with pytest.raises(RouteError, match="unknown onnxruntime knob '-enable_cuda_graph'"):
        backend._route({"-enable_cuda_graph": "1"})


def test_float16_conversion_keeps_the_graph_io_types(tmp_path: Path) -> None:
    source = conv_model(tmp_path)
    out = to_float16(str(source), tmp_path / "fp16" / "cnn.fp16.onnx")
    model = onnx.load(str(out))  # (its boundary Casts come last in the node list: ORT sorts, onnx's checker would not)
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [TensorProto.FLOAT]
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [TensorProto.FLOAT]
    assert {t.data_type for t in model.graph.initializer} == {TensorProto.FLOAT16}
    import onnxruntime as ort

    # the CPU provider runs the Casts ORT's converter put at the boundaries; its result is close to float32's
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    try:
        half = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception as exc:  # this CPU build has no float16 kernel for an op: the GPU tests cover it
        pytest.skip(f"the CPU provider cannot run the float16 model: {exc}")
    full = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, full, rtol=2e-2, atol=2e-2)


def test_without_the_cuda_provider_the_probe_says_why() -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    found = probe()
    assert "CUDAExecutionProvider" in str(found["unavailable"])
    reason = registry.get("onnxruntime-cuda").unavailable_reason()
    assert reason is not None and "CUDAExecutionProvider" in reason


def test_the_recipe_names_the_command_that_makes_a_missing_model(tmp_path: Path) -> None:
    recipe = tmp_path / "onnx-gpu"
    recipe.mkdir()
    for name in ("tuning.yaml", "make_models.py"):
        (recipe / name).write_text((REPO / "recipes" / "onnx-gpu" / name).read_text())
    with pytest.raises(ManifestError) as caught:
        open_project(recipe / "tuning.yaml").jobs  # noqa: B018
    assert "model file not found" in caught.value.message
    assert caught.value.hint is not None and "python make_models.py resnet50" in caught.value.hint
    assert caught.value.line is not None


def test_doctor_lists_every_backend_with_what_it_found() -> None:
    done = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "doctor"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = {line.split(":", 1)[0]: line for line in done.stdout.splitlines() if ":" in line}
    assert set(registry.known()) <= set(lines)
    assert "ok (" in lines["onnxruntime"] and "CPUExecutionProvider" in lines["onnxruntime"]


def test_both_gpu_backends_time_under_one_lock_per_physical_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from trt_routes.backends.cuda_device import gpu_lock
    from trt_routes.backends.torch_inductor.runner import gpu_lock as torch_lock

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert torch_lock("cuda:1").lock_file == gpu_lock(1).lock_file
    assert gpu_lock(1).lock_file.endswith("trt-routes-gpu-5.lock")


# -- on the GPU ---------------------------------------------------------------------------------------------

def _cuda_here() -> None:
    ort = pytest.importorskip("onnxruntime")
    if registry.get("onnxruntime-cuda").unavailable_reason() is not None:
        pytest.skip(f"no usable CUDA execution provider here (onnxruntime {ort.__version__})")


def gpu_manifest(tmp_path: Path, group: str, tolerance: float = 1e-3, **model: Any) -> Path:
    from trt_routes.backends.cuda_device import gpu_fields

    name = gpu_fields()[0]["gpu_name"]
    return write_manifest(tmp_path, {
        "schema_version": 1, "measurement": FAST, "targets": {"gpu": {"kind": "gpu", "name": name}},
        "switch_groups": {"g": group}, "strategies": {"s": {"mode": "full"}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": tolerance}]}},
        "defaults": {"backend": "onnxruntime-cuda", "targets": ["gpu"], "switch_group": "g", "strategy": "s",
                     "tolerance": "t"},
        "models": {"cnn": {"path": "cnn.onnx", "shapes": {"bs8": {"x": [8, 3, 16, 16]}}, **model}}})


@pytest.mark.gpu
def test_apply_on_the_gpu_every_route_then_frozen(tmp_path: Path) -> None:
    """Every route of precision x NHWC x CUDA graph built, measured and judged against the CPU's float32
    outputs; the lock carries the loaded CUDA and cuDNN versions; --frozen rebuilds the locked engine."""
    _cuda_here()
    from trt_routes.tune.apply import ApplyOptions, apply

    conv_model(tmp_path)
    path = gpu_manifest(tmp_path, "-precision=[fp32|fp16] -prefer_nhwc=[0|1] -enable_cuda_graph=[0|1]")
    result = apply(open_project(path), ApplyOptions())
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    with open_project(path).open_cache() as cache:
        trials = cache.trials_for_job("cnn/bs8/gpu")
    assert len({t.route for t in trials}) == 8
    assert all(t.status == "ok" for t in trials), [(t.route, t.error) for t in trials if t.status != "ok"]
    entry = yaml.safe_load((tmp_path / "tuning.lock").read_text())["jobs"]["cnn/bs8/gpu"]
    fields = entry["signature"]["fields"]
    assert fields["package"] == "onnxruntime-gpu" and fields["cuda_runtime"] and fields["cudnn"]
    frozen = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "apply", "--frozen", "-m", str(path)],
                            capture_output=True, text=True, timeout=600, check=False)
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr


@pytest.mark.gpu
def test_a_cuda_graph_route_gives_the_plain_routes_outputs_for_new_inputs(tmp_path: Path) -> None:
    _cuda_here()
    from trt_routes.backends.base import BuildSpec

    source = conv_model(tmp_path)
    backend = registry.get("onnxruntime-cuda")
    profile = {"x": {"min": [4, 3, 16, 16], "opt": [4, 3, 16, 16], "max": [4, 3, 16, 16]}}
    outs = []
    for route in ({}, {"-enable_cuda_graph": "1"}):
        spec = BuildSpec(str(source), route, profile, work_dir=str(tmp_path / str(len(outs))))
        engine = tmp_path / f"e{len(outs)}.onnx"
        backend.build(spec, engine)
        runner = backend.load(engine, spec)
        rng = np.random.default_rng(0)
        feeds = [{"x": rng.standard_normal((4, 3, 16, 16)).astype(np.float32)} for _ in range(3)]
        outs.append([runner.run(f)["y"] for f in feeds])
        assert len(runner.time(feeds[0], 2, 3, 2)) == 6
    for plain, graphed in zip(*outs, strict=True):
        np.testing.assert_allclose(graphed, plain, rtol=1e-5, atol=1e-5)
    assert not np.allclose(outs[1][0], outs[1][1])  # new inputs reached the captured graph


@pytest.mark.gpu
def test_a_node_the_cuda_provider_cannot_take_fails_the_build_by_name(tmp_path: Path) -> None:
    _cuda_here()
    from trt_routes.backends.base import BuildSpec

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Unique", ["r"], ["y"], name="the_unique_node", sorted=1)], "u",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "u.onnx"))
    spec = BuildSpec(str(tmp_path / "u.onnx"), {}, {"x": {"min": [8], "opt": [8], "max": [8]}},
                     work_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="CPU fallback is disabled") as caught:
        registry.get("onnxruntime-cuda").build(spec, tmp_path / "e.onnx")
    assert "the_unique_node" in str(caught.value)


@pytest.mark.gpu
def test_a_route_whose_float16_outputs_overflow_is_timed_failed_and_never_chosen(tmp_path: Path) -> None:
    """A real exporter's network (torchvision's ResNet-18, torch.onnx.export) whose logits leave float16's range
    (its classifier's weights scaled up, as in networks whose activations outgrow half precision): the fp16
    route's outputs are infinite. The trial is ``accuracy-failed``, named, and still timed (its time tells a
    group screening what the other values of a group changed); the lock takes the fp32 route."""
    _cuda_here()
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    from trt_routes.tune.apply import ApplyOptions, apply

    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None).eval()
    with torch.no_grad():
        net.fc.weight.mul_(1e6)  # logits of about 1e5: finite in float32, past float16's 65504
        torch.onnx.export(net, (torch.randn(8, 3, 224, 224),), str(tmp_path / "cnn.onnx"), input_names=["x"],
                          output_names=["y"], opset_version=17, dynamo=False)
    path = gpu_manifest(tmp_path, "-precision=[fp32|fp16]")
    edit_manifest(path, lambda data: data["models"]["cnn"]["shapes"]["bs8"].update(x=[8, 3, 224, 224]))
    result = apply(open_project(path), ApplyOptions())
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    with open_project(path).open_cache() as cache:
        trials = {t.route: t for t in cache.trials_for_job("cnn/bs8/gpu")}
    half = next(t for route, t in trials.items() if "fp16" in route)
    assert half.status == "accuracy-failed" and "non-finite" in half.error, (half.status, half.error)
    assert half.median_ms is not None and half.median_ms > 0 and half.samples
    assert all(t.status == "ok" for route, t in trials.items() if "fp16" not in route)
    entry = yaml.safe_load((tmp_path / "tuning.lock").read_text())["jobs"]["cnn/bs8/gpu"]
    assert "fp16" not in entry["route"]
