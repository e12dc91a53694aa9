"""The ONNX Runtime backend against the real onnxruntime (CPU) and the generated quickstart models."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from trt_routes.backends import registry
from trt_routes.backends.base import BuildSpec
from trt_routes.backends.onnxruntime import DISABLE, OnnxRuntimeBackend, OnnxRuntimeRunner
from trt_routes.errors import RouteError

INPUTS = {"resnet_like": ("input", [2, 3, 32, 32]), "transformer_block": ("x", [2, 8, 64])}
DYNAMIC = {
    "resnet_like": {"input": {"min": [1, 3, 32, 32], "opt": [2, 3, 32, 32], "max": [8, 3, 32, 32]}},
    "transformer_block": {"x": {"min": [1, 1, 64], "opt": [2, 8, 64], "max": [8, 32, 64]}},
}


@pytest.fixture(scope="module")
def backend() -> OnnxRuntimeBackend:
    return OnnxRuntimeBackend()


def static_profile(model: str) -> dict[str, dict[str, list[int]]]:
    name, shape = INPUTS[model]
    return {name: {"min": shape, "opt": shape, "max": shape}}


def feeds_for(model: str, seed: int = 0) -> dict[str, np.ndarray]:
    name, shape = INPUTS[model]
    return {name: np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)}


def spec_for(path: Path, route: dict[str, str], profile: dict[str, dict[str, list[int]]],
             work: Path) -> BuildSpec:
    return BuildSpec(model_path=str(path), route=route, profile=profile, target={"kind": "cpu"},
                     work_dir=str(work))


def build(backend: OnnxRuntimeBackend, path: Path, route: dict[str, str],
          profile: dict[str, dict[str, list[int]]], work: Path) -> tuple[BuildSpec, Path, str]:
    spec = spec_for(path, route, profile, work)
    tag = "_".join(f"{k.strip('-').replace(':', '.')}={v}" for k, v in sorted(route.items())) or "default"
    engine = work / f"{path.stem}.{tag}.onnx"
    log = backend.build(spec, engine)
    return spec, engine, log


def ops(path: Path) -> Counter[str]:
    model = onnx.load(str(path))
    return Counter(f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in model.graph.node)


def domains(path: Path) -> set[str]:
    return {op.split(":")[0] for op in ops(path)}


# -- coordinator side -------------------------------------------------------------------------

def test_registry_gives_an_available_backend() -> None:
    b = registry.require("onnxruntime")
    assert isinstance(b, OnnxRuntimeBackend)
    assert b.unavailable_reason() is None
    assert (b.name, b.engine_suffix, b.install_hint) == ("onnxruntime", ".onnx", "pip install onnxruntime")


def test_software_and_catalog_version(backend: OnnxRuntimeBackend) -> None:
    sw = backend.software()
    assert sw["backend"] == "onnxruntime"
    assert sw["backend_version"] == ort.__version__
    assert sw["providers"] == "CPUExecutionProvider"
    assert backend.software() == sw
    cat = backend.catalog()
    assert cat.backend == "onnxruntime" and cat.version == ort.__version__
    assert backend.catalog() is cat
    assert backend.reference_version() == f"onnxruntime:{ort.__version__}"


def test_catalog_shape(backend: OnnxRuntimeBackend) -> None:
    cat = backend.catalog()
    assert len(set(cat.options)) == len(cat.options)
    for knob in cat.knobs:
        assert knob.option.startswith("-"), knob.option
        assert knob.help and knob.phase in ("build", "runtime")
        assert knob.allows(knob.default), knob.option
    for name in DISABLE:
        knob = cat.get(f"-disable:{name}")
        assert knob is not None and knob.values == ("off", "on")
        assert knob.default == "off" and knob.phase == "build"
    level = cat.get("-graph_optimization_level")
    assert level is not None and level.values == ("disabled", "basic", "extended", "layout", "all")
    for option in ("-intra_op_num_threads", "-inter_op_num_threads", "-dynamic_block_base"):
        knob = cat.get(option)
        assert knob is not None and knob.is_open and knob.phase == "runtime"


def test_catalog_defaults_are_what_a_default_session_uses(
        backend: OnnxRuntimeBackend, tiny_models: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    cat = backend.catalog()

    def default(option: str) -> str:
        knob = cat.get(option)
        assert knob is not None
        return knob.default

    so = ort.SessionOptions()
    level_names = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                   "extended": "ORT_ENABLE_EXTENDED", "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}
    assert so.graph_optimization_level.name == level_names[default("-graph_optimization_level")]
    assert so.execution_mode.name == f"ORT_{default('-execution_mode').upper()}"
    assert so.execution_order.name == default("-execution_order").upper()
    assert str(so.intra_op_num_threads) == default("-intra_op_num_threads")
    assert str(so.inter_op_num_threads) == default("-inter_op_num_threads")
    assert str(int(so.enable_mem_pattern)) == default("-enable_mem_pattern")
    assert str(int(so.enable_cpu_mem_arena)) == default("-enable_cpu_mem_arena")
    for key in ("session.intra_op.allow_spinning", "session.disable_prepacking",
                "session.set_denormal_as_zero", "session.dynamic_block_base",
                "optimization.enable_gelu_approximation"):
        with pytest.raises(RuntimeError):  # not set: ORT's built-in default applies
            so.get_session_config_entry(key)

    # At info level ORT says what it set up: the thread-pool parameters it keeps when no config entry
    # overrides them, and (after reading the config) the dynamic block base. (Its flush-to-zero line is
    # logged once per process only, so it cannot be checked here.)
    so.log_severity_level = 1
    capfd.readouterr()
    ort.InferenceSession(str(tiny_models["resnet_like"]), so, providers=["CPUExecutionProvider"])
    log = capfd.readouterr().err
    intra = re.search(r"intra_op_param:OrtThreadPoolParams \{([^}]*)\}", log)
    assert intra is not None
    assert re.search(rf"allow_spinning: {default('-allow_spinning')}\b", intra.group(1))
    assert f"Dynamic block base set to {default('-dynamic_block_base')}\n" in log


def test_supports_cpu_only(backend: OnnxRuntimeBackend) -> None:
    assert backend.supports({"kind": "cpu"}) is None
    reason = backend.supports({"kind": "gpu", "name": "*H200*", "compute_capability": "9.0"})
    assert reason is not None and "CPU" in reason


# -- build: the optimized graph -----------------------------------------------------------------

def test_optimization_levels_change_the_graph(backend: OnnxRuntimeBackend, tiny_models: dict[str, Path],
                                              tmp_path: Path) -> None:
    path = tiny_models["resnet_like"]
    prof = static_profile("resnet_like")
    by_level = {level: ops(build(backend, path, {"-graph_optimization_level": level}, prof, tmp_path)[1])
                for level in ("disabled", "basic", "extended", "layout", "all")}
    original = Counter(f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in onnx.load(str(path)).graph.node)
    assert by_level["disabled"] == original
    assert by_level["basic"]["ai.onnx:BatchNormalization"] == 0 < original["ai.onnx:BatchNormalization"]
    assert by_level["extended"]["com.microsoft:FusedConv"] > 0
    assert not any(op.startswith("com.microsoft.nchwc:") for op in by_level["extended"])
    for level in ("layout", "all"):
        assert by_level[level]["com.microsoft.nchwc:Conv"] == original["ai.onnx:Conv"]


def test_disable_nchwc_removes_nchwc_ops(backend: OnnxRuntimeBackend, tiny_models: dict[str, Path],
                                         tmp_path: Path) -> None:
    path = tiny_models["resnet_like"]
    prof = static_profile("resnet_like")
    _, default_engine, default_log = build(backend, path, {}, prof, tmp_path)
    _, engine, log = build(backend, path, {"-disable:NchwcTransformer": "on"}, prof, tmp_path)
    assert "com.microsoft.nchwc" in domains(default_engine)
    assert "com.microsoft.nchwc" not in domains(engine)
    assert ops(engine)["com.microsoft:FusedConv"] > 0
    assert "NchwcTransformer" in default_log and "disabled_optimizers: NchwcTransformer" in log


def test_gelu_knobs(backend: OnnxRuntimeBackend, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    path = tiny_models["transformer_block"]
    prof = static_profile("transformer_block")
    default = ops(build(backend, path, {}, prof, tmp_path)[1])
    no_gelu = ops(build(backend, path, {"-disable:GeluFusion": "on"}, prof, tmp_path)[1])
    approx = ops(build(backend, path, {"-enable_gelu_approximation": "1"}, prof, tmp_path)[1])
    assert default["com.microsoft:BiasGelu"] == 1 and default["ai.onnx:Erf"] == 0
    assert no_gelu["ai.onnx:Erf"] == 1 and no_gelu["com.microsoft:BiasGelu"] == 0
    assert approx["com.microsoft:FastGelu"] == 1 and approx["com.microsoft:BiasGelu"] == 0


def test_free_dimension_overrides(backend: OnnxRuntimeBackend, tiny_models: dict[str, Path],
                                  tmp_path: Path) -> None:
    path = tiny_models["transformer_block"]
    on = {"-free_dimension_overrides": "on"}
    _, static_engine, log = build(backend, path, on, static_profile("transformer_block"), tmp_path / "s")
    dims = [d.dim_value for d in onnx.load(str(static_engine)).graph.input[0].type.tensor_type.shape.dim]
    assert dims == INPUTS["transformer_block"][1]
    assert ops(static_engine)["ai.onnx:Gemm"] > 0  # MatMulAddFusion fires once shapes are static
    assert "N=2, S=8" in log
    # A dynamic profile fixes no symbolic dimension: the engine is the default one, byte for byte.
    _, dyn_on, _ = build(backend, path, on, DYNAMIC["transformer_block"], tmp_path / "d1")
    _, dyn_off, _ = build(backend, path, {}, DYNAMIC["transformer_block"], tmp_path / "d2")
    assert dyn_on.read_bytes() == dyn_off.read_bytes()


def _probe(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], shape: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _c(name: str, value: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def _probe_layer_norm() -> onnx.ModelProto:
    n = helper.make_node
    return _probe([n("ReduceMean", ["x"], ["m"], axes=[-1]), n("Sub", ["x", "m"], ["d"]),
                   n("Pow", ["d", "two"], ["p"]), n("ReduceMean", ["p"], ["v"], axes=[-1]),
                   n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["s"]), n("Div", ["d", "s"], ["nd"]),
                   n("Mul", ["nd", "g"], ["ng"]), n("Add", ["ng", "b"], ["y"])],
                  [_c("two", 2.0), _c("eps", 1e-5), _c("g", np.ones(16)), _c("b", np.zeros(16))], [2, 4, 16])


def _probe_skip_layer_norm() -> onnx.ModelProto:
    n = helper.make_node
    return _probe([n("Relu", ["x"], ["r"]), n("Add", ["x", "r"], ["a"]),
                   n("LayerNormalization", ["a", "g", "b"], ["y"], axis=-1)],
                  [_c("g", np.ones(16)), _c("b", np.zeros(16))], [2, 4, 16])


def _probe_constant_folding() -> onnx.ModelProto:
    n = helper.make_node
    return _probe([n("Add", ["c1", "c2"], ["c3"]), n("Mul", ["x", "c3"], ["y"])],
                  [_c("c1", np.ones(16)), _c("c2", np.ones(16))], [2, 16])


def _probe_cse() -> onnx.ModelProto:
    n = helper.make_node
    return _probe([n("Relu", ["x"], ["a"]), n("Relu", ["x"], ["b"]), n("Add", ["a", "b"], ["y"])],
                  [], [2, 16])


def _probe_gemm_relu() -> onnx.ModelProto:
    n = helper.make_node
    return _probe([n("Gemm", ["x", "w", "b"], ["g"]), n("Relu", ["g"], ["y"])],
                  [_c("w", np.ones((16, 8))), _c("b", np.ones(8))], [4, 16])


def _probe_quick_gelu() -> onnx.ModelProto:
    n = helper.make_node
    return _probe([n("Sigmoid", ["x"], ["s"]), n("Mul", ["x", "s"], ["y"])], [], [4, 16])


def _probe_transpose() -> onnx.ModelProto:
    n = helper.make_node
    return _probe([n("Transpose", ["x"], ["t"], perm=[0, 2, 1]), n("Relu", ["t"], ["r"]),
                   n("Transpose", ["r"], ["y"], perm=[0, 2, 1])], [], [2, 4, 16])


#: Where each -disable knob shows: a quickstart model (static profile) or a small probe graph, and the
#: build route it is compared against (some transformers only run when another one does not).
WHERE: dict[str, tuple[str | Callable[[], onnx.ModelProto], dict[str, str]]] = {
    "NchwcTransformer": ("resnet_like", {}),
    "ConvBNFusion": ("resnet_like", {}),
    "ConvActivationFusion": ("resnet_like", {"-disable:NchwcTransformer": "on"}),
    "ConvAddActivationFusion": ("resnet_like", {"-disable:NchwcTransformer": "on"}),
    "GeluFusion": ("transformer_block", {}),
    "BiasGeluFusion": ("transformer_block", {}),
    "MatMulScaleFusion": ("transformer_block", {}),
    "MatMulAddFusion": ("transformer_block", {"-free_dimension_overrides": "on"}),
    "ReshapeFusion": ("transformer_block", {"-free_dimension_overrides": "on"}),
    "LayerNormFusion": (_probe_layer_norm, {}),
    "SkipLayerNormFusion": (_probe_skip_layer_norm, {}),
    "ConstantFolding": (_probe_constant_folding, {}),
    "CommonSubexpressionElimination": (_probe_cse, {}),
    "GemmActivationFusion": (_probe_gemm_relu, {}),
    "QuickGeluFusion": (_probe_quick_gelu, {}),
    "TransposeOptimizer": (_probe_transpose, {}),
}


def test_every_disable_knob_is_covered() -> None:
    assert set(WHERE) == set(DISABLE)


@pytest.mark.parametrize("name", sorted(DISABLE))
def test_disable_knob_changes_the_optimized_graph(name: str, backend: OnnxRuntimeBackend,
                                                  tiny_models: dict[str, Path], tmp_path: Path) -> None:
    source, base_route = WHERE[name]
    if isinstance(source, str):
        path, profile = tiny_models[source], static_profile(source)
    else:
        path = tmp_path / "probe.onnx"
        model = source()
        onnx.save(model, str(path))
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        profile = {"x": {"min": shape, "opt": shape, "max": shape}}
    _, base_engine, _ = build(backend, path, base_route, profile, tmp_path / "base")
    _, engine, log = build(backend, path, {**base_route, f"-disable:{name}": "on"}, profile, tmp_path / "off")
    assert ops(engine) != ops(base_engine)
    for ort_name in DISABLE[name][0]:
        assert ort_name in log


def test_builds_are_deterministic_and_runtime_knobs_stay_out_of_the_engine(
        backend: OnnxRuntimeBackend, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    for model, path in tiny_models.items():
        prof = static_profile(model)
        first = build(backend, path, {}, prof, tmp_path / "a")[1].read_bytes()
        second = build(backend, path, {}, prof, tmp_path / "b")[1].read_bytes()
        runtime = build(backend, path, {"-intra_op_num_threads": "1", "-disable_prepacking": "1",
                                        "-execution_mode": "parallel"}, prof, tmp_path / "c")[1].read_bytes()
        assert first == second == runtime


# -- build -> load -> run ------------------------------------------------------------------------

def _single_knob_routes() -> list[tuple[str, str]]:
    cat = OnnxRuntimeBackend().catalog()
    routes = [(k.option, v) for k in cat.knobs if k.values is not None for v in k.values if v != k.default]
    routes += [("-intra_op_num_threads", "1"), ("-intra_op_num_threads", "2"), ("-inter_op_num_threads", "2"),
               ("-dynamic_block_base", "4")]
    return routes


@pytest.mark.parametrize("model", sorted(INPUTS))
@pytest.mark.parametrize(("option", "value"), _single_knob_routes())
def test_single_knob_route_runs_close_to_reference(option: str, value: str, model: str,
                                                   backend: OnnxRuntimeBackend, tiny_models: dict[str, Path],
                                                   tmp_path: Path) -> None:
    spec, engine, _ = build(backend, tiny_models[model], {option: value}, static_profile(model), tmp_path)
    runner = backend.load(engine, spec)
    feeds = feeds_for(model)
    got = runner.run(feeds)
    ref = backend.reference(spec, feeds)
    assert set(got) == set(ref) == {o.name for o in onnx.load(str(tiny_models[model])).graph.output}
    # The tanh approximation of GELU is the one knob allowed to move results visibly.
    atol = 1e-2 if option == "-enable_gelu_approximation" else 1e-4
    for name, out in got.items():
        assert out.shape == ref[name].shape and out.dtype == np.float32
        np.testing.assert_allclose(out, ref[name], rtol=1e-3, atol=atol)


def test_dynamic_engine_runs_other_shapes(backend: OnnxRuntimeBackend, tiny_models: dict[str, Path],
                                          tmp_path: Path) -> None:
    path = tiny_models["transformer_block"]
    spec, engine, _ = build(backend, path, {}, DYNAMIC["transformer_block"], tmp_path)
    runner = backend.load(engine, spec)
    for shape in ([1, 1, 64], [8, 32, 64]):
        feeds = {"x": np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)}
        out = runner.run(feeds)["y"]
        np.testing.assert_allclose(out, backend.reference(spec, feeds)["y"], rtol=1e-3, atol=1e-4)


def test_runtime_knobs_are_applied(backend: OnnxRuntimeBackend, tiny_models: dict[str, Path], tmp_path: Path,
                                   capfd: pytest.CaptureFixture[str]) -> None:
    route = {"-execution_mode": "parallel", "-execution_order": "priority_based",
             "-intra_op_num_threads": "1", "-inter_op_num_threads": "2", "-allow_spinning": "0",
             "-dynamic_block_base": "4",
             "-disable_prepacking": "1", "-enable_mem_pattern": "0", "-enable_cpu_mem_arena": "0",
             "-set_denormal_as_zero": "1"}
    prof = static_profile("resnet_like")
    spec, engine, _ = build(backend, tiny_models["resnet_like"], route, prof, tmp_path)
    runner = backend.load(engine, spec)
    assert isinstance(runner, OnnxRuntimeRunner)
    so = runner.session.get_session_options()
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert so.execution_order == ort.ExecutionOrder.PRIORITY_BASED
    assert (so.intra_op_num_threads, so.inter_op_num_threads) == (1, 2)
    assert not so.enable_mem_pattern and not so.enable_cpu_mem_arena
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert so.get_session_config_entry("session.dynamic_block_base") == "4"
    assert so.get_session_config_entry("session.disable_prepacking") == "1"
    assert so.get_session_config_entry("session.set_denormal_as_zero") == "1"
    feeds = feeds_for("resnet_like")
    np.testing.assert_allclose(runner.run(feeds)["logits"], backend.reference(spec, feeds)["logits"],
                               rtol=1e-3, atol=1e-4)

    # What ORT says it set up from those options.
    so.log_severity_level = 1
    capfd.readouterr()
    ort.InferenceSession(str(engine), so, providers=["CPUExecutionProvider"])
    log = capfd.readouterr().err
    intra = re.search(r"intra_op_param:OrtThreadPoolParams \{([^}]*)\}", log)
    assert intra is not None and "thread_pool_size: 1 " in intra.group(1)
    assert "Dynamic block base set to 4\n" in log


def test_timing_returns_one_positive_sample_per_iteration(
        backend: OnnxRuntimeBackend, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    model = "transformer_block"
    spec, engine, _ = build(backend, tiny_models[model], {}, static_profile(model), tmp_path)
    samples = backend.load(engine, spec).time(feeds_for(model), warmup=2, iterations=4, repeats=3)
    assert len(samples) == 12
    assert all(isinstance(s, float) and s > 0 for s in samples)


def test_reference_is_one_session_per_model_and_matches_an_unoptimized_run(
        backend: OnnxRuntimeBackend, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    path = tiny_models["resnet_like"]
    spec = spec_for(path, {"-graph_optimization_level": "disabled"}, static_profile("resnet_like"), tmp_path)
    feeds = feeds_for("resnet_like", seed=3)
    first = backend.reference(spec, {k: v.astype(np.float64) for k, v in feeds.items()})  # cast to float32
    second = backend.reference(spec, feeds)
    assert backend._reference_runner(str(path)) is backend._reference_runner(str(path))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(first["logits"], second["logits"])
    np.testing.assert_allclose(first["logits"], plain, rtol=1e-4, atol=1e-5)


# -- errors ---------------------------------------------------------------------------------------

def test_bad_routes_are_rejected(backend: OnnxRuntimeBackend, tiny_models: dict[str, Path],
                                 tmp_path: Path) -> None:
    prof = static_profile("resnet_like")
    with pytest.raises(RouteError, match="unknown onnxruntime knob"):
        build(backend, tiny_models["resnet_like"], {"-no_such_knob": "1"}, prof, tmp_path)
    with pytest.raises(RouteError, match="not allowed"):
        build(backend, tiny_models["resnet_like"], {"-graph_optimization_level": "max"}, prof, tmp_path)
    with pytest.raises(RouteError, match="not allowed"):
        build(backend, tiny_models["resnet_like"], {"-intra_op_num_threads": "many"}, prof, tmp_path)


def test_build_error_carries_ort_message(backend: OnnxRuntimeBackend, tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not an onnx model")
    engine = tmp_path / "engine.onnx"
    with pytest.raises(RuntimeError, match=r"onnxruntime could not optimize .*broken\.onnx") as info:
        backend.build(spec_for(broken, {}, {"x": {"min": [1], "opt": [1], "max": [1]}}, tmp_path), engine)
    assert "INVALID_PROTOBUF" in str(info.value) or "Protobuf parsing failed" in str(info.value)
    assert not engine.exists()


@pytest.mark.parametrize("level", ["basic", "all"])
def test_an_engine_built_from_external_data_is_self_contained(backend: OnnxRuntimeBackend, tmp_path: Path,
                                                              level: str) -> None:
    from _real_models import external_data_mlp

    model = external_data_mlp(tmp_path / "src", location="weights/mlp.onnx.data")
    data = tmp_path / "src" / "weights" / "mlp.onnx.data"
    (tmp_path / "linked.data").hardlink_to(data)  # a DVC cache or a Ray node links its files
    profile = {"x": {"min": [2, 16], "opt": [2, 16], "max": [2, 16]}}
    spec = BuildSpec(model_path=str(model), route={"-graph_optimization_level": level}, profile=profile,
                     settings={}, target={"kind": "cpu"})
    engine = tmp_path / "store" / "ab" / "engine"  # where the blob store keeps it: no .data beside it
    log = backend.build(spec, engine)
    assert "external data embedded: " in log
    assert not any(t.data_location == TensorProto.EXTERNAL
                   for t in onnx.load(str(engine), load_external_data=False).graph.initializer)
    x = {"x": np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)}
    out = backend.load(engine, spec).run(x)["y"]
    np.testing.assert_allclose(out, backend.reference(spec, x)["y"], rtol=1e-5, atol=1e-5)
