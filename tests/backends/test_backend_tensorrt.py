"""TensorRT backend against the stand-in ``tensorrt`` and ``cuda`` modules of tests/standin.

The stand-ins are put on sys.path by the ``trt`` fixture for one test at a time, never globally."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _paths import STANDIN
from _tensorrt_knobs import PUBLIC_KNOBS
from _trt_models import (
    CAST_PROFILE,
    PROFILE,
    RESHAPE_PROFILE,
    cast_model,
    conv_model,
    custom_op_model,
    exported_reshape_model,
    reshape_model,
)

from trt_routes.backends import cuda_device
from trt_routes.backends.base import BuildSpec
from trt_routes.backends.tensorrt import (
    SETTINGS,
    CatalogEntrySkipped,
    CatalogFormatError,
    TensorRTBackend,
    TensorRTBuildError,
    TensorRTRunError,
    check_settings,
    parse_catalog,
    read_catalog,
    readback_differences,
    route_problems,
)
from trt_routes.errors import BackendUnavailable, ManifestError, RouteError, TrtRoutesError
from trt_routes.lockfile import Lockfile

STANDIN = STANDIN
PREFIX = "TensorRT Global Performance Tuner unavailable"


def _purge_standins() -> None:
    for name in list(sys.modules):
        if name in ("tensorrt", "cuda") or name.startswith(("tensorrt.", "cuda.")):
            del sys.modules[name]


@pytest.fixture
def trt(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The stand-in ``tensorrt`` (and ``cuda``) for this test only; real modules come back afterwards."""
    saved = {
        n: m
        for n, m in sys.modules.items()
        if n in ("tensorrt", "cuda") or n.startswith(("tensorrt.", "cuda."))
    }
    _purge_standins()
    monkeypatch.syspath_prepend(str(STANDIN))
    import tensorrt

    assert tensorrt.__standin__
    yield tensorrt
    _purge_standins()
    sys.modules.update(saved)


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes timing caches outside its temp folder."""
    monkeypatch.delenv("TRT_ROUTES_TIMING_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def cudart(trt: ModuleType) -> ModuleType:
    from cuda.bindings import runtime

    assert runtime.__file__.startswith(str(STANDIN))
    return runtime


# -- specs -----------------------------------------------------------------------------------------
def spec_for(model: str, tmp: Path, trial: str = "trial-1", **kw: Any) -> BuildSpec:
    fields: dict[str, Any] = {
        "route": {},
        "profile": PROFILE,
        "settings": {},
        "target": {"kind": "gpu", "name": "*H200*", "gpu_name": "NVIDIA H200", "compute_capability": "9.0"},
        "work_dir": str(tmp / "trials" / trial),
    }
    fields.update(kw)
    return BuildSpec(model_path=model, **fields)


# -- catalog parsing (pure) ------------------------------------------------------------------------
def _catalog_json(*options: dict[str, str], tuner: str = "2.19.15") -> str:
    return json.dumps({"tuner_version": tuner, "tuner_options": list(options)})


def _opt(option: str, allowed: str, default: str, help_text: str = "h") -> dict[str, str]:
    return {"option": option, "allowed_values": allowed, "default_value": default, "help": help_text}


def test_parse_catalog_closed_and_open_knobs() -> None:
    text = _catalog_json(
        _opt("-conv_use_long_w", "-conv_use_long_w=[on|off]", "on", "long W"),
        _opt("-kgen:codegen:cuda_tile", "-kgen:codegen:cuda_tile=[ 0 | 1 |2|3 ]", "1"),
        _opt("-cask_fusion:num_tactics", "-cask_fusion:num_tactics=int32_t", "8"),
        _opt("-peep:max", "-peep:max=int", "16"),
        _opt("-kgen:tiling", "-kgen:tiling=[0|...|64]", "0"),
        _opt("-empty_list", "-empty_list=[]", "0"),
    )
    catalog = parse_catalog(text, version="11.1.0.106")
    assert catalog.backend == "tensorrt" and catalog.version == "11.1.0.106"
    assert catalog.tuner_version == "2.19.15"
    assert catalog.options == [
        "-conv_use_long_w",
        "-kgen:codegen:cuda_tile",
        "-cask_fusion:num_tactics",
        "-peep:max",
        "-kgen:tiling",
        "-empty_list",
    ]
    long_w = catalog.get("-conv_use_long_w")
    assert long_w is not None and long_w.values == ("on", "off") and long_w.default == "on"
    assert long_w.help == "long W"
    tile = catalog.get("-kgen:codegen:cuda_tile")
    assert tile is not None and tile.values == ("0", "1", "2", "3")
    for open_knob in ("-cask_fusion:num_tactics", "-peep:max", "-kgen:tiling", "-empty_list"):
        knob = catalog.get(open_knob)
        assert knob is not None and knob.is_open, open_knob
        assert knob.allows("12") and not knob.allows("twelve")


def test_catalog_digest_follows_defaults_not_help() -> None:
    a = parse_catalog(_catalog_json(_opt("-copy_ppg", "-copy_ppg=[on|off]", "on", "one")), version="11.1")
    b = parse_catalog(_catalog_json(_opt("-copy_ppg", "-copy_ppg=[on|off]", "on", "two")), version="11.1")
    c = parse_catalog(_catalog_json(_opt("-copy_ppg", "-copy_ppg=[on|off]", "off", "one")), version="11.1")
    assert a.digest == b.digest != c.digest


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ('{"tuner_version": "1", "tuner_options": [', "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"tuner_version": 2, "tuner_options": []}', "tuner_version"),
        ('{"tuner_version": "2", "tuner_options": {}}', "tuner_options"),
        ('{"tuner_version": "2", "tuner_options": []}', "no usable entry"),
        (_catalog_json({"option": "-a", "allowed_values": "-a=[0|1]"}), "no usable entry"),
    ],
)
def test_parse_catalog_rejects_malformed_json(text: str, needle: str) -> None:
    with pytest.raises(CatalogFormatError) as info:
        parse_catalog(text, version="11.1")
    assert needle in info.value.message
    assert isinstance(info.value, TrtRoutesError)


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("not an object", "is not an object"),
        ({"option": "-b", "allowed_values": "-b=[0|1]", "default_value": 0}, "default_value is not a string"),
        ({"option": "-b", "allowed_values": "-b=[0|1]"}, "has no default_value"),
        (_opt("b", "b=[0|1]", "0"), "bad option name"),
        (_opt("-b c", "-b=[0|1]", "0"), "bad option name"),
        (_opt("-b", "-b=int", "auto"), "has the default 'auto', not of its type int"),
        (_opt("-b", "-b=float", "fast"), "has the default 'fast', not of its type float"),
    ],
)
def test_one_odd_catalog_entry_is_skipped_not_fatal(entry: Any, reason: str) -> None:
    """trtexec's BuildRouteKnobDatabase skips entries it cannot read; so do we, and say which."""
    text = _catalog_json(_opt("-a", "-a=[on|off]", "on"), entry, _opt("-c", "-c=int32_t", "4"))
    reading = read_catalog(text, version="11.4")
    assert reading.catalog.options == ["-a", "-c"]
    assert len(reading.skipped) == 1 and reason in reading.skipped[0] and "tuner_options[1]" in reading.skipped[0]
    assert parse_catalog(text, version="11.4").digest == reading.catalog.digest


def test_a_repeated_catalog_entry_replaces_the_earlier_like_trtexec() -> None:
    text = _catalog_json(_opt("-a", "-a=[0|1]", "0"), _opt("-b", "-b=[x|y]", "x"), _opt("-a", "-a=[0|1|2]", "1"))
    reading = read_catalog(text, version="11.4")
    knob = reading.catalog.get("-a")
    assert reading.catalog.options == ["-a", "-b"]
    assert knob is not None and knob.values == ("0", "1", "2") and knob.default == "1"
    assert reading.skipped == ("tuner_options[2]: option -a is listed again; the later entry replaces the earlier",)


def test_backend_stays_available_with_an_odd_catalog_entry(trt: ModuleType, tmp_path: Path) -> None:
    catalog = json.loads(trt.STANDIN.catalog_json)
    catalog["tuner_options"].insert(2, {"option": "-future_knob", "allowed_values": ["on", "off"]})
    trt.STANDIN.catalog_json = json.dumps(catalog)
    backend = TensorRTBackend()
    with pytest.warns(CatalogEntrySkipped, match=r"1 build-route catalog entry skipped: tuner_options\[2\]"):
        assert backend.unavailable_reason() is None
    assert set(backend.catalog().options) == PUBLIC_KNOBS
    log = backend.build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path), tmp_path / "e.engine")
    assert "catalog: tuner_options[2].allowed_values is not a string" in log


def test_route_problems_and_readback_differences() -> None:
    catalog = parse_catalog(
        _catalog_json(
            _opt("-copy_ppg", "-copy_ppg=[on|off]", "on"),
            _opt("-peep:max", "-peep:max=int", "16"),
            _opt("-kgen:tiling", "-kgen:tiling=[0|1|2]", "0"),
        ),
        version="11.1",
    )
    assert route_problems({"-copy_ppg": "off", "-peep:max": "4"}, catalog) == []
    # an open knob takes any fixed value, as trtexec's parseExpr does, except the type word int32_t
    assert route_problems({"-peep:max": "four"}, catalog) == []
    problems = route_problems({"-copy_pg": "off", "-peep:max": "int32_t", "-kgen:tiling": "7"}, catalog)
    assert len(problems) == 3
    assert any("unknown knob -copy_pg" in p and "-copy_ppg" in p for p in problems)
    assert any("-peep:max=int32_t" in p and "one fixed value" in p for p in problems)
    assert any("-kgen:tiling=7" in p and "0|1|2" in p for p in problems)
    # knobs at their default are the same route whether or not TensorRT spells them out
    assert readback_differences({"-copy_ppg": "off"}, "-copy_ppg=off -peep:max=16", catalog) == []
    diffs = readback_differences(
        {"-copy_ppg": "off", "-kgen:tiling": "2"}, "-kgen:tiling=1 -peep:max=3", catalog
    )
    assert diffs == [
        "-copy_ppg=off was dropped (TensorRT keeps the default on)",
        "-kgen:tiling=2 became -kgen:tiling=1",
        "-peep:max=3 was added",
    ]


@pytest.mark.parametrize(
    "readback",
    [
        "-copy_ppg=off -peep:max=4",
        "-peep:max=4 -copy_ppg=off",  # another order
        "-copy_ppg=off -kgen:tiling=0 -peep:max=4",  # defaults spelled out
        "-copy_ppg=off, -peep:max=4",  # another separator
        "-copy_ppg = off  -peep:max=+04",  # spaces around '=', an integer printed differently
        "-copy_ppg=OFF -peep:max=4",  # a listed value in another case
    ],
)
def test_readback_that_differs_only_in_formatting_is_the_same_route(readback: str) -> None:
    catalog = parse_catalog(
        _catalog_json(
            _opt("-copy_ppg", "-copy_ppg=[on|off]", "on"),
            _opt("-peep:max", "-peep:max=int", "16"),
            _opt("-kgen:tiling", "-kgen:tiling=[0|1|2]", "0"),
        ),
        version="11.1",
    )
    assert readback_differences({"-copy_ppg": "off", "-peep:max": "4"}, readback, catalog) == []
    assert readback_differences({"-copy_ppg": "off", "-peep:max": "5"}, readback, catalog) == [
        "-peep:max=5 became -peep:max=4"
    ]


def test_normalised_readback_does_not_fail_the_build(trt: ModuleType, tmp_path: Path) -> None:
    trt.STANDIN.readback = "full"
    route = {"-conv_use_long_w": "off", "-peep:max": "4"}
    engine = tmp_path / "e.engine"
    log = TensorRTBackend().build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, route=route), engine)
    readback = log.split("build_route read back: ", 1)[1].splitlines()[0]
    assert readback.startswith("-conv_use_long_w=off -kgen:codegen:cuda_tile=1")  # every knob, catalog order
    assert trt.inspect_engine(engine.read_bytes())["build_route"] == "-conv_use_long_w=off -peep:max=4"


def test_check_settings_normalizes_and_rejects() -> None:
    assert check_settings(
        {"builder_optimization_level": "4", "version_compatible": "on", "tiling_optimization_level": "FAST"}
    ) == {"builder_optimization_level": 4, "version_compatible": True, "tiling_optimization_level": "fast"}
    with pytest.raises(ManifestError) as info:
        check_settings(
            {
                "builder_opt_level": 3,
                "fp16": True,
                "max_aux_streams": -2,
                "tiling_optimization_level": "x",
                "workspace_mib": "lots",
            }
        )
    text = info.value.message
    assert "unknown TensorRT setting 'builder_opt_level'" in text and "builder_optimization_level" in text
    assert "'fp16'" in text and "strongly typed" in text
    assert "max_aux_streams must be >= 0" in text
    assert "tiling_optimization_level must be one of none, fast, moderate, full" in text
    assert "workspace_mib must be an integer" in text
    assert info.value.hint is not None and all(name in info.value.hint for name in SETTINGS)


# -- availability ----------------------------------------------------------------------------------
def test_module_imports_without_tensorrt() -> None:
    code = (
        "import sys, trt_routes.backends.tensorrt as m; "
        "assert 'tensorrt' not in sys.modules and 'cuda' not in sys.modules; print(m.TensorRTBackend.name)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "tensorrt"


def test_unavailable_without_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    backend = TensorRTBackend()
    reason = backend.unavailable_reason()
    assert reason is not None and reason.startswith(PREFIX) and "tensorrt does not import" in reason
    with pytest.raises(BackendUnavailable) as info:
        backend.catalog()
    assert info.value.hint == "pip install 'trt-routes[tensorrt]' (TensorRT 11.1+ with an NVIDIA GPU)"


def test_unavailable_when_too_old(trt: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trt, "__version__", "10.13.2.6")
    reason = TensorRTBackend().unavailable_reason()
    assert reason == f"{PREFIX}: TensorRT 10.13.2.6 is older than 11.1"


def test_unavailable_without_all_build_routes(trt: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(trt.IBuilderConfig, "all_build_routes")
    reason = TensorRTBackend().unavailable_reason()
    assert reason is not None and reason.startswith(PREFIX) and "no all_build_routes" in reason


def test_unavailable_with_empty_catalog(trt: ModuleType) -> None:
    trt.STANDIN.catalog_json = ""
    reason = TensorRTBackend().unavailable_reason()
    assert reason is not None and reason.startswith(PREFIX)
    assert "all_build_routes is empty" in reason and "TensorRT-RTX" in reason


def test_unavailable_with_malformed_catalog(trt: ModuleType) -> None:
    trt.STANDIN.catalog_json = '{"tuner_options": "nope"}'
    reason = TensorRTBackend().unavailable_reason()
    assert reason is not None and reason.startswith(PREFIX) and "tuner_options" in reason


def test_available_catalog_from_standin(trt: ModuleType) -> None:
    backend = TensorRTBackend()
    assert backend.unavailable_reason() is None
    catalog = backend.catalog()
    assert set(catalog.options) == PUBLIC_KNOBS
    assert catalog.tuner_version == json.loads(trt.STANDIN.catalog_json)["tuner_version"]
    num_tactics = catalog.get("-cask_fusion:num_tactics")
    assert num_tactics is not None and num_tactics.is_open
    slice_fusion = catalog.get("-slice_fusion")
    assert slice_fusion is not None and slice_fusion.values == ("on", "off")
    assert backend.catalog() is catalog  # read once, cached
    assert backend.supports({"kind": "cpu"}) is not None
    assert backend.supports({"kind": "gpu", "name": "*H200*"}) is None


# -- routes ----------------------------------------------------------------------------------------
def test_standin_setter_is_silent_like_the_real_one(trt: ModuleType) -> None:
    records: list[str] = []

    class Capture(trt.ILogger):
        def log(self, severity: Any, msg: str) -> None:
            records.append(msg)

    config = trt.Builder(Capture()).create_builder_config()
    config.build_route = "-conv_use_long_w=off"
    config.build_route = "-conv_use_long_w=maybe"  # no exception: the failure is only logged
    assert config.build_route == "-conv_use_long_w=off"
    assert records and "not allowed" in records[-1]


def test_invalid_route_rejected_before_set(
    trt: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sets: list[str] = []
    prop = trt.IBuilderConfig.build_route
    monkeypatch.setattr(
        trt.IBuilderConfig,
        "build_route",
        property(prop.fget, lambda self, v: (sets.append(v), prop.fset(self, v))),
    )
    backend = TensorRTBackend()
    spec = spec_for(
        conv_model(tmp_path / "m.onnx"),
        tmp_path,
        route={"-nope": "1", "-conv_use_long_w": "maybe", "-peep:max": "int32_t"},
    )
    engine = tmp_path / "e.engine"
    with pytest.raises(RouteError) as info:
        backend.build(spec, engine)
    assert "unknown knob -nope" in info.value.message
    assert "-conv_use_long_w=maybe" in info.value.message and "-peep:max=int32_t" in info.value.message
    assert sets == [] and not engine.exists()


def test_route_applied_and_read_back(trt: ModuleType, tmp_path: Path) -> None:
    backend = TensorRTBackend()
    route = {"-kgen:codegen:cuda_tile": "2", "-conv_use_long_w": "off", "-cask_fusion:num_tactics": "3"}
    engine = tmp_path / "e.engine"
    log = backend.build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, route=route), engine)
    built = trt.inspect_engine(engine.read_bytes())
    assert built["build_route"] == "-cask_fusion:num_tactics=3 -conv_use_long_w=off -kgen:codegen:cuda_tile=2"
    assert "build_route read back: -cask_fusion:num_tactics=3" in log


def test_readback_mismatch_is_a_build_error(trt: ModuleType, tmp_path: Path) -> None:
    trt.STANDIN.dropped_knobs = {"-copy_ppg"}
    backend = TensorRTBackend()
    engine = tmp_path / "e.engine"
    spec = spec_for(
        conv_model(tmp_path / "m.onnx"), tmp_path, route={"-copy_ppg": "off", "-conv_use_long_w": "off"}
    )
    with pytest.raises(TensorRTBuildError) as info:
        backend.build(spec, engine)
    assert "-copy_ppg=off was dropped" in info.value.message
    assert "-conv_use_long_w" not in info.value.message.split("(read back")[0]
    assert not engine.exists()


def test_build_failure_carries_logger_errors(trt: ModuleType, tmp_path: Path) -> None:
    trt.STANDIN.fail_build = "Internal Error: no tactic for node conv"
    with pytest.raises(TensorRTBuildError) as info:
        TensorRTBackend().build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path), tmp_path / "e.engine")
    assert "build_serialized_network returned None" in info.value.message
    assert "no tactic for node conv" in info.value.message
    assert "no tactic for node conv" in info.value.log


# -- parser ----------------------------------------------------------------------------------------
def test_parser_errors_surface_with_node_info(trt: ModuleType, tmp_path: Path) -> None:
    spec = spec_for(custom_op_model(tmp_path / "c.onnx"), tmp_path, profile={})
    with pytest.raises(TensorRTBuildError) as info:
        TensorRTBackend().build(spec, tmp_path / "e.engine")
    text = info.value.message
    assert "ONNX parser rejected c.onnx" in text
    assert "(node 1, name custom_a, operator MyCustomOp)" in text
    assert "(node 2, name custom_b, operator MyCustomOp)" in text


def test_parser_error_for_bytes_that_are_not_onnx(trt: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 definitely not protobuf \xff" * 3)
    with pytest.raises(TensorRTBuildError) as info:
        TensorRTBackend().build(spec_for(str(bad), tmp_path), tmp_path / "e.engine")
    assert "ONNX parser rejected bad.onnx" in info.value.message
    assert "Failed to parse ONNX model" in info.value.message


# -- profile ---------------------------------------------------------------------------------------
def test_optimization_profile_from_shape_profile(trt: ModuleType, tmp_path: Path) -> None:
    engine = tmp_path / "e.engine"
    log = TensorRTBackend().build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path), engine)
    built = trt.inspect_engine(engine.read_bytes())
    assert built["profile"] == {"x": [PROFILE["x"]["min"], PROFILE["x"]["opt"], PROFILE["x"]["max"]]}
    assert "profile x: min=[1, 3, 8, 8] opt=[2, 3, 8, 8] max=[4, 3, 8, 8]" in log


@pytest.mark.parametrize(
    ("profile", "needle"),
    [
        (
            {"x": PROFILE["x"], "z": PROFILE["x"]},
            "inputs the model does not have: ['z']; model inputs: ['x']",
        ),
        ({}, "dynamic inputs without shapes in the profile: ['x']"),
        ({"x": {"min": [1, 3, 8], "opt": [2, 3, 8], "max": [4, 3, 8]}}, "has rank 3, the model's has rank 4"),
        ({"x": {"min": [1, 3, 8, 8], "opt": [2, 3, 9, 8], "max": [4, 3, 9, 8]}}, "sets static axis 2 to 9"),
        (
            {"x": {"min": [2, 3, 8, 8], "opt": [1, 3, 8, 8], "max": [4, 3, 8, 8]}},
            "TensorRT rejected min/opt/max",
        ),
    ],
)
def test_bad_profiles_are_build_errors(
    trt: ModuleType, tmp_path: Path, profile: dict[str, Any], needle: str
) -> None:
    with pytest.raises(TensorRTBuildError) as info:
        TensorRTBackend().build(
            spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, profile=profile), tmp_path / "e.engine"
        )
    assert needle in info.value.message


@pytest.mark.parametrize("make", [reshape_model, exported_reshape_model], ids=["onnx-helper", "torch.onnx.export"])
def test_a_shape_tensor_input_gets_its_values_from_the_profile_and_host_memory(trt: ModuleType, tmp_path: Path,
                                                                              make: Any) -> None:
    """An input whose values are a shape (Reshape's shape input; ITensor.is_shape_tensor) declared
    ``shape_tensor`` gets IOptimizationProfile.set_shape_input with the profile's values, and at run time host
    memory (ICudaEngine.is_shape_inference_io; both names checked against the real bindings by the conformance
    test). New values reshape the outputs; values outside the profile are a clear error. The exporter's model
    reaches the Reshape through Gather/Unsqueeze/Concat: still a shape tensor, as TensorRT finds it."""
    model = make(tmp_path / "r.onnx")
    inputs = {"x": {"dtype": "float32"}, "s": {"dtype": "int64", "shape_tensor": True}}
    spec = spec_for(model, tmp_path, profile=RESHAPE_PROFILE, inputs=inputs)
    engine = tmp_path / "e.engine"
    log = TensorRTBackend().build(spec, engine)
    assert "profile s (shape tensor values): min=[1, 3, 4] opt=[2, 3, 4] max=[4, 3, 4]" in log
    built = trt.inspect_engine(engine.read_bytes())
    assert built["values"] == {"s": [[1, 3, 4], [2, 3, 4], [4, 3, 4]]} and "s" not in built["profile"]
    x = np.arange(48, dtype=np.float32).reshape(4, 12) - 20
    with TensorRTBackend().load(engine, spec) as runner:
        for n in (2, 4, 1):  # the opt values first, then others within the profile
            out = runner.run({"x": x[:n], "s": np.array([n, 3, 4], dtype=np.int64)})["y"]
            assert out.shape == (n, 3, 4) and np.array_equal(out, np.maximum(x[:n].reshape(n, 3, 4), 0))
        assert len(runner.time({"x": x[:2], "s": np.array([2, 3, 4])}, 1, 2, 2)) == 4  # 2 repeats of 2
        with pytest.raises(TensorRTRunError, match="shape tensor values s=\\[2, 6, 4\\]"):  # 6 > max's 3
            runner.run({"x": x, "s": np.array([2, 6, 4], dtype=np.int64)})
    # the same model without the declaration: refused before building, naming the input and the fix
    undeclared = spec_for(model, tmp_path, "t2", profile=RESHAPE_PROFILE, inputs={"x": {"dtype": "float32"}})
    with pytest.raises(TensorRTBuildError) as info:
        TensorRTBackend().build(undeclared, tmp_path / "u.engine")
    assert "input s: TensorRT reads it as a shape tensor" in info.value.message
    assert "shape_tensor: true" in (info.value.hint or "") and not (tmp_path / "u.engine").exists()


# -- settings --------------------------------------------------------------------------------------
def test_builder_settings_are_mapped(trt: ModuleType, tmp_path: Path) -> None:
    settings = {
        "builder_optimization_level": 5,
        "hardware_compatibility_level": "ampere_plus",
        "tiling_optimization_level": "moderate",
        "max_aux_streams": 2,
        "avg_timing_iterations": 4,
        "max_num_tactics": 12,
        "l2_limit_for_tiling": 4096,
        "workspace_mib": 512,
        "tactic_shared_memory_kib": 48,
        "tactic_dram_mib": 64,
        "version_compatible": True,
    }
    engine = tmp_path / "e.engine"
    TensorRTBackend().build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings=settings), engine)
    built = trt.inspect_engine(engine.read_bytes())
    assert built["builder_optimization_level"] == 5
    assert built["hardware_compatibility_level"] == "AMPERE_PLUS"
    assert built["tiling_optimization_level"] == "MODERATE"
    assert (built["max_aux_streams"], built["avg_timing_iterations"]) == (2, 4)
    assert (built["max_num_tactics"], built["l2_limit_for_tiling"]) == (12, 4096)
    assert built["memory_pools"] == {
        "WORKSPACE": 512 << 20,
        "TACTIC_DRAM": 64 << 20,
        "TACTIC_SHARED_MEMORY": 48 << 10,
    }
    assert built["flags"] == ["TF32", "VERSION_COMPATIBLE"]  # TF32: TensorRT's default, left as it is


def test_tf32_and_strict_nans_are_settings_and_said_in_words(trt: ModuleType, tmp_path: Path) -> None:
    """TF32 is on by default in TensorRT (the real bindings' docstring: "Enabled by default"): a float32 model
    is then gated against TF32 arithmetic unless ``tf32: false`` clears the flag; STRICT_NANS can be set."""
    from trt_routes.backends.tensorrt.settings import precision_flags
    from trt_routes.interop.trtexec import trtexec_command

    model = conv_model(tmp_path / "m.onnx")
    flags = {}
    for name, settings in (("default", {}), ("strict", {"tf32": False, "strict_nans": True})):
        engine = tmp_path / f"{name}.engine"
        TensorRTBackend().build(spec_for(model, tmp_path, settings=settings), engine)
        flags[name] = trt.inspect_engine(engine.read_bytes())["flags"]
    assert flags == {"default": ["TF32"], "strict": ["STRICT_NANS"]}
    assert precision_flags({}) == "TF32 on (TensorRT's default), STRICT_NANS off (TensorRT's default)"
    assert precision_flags({"tf32": "off"}) == "TF32 off (settings.tf32), STRICT_NANS off (TensorRT's default)"
    assert "--noTF32" in trtexec_command(str(model), "", {}, {"tf32": False})
    assert "TF32" not in trtexec_command(str(model), "", {}, {"tf32": True})


def test_layer_profile_from_tensorrt_s_profiler_on_a_runner_loaded_for_it(trt: ModuleType, tmp_path: Path) -> None:
    """Issue 32: an IProfiler on the loaded engine's context reports each layer's time after its stream
    synchronized (enqueue_emits_profile off, report_to_profiler), one run at a time; the runner is closed after,
    so no timed run has a profiler attached. In the stand-in a route changes the layers' times (tactics)."""
    from trt_routes.audit.layers import LayersReport
    from trt_routes.backends.tensorrt.profile import layer_op, profile_runner
    from trt_routes.evidence.layers import compare
    from trt_routes.report.layers_text import render_layers

    model = conv_model(tmp_path / "m.onnx")
    x = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    profiles = []
    for i, route in enumerate(({}, {"-conv_use_long_w": "off"})):
        spec = spec_for(model, tmp_path, f"t{i}", route=route)
        engine = tmp_path / f"e{i}.engine"
        TensorRTBackend().build(spec, engine)
        runner = TensorRTBackend().load(engine, spec)
        profiles.append(profile_runner(trt, runner, x, route=" ".join(f"{k}={v}" for k, v in route.items())))
        with pytest.raises(TensorRTRunError, match="closed"):
            runner.time(x, 0, 1, 1)  # no timed run on a profiled context
        assert TensorRTBackend().profile(engine, spec, x).layers  # the backend's hook: a runner of its own
    for p in profiles:
        assert [layer.name for layer in p.layers] == ["conv", "relu", "pool", "flatten"]
        assert p.runs == 10 and p.backend == "tensorrt" and all(layer.ms > 0 and layer.where == "gpu"
                                                                 for layer in p.layers)
        assert p.wall_ms is not None and p.total_ms <= p.wall_ms * 1.01
    diff = compare(*profiles)
    assert all(row.paired_by == "name" for row in diff.rows) and profiles[1].route == "-conv_use_long_w=off"
    assert "profiling_verbosity: detailed" in profiles[0].note  # names and times only, said so
    # built at DETAILED verbosity: the inspector gives each layer's type and tactic (the route picks tactics)
    detailed = []
    for i, route in enumerate(({}, {"-conv_use_long_w": "off"})):
        spec = spec_for(model, tmp_path, f"d{i}", route=route, settings={"profiling_verbosity": "detailed"})
        TensorRTBackend().build(spec, tmp_path / f"d{i}.engine")
        assert trt.inspect_engine((tmp_path / f"d{i}.engine").read_bytes())["profiling_verbosity"] == "DETAILED"
        detailed.append(TensorRTBackend().profile(tmp_path / f"d{i}.engine", spec, x))
    assert [(layer.name, layer.op) for layer in detailed[0].layers] == [
        ("conv", "Conv"), ("relu", "Relu"), ("pool", "GlobalAveragePool"), ("flatten", "Flatten")]
    assert all(layer.where.startswith("gpu: sm90_standin_") for layer in detailed[0].layers) and not detailed[0].note
    assert [a.where for a in detailed[0].layers] != [b.where for b in detailed[1].layers]  # another tactic somewhere
    # the same layers by name and op, another kernel: explain --layers must not call them the same layer for layer
    kernels = compare(*detailed)
    assert {r.name for r in kernels.moved} == {a.name for a, b in zip(*(d.layers for d in detailed), strict=True)
                                               if a.where != b.where}
    assert not kernels.same_layers and all(r.paired_by == "name" for r in kernels.rows)
    from rich.console import Console

    console = Console(record=True, width=300)
    render_layers(LayersReport("m/bs1/gpu", "", "-conv_use_long_w=off", "the winner", kernels, 1.0, 0.9), console)
    text = console.export_text()
    assert "same layer for layer" not in text and f"{len(kernels.moved)} ran elsewhere" in text
    row = kernels.moved[0]
    assert f"{row.default_where} -> {row.winner_where}" in text  # the table's "where" column
    assert [layer_op(n) for n in ("/l1/conv/Conv + /l1/relu/Relu", "Reformatting CopyNode for Input Tensor 0",
                                  "fc")] == ["Conv+Relu", "Reformat", "fc"]


def test_unknown_settings_rejected_before_building(trt: ModuleType, tmp_path: Path) -> None:
    engine = tmp_path / "e.engine"
    with pytest.raises(ManifestError) as info:
        TensorRTBackend().build(
            spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings={"opt_level": 3}), engine
        )
    assert "unknown TensorRT setting 'opt_level'" in info.value.message
    assert not engine.exists()


# -- timing cache ----------------------------------------------------------------------------------
def _cache_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.timing-cache"))


def test_timing_cache_per_route_is_reused_by_that_route_only(trt: ModuleType, tmp_path: Path) -> None:
    """A shared cache hands one route's timings to another (the stand-in's entries, like TensorRT's, do not
    know routes); one file per (TensorRT build, GPU, settings, route) keeps them apart."""
    model = conv_model(tmp_path / "m.onnx")
    backend = TensorRTBackend()
    first = backend.build(spec_for(model, tmp_path, "trial-1"), tmp_path / "e1.engine")
    files = _cache_files(tmp_path / "trials")
    assert len(files) == 1 and files[0].name.startswith("tensorrt-11.1.0.106-tensorrt-cu12-nvidia-h200-sm9.0-")
    assert "Timing cache: 0 hits, 4 misses" in first
    size = files[0].stat().st_size
    second = backend.build(spec_for(model, tmp_path, "trial-2"), tmp_path / "e2.engine")
    assert f"timing cache loaded from {files[0]}" in second
    assert "Timing cache: 4 hits, 0 misses" in second and files[0].stat().st_size == size
    other = backend.build(spec_for(model, tmp_path, "trial-3", route={"-copy_ppg": "off"}), tmp_path / "e3.engine")
    assert "Timing cache: 0 hits, 4 misses" in other  # no timings of the default route reached it
    settings = backend.build(
        spec_for(model, tmp_path, "trial-4", settings={"builder_optimization_level": 5}), tmp_path / "e4.engine"
    )
    assert "Timing cache: 0 hits, 4 misses" in settings
    assert len(_cache_files(tmp_path / "trials")) == 3
    assert trt.STANDIN.timing_hits == [0, 4, 0, 0]
    # settings that do not reach the builder share the cache of the route
    backend.build(spec_for(model, tmp_path, "trial-5", settings={"cuda_graph": True}), tmp_path / "e5.engine")
    assert trt.STANDIN.timing_hits[-1] == 4 and len(_cache_files(tmp_path / "trials")) == 3


def test_shared_cache_would_leak_between_routes_in_the_standin(trt: ModuleType, tmp_path: Path) -> None:
    """Why per route: with one cache for every route (the old key), route B reuses route A's timings."""
    from trt_routes.backends.tensorrt.timing_cache import TimingCacheFile

    model = conv_model(tmp_path / "m.onnx")
    shared = TimingCacheFile(tmp_path / "one.timing-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TensorRTBackend, "_timing_cache", staticmethod(lambda *_a: shared))
        TensorRTBackend().build(spec_for(model, tmp_path, "a"), tmp_path / "a.engine")
        TensorRTBackend().build(spec_for(model, tmp_path, "b", route={"-copy_ppg": "off"}), tmp_path / "b.engine")
    assert trt.STANDIN.timing_hits[-1] == 4


def test_fresh_timing_cache_writes_no_file(trt: ModuleType, tmp_path: Path) -> None:
    model = conv_model(tmp_path / "m.onnx")
    backend = TensorRTBackend()
    for trial in ("t1", "t2"):
        log = backend.build(spec_for(model, tmp_path, trial, settings={"timing_cache": "fresh"}), tmp_path / "e")
        assert "timing cache: fresh for this build" in log and "Timing cache: 0 hits, 4 misses" in log
    assert _cache_files(tmp_path / "trials") == [] and trt.STANDIN.timing_hits == [0, 0]
    with pytest.raises(ManifestError, match="timing_cache must be one of per_route, fresh"):
        check_settings({"timing_cache": "shared"})


def test_timing_cache_dir_setting_and_corrupt_file(trt: ModuleType, tmp_path: Path) -> None:
    folder = tmp_path / "tc"
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings={"timing_cache_dir": str(folder)})
    TensorRTBackend().build(spec, tmp_path / "e.engine")
    [cache] = _cache_files(folder)
    cache.write_bytes(b"garbage")
    log = TensorRTBackend().build(spec, tmp_path / "e.engine")
    assert "is unreadable; starting an empty one" in log
    assert cache.read_bytes().startswith(trt.CACHE_MAGIC)
    assert _cache_files(tmp_path / "trials") == []


def test_timing_cache_location_without_work_dir(
    trt: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = conv_model(tmp_path / "m.onnx")
    TensorRTBackend().build(spec_for(model, tmp_path, work_dir=""), tmp_path / "e1.engine")
    assert len(_cache_files(tmp_path / "xdg" / "trt-routes" / "tensorrt")) == 1
    monkeypatch.setenv("TRT_ROUTES_TIMING_CACHE_DIR", str(tmp_path / "env"))
    TensorRTBackend().build(spec_for(model, tmp_path, work_dir=""), tmp_path / "e2.engine")
    assert len(_cache_files(tmp_path / "env")) == 1


# -- load and run ----------------------------------------------------------------------------------
def _built(trt: ModuleType, tmp_path: Path) -> tuple[TensorRTBackend, BuildSpec, Path]:
    backend = TensorRTBackend()
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path)
    engine = tmp_path / "e.engine"
    backend.build(spec, engine)
    return backend, spec, engine


def test_runner_matches_reference_and_frees_memory(
    trt: ModuleType, cudart: ModuleType, tmp_path: Path
) -> None:
    backend, spec, engine = _built(trt, tmp_path)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    runner = backend.load(engine, spec)
    assert cudart.live_allocations()  # input and output buffers live on the "device"
    outputs = runner.run(feeds)
    reference = backend.reference(spec, feeds)
    assert set(outputs) == set(reference) == {"y"}
    assert outputs["y"].shape == (2, 4)
    np.testing.assert_allclose(outputs["y"], reference["y"], rtol=1e-5, atol=1e-6)
    bigger = {"x": np.ones((4, 3, 8, 8), dtype=np.float32)}
    np.testing.assert_allclose(
        runner.run(bigger)["y"], backend.reference(spec, bigger)["y"], rtol=1e-5, atol=1e-6
    )
    with pytest.raises(TensorRTRunError, match="outside the profile"):
        runner.run({"x": np.ones((5, 3, 8, 8), dtype=np.float32)})
    runner.close()
    assert cudart.live_allocations() == {} and cudart.live_streams() == 0
    runner.close()
    with pytest.raises(TensorRTRunError, match="closed"):
        runner.run(feeds)


def test_runner_times_each_iteration_with_events(trt: ModuleType, cudart: ModuleType, tmp_path: Path) -> None:
    backend, spec, engine = _built(trt, tmp_path)
    with backend.load(engine, spec) as runner:
        samples = runner.time(
            {"x": np.zeros((2, 3, 8, 8), dtype=np.float32)}, warmup=2, iterations=3, repeats=2
        )
    assert len(samples) == 6 and all(s > 0 for s in samples)
    assert cudart.live_events() == 0 and cudart.live_allocations() == {}


def test_engine_from_another_version_does_not_load(
    trt: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, spec, engine = _built(trt, tmp_path)
    monkeypatch.setattr(trt, "__version__", "11.2.0.1")
    with pytest.raises(TensorRTRunError) as info:
        backend.load(engine, spec)
    assert "not compatible with this version" in info.value.message


def test_version_compatible_engine_needs_host_code_allowed(
    trt: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version-compatible engine embeds its lean runtime; the Runtime refuses it unless
    engine_host_code_allowed (default False), which load() sets for such engines as trtexec does."""
    backend = TensorRTBackend()
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings={"version_compatible": True})
    engine = tmp_path / "vc.engine"
    backend.build(spec, engine)
    refusing = trt.Runtime(trt.Logger())
    assert refusing.engine_host_code_allowed is False
    assert refusing.deserialize_cuda_engine(engine.read_bytes()) is None  # the stand-in fails where TensorRT does
    with backend.load(engine, spec) as runner:
        assert runner.run({"x": np.ones((2, 3, 8, 8), dtype=np.float32)})["y"].shape == (2, 4)
    monkeypatch.setattr(trt, "__version__", "11.4.0.106")  # a later 11.x runs it
    with backend.load(engine, spec) as runner:
        assert runner.run({"x": np.ones((2, 3, 8, 8), dtype=np.float32)})["y"].shape == (2, 4)
    plain = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path)
    with pytest.raises(TensorRTRunError, match="host code is not allowed"):
        backend.load(engine, plain)  # the same engine without the setting: the runtime stays closed


def test_failed_factories_raise_a_clear_backend_error(trt: ModuleType, tmp_path: Path) -> None:
    """trt.Builder / trt.Runtime raise TypeError when TensorRT returns NULL (pybind11), never None."""
    backend, spec, engine = _built(trt, tmp_path)
    trt.STANDIN.factory_fails = True
    with pytest.raises(TypeError, match="factory function returned nullptr"):
        trt.Builder(trt.Logger())
    with pytest.raises(TensorRTBuildError) as info:
        TensorRTBackend().build(spec, tmp_path / "again.engine")
    assert "tensorrt.Builder could not be created: TensorRT returned no builder" in info.value.message
    assert "CUDA initialization failure" in info.value.message
    with pytest.raises(TensorRTRunError) as run_info:
        backend.load(engine, spec)
    assert "tensorrt.Runtime could not be created" in run_info.value.message
    # the catalog was read once in this process: a new backend does not need another Builder for it
    assert TensorRTBackend().unavailable_reason() is None


def test_no_builder_at_all_makes_the_backend_unavailable(trt: ModuleType) -> None:
    trt.STANDIN.factory_fails = True
    reason = TensorRTBackend().unavailable_reason()
    assert reason is not None and reason.startswith(PREFIX)
    assert "tensorrt.Builder could not be created: TensorRT returned no builder" in reason
    assert "CUDA initialization failure" in reason


def test_one_runtime_and_one_logger_per_process(
    trt: ModuleType, cudart: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: dict[str, list[Any]] = {"Runtime": [], "Builder": []}
    for kind in made:
        cls = getattr(trt, kind)
        original = cls.__init__

        def counting(self: Any, logger: Any, _original: Any = original, _kind: str = kind) -> None:
            made[_kind].append(logger)
            _original(self, logger)

        monkeypatch.setattr(cls, "__init__", counting)
    backend, spec, engine = _built(trt, tmp_path)
    second = tmp_path / "e2.engine"
    TensorRTBackend().build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, "t2"), second)
    runners = [backend.load(engine, spec), backend.load(second, spec), TensorRTBackend().load(engine, spec)]
    try:
        assert len(made["Runtime"]) == 1  # three engines alive at once, one Runtime
        loggers = {id(logger) for logger in made["Runtime"] + made["Builder"]}
        assert len(loggers) == 1  # every Builder and the Runtime got the same logger
        # no Builder only to read the catalog: each build's own Builder served it, once per process
        assert len(made["Builder"]) == 2
    finally:
        for runner in runners:
            runner.close()
    assert cudart.live_allocations() == {}


def test_each_capture_gets_only_its_own_errors(trt: ModuleType, tmp_path: Path) -> None:
    trt.STANDIN.fail_build = "first failure"
    with pytest.raises(TensorRTBuildError, match="first failure"):
        TensorRTBackend().build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path), tmp_path / "e.engine")
    trt.STANDIN.fail_build = "second failure"
    with pytest.raises(TensorRTBuildError) as info:
        TensorRTBackend().build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path), tmp_path / "e.engine")
    assert "second failure" in info.value.message and "first failure" not in info.value.message


@pytest.mark.parametrize(("onnx_type", "ml_type"), [(16, "bfloat16"), (17, "float8_e4m3fn")])
def test_bf16_and_fp8_io_runs(trt: ModuleType, cudart: ModuleType, tmp_path: Path, onnx_type: int,
                              ml_type: str) -> None:
    """trt.nptype raises for BF16/FP8; buffers are sized from DataType.itemsize, hosts use ml_dtypes."""
    import ml_dtypes

    dtype = getattr(ml_dtypes, ml_type)
    assert trt.DataType.BF16.itemsize == 2 and trt.DataType.FP8.itemsize == 1
    with pytest.raises(TypeError):
        trt.nptype(trt.DataType.BF16)
    spec = spec_for(cast_model(tmp_path / "c.onnx", onnx_type), tmp_path, profile=CAST_PROFILE)
    backend = TensorRTBackend()
    backend.build(spec, tmp_path / "e.engine")
    x = np.array([[-1.5, 0.5, 2.0], [3.0, -0.25, 1.0]], dtype=dtype)
    with backend.load(tmp_path / "e.engine", spec) as runner:
        assert sorted(size for _ptr, size in cudart.live_allocations().items()) == [
            2 * 3 * np.dtype(dtype).itemsize
        ] * 2
        out = runner.run({"x": x})["y"]
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out.astype(np.float32), np.maximum(x.astype(np.float32), 0))
        assert len(runner.time({"x": x}, warmup=1, iterations=2, repeats=1)) == 2


def test_sub_byte_types_are_sized_from_itemsize() -> None:
    from trt_routes.backends.tensorrt.runner import tensor_bytes

    class FakeType:
        def __init__(self, name: str, itemsize: float | None) -> None:
            self.name, self.itemsize = name, itemsize

    assert tensor_bytes(FakeType("INT4", 0.5), np.dtype(np.uint8), (3, 5)) == 8  # 15 nibbles, rounded up
    assert tensor_bytes(FakeType("FP4", 0.5), np.dtype(np.uint8), (2, 4)) == 4
    assert tensor_bytes(FakeType("E8M0", None), np.dtype(np.uint8), (7,)) == 7  # TensorRT 11.4 gives None


def test_events_are_created_before_the_timed_loop(
    trt: ModuleType, cudart: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    for name in ("cudaEventCreate", "cudaEventRecord"):
        original = getattr(cudart, name)

        def spy(*args: Any, _original: Any = original, _name: str = name) -> Any:
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(cudart, name, spy)
    backend, spec, engine = _built(trt, tmp_path)
    with backend.load(engine, spec) as runner:
        samples = runner.time({"x": np.zeros((2, 3, 8, 8), dtype=np.float32)}, warmup=1, iterations=3, repeats=2)
    assert len(samples) == 6
    first_record = calls.index("cudaEventRecord")
    assert calls[:first_record] == ["cudaEventCreate"] * 6 and "cudaEventCreate" not in calls[first_record:]
    assert cudart.live_events() == 0


def test_cuda_graph_timing_launches_one_captured_graph(
    trt: ModuleType, cudart: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launches: list[Any] = []
    original = cudart.cudaGraphLaunch
    monkeypatch.setattr(cudart, "cudaGraphLaunch", lambda g, s: (launches.append(g), original(g, s))[1])
    backend = TensorRTBackend()
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings={"cuda_graph": True})
    backend.build(spec, tmp_path / "e.engine")
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    with backend.load(tmp_path / "e.engine", spec) as runner:
        samples = runner.time(feeds, warmup=2, iterations=3, repeats=2)
        assert len(samples) == 6 and len(launches) == 8 and len({id(g) for g in launches}) == 1
        out = runner.run(feeds)["y"]  # the graph replays the enqueue on the current input buffers
        np.testing.assert_allclose(out, backend.reference(spec, feeds)["y"], rtol=1e-5, atol=1e-6)
        bigger = {"x": np.ones((4, 3, 8, 8), dtype=np.float32)}
        assert runner.run(bigger)["y"].shape == (4, 2 * 2)  # a new shape: captured again
        assert len({id(g) for g in launches}) == 2
    assert cudart.live_graphs() == 0 and cudart.live_allocations() == {}


def test_cuda_graph_capture_failure_fails_the_run(trt: ModuleType, cudart: ModuleType, tmp_path: Path) -> None:
    backend = TensorRTBackend()
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings={"cuda_graph": True})
    backend.build(spec, tmp_path / "e.engine")
    trt.STANDIN.capture_fails = True
    with backend.load(tmp_path / "e.engine", spec) as runner, pytest.raises(TensorRTRunError) as info:
        runner.time({"x": np.zeros((2, 3, 8, 8), dtype=np.float32)}, warmup=0, iterations=2, repeats=1)
    assert "CUDA graph capture failed" in info.value.message and "not permitted" in info.value.message
    assert info.value.hint == "set cuda_graph: false for this job"
    assert cudart.live_graphs() == 0


def test_reference_version_names_onnxruntime() -> None:
    import onnxruntime

    assert TensorRTBackend().reference_version() == f"onnxruntime:{onnxruntime.__version__}:basic:cpu"


# -- signature -------------------------------------------------------------------------------------
def test_software_signature_fields(trt: ModuleType, cudart: ModuleType) -> None:
    backend = TensorRTBackend()
    software = backend.software()
    assert software == {
        "backend": "tensorrt",
        "backend_version": trt.__version__,
        "backend_distribution": "tensorrt_cu12 11.1.0.106",  # tests/standin's dist-info, like tensorrt-cu12's
        "tensorrt_cuda": "12",
        "tuner_version": json.loads(trt.STANDIN.catalog_json)["tuner_version"],
        "catalog_digest": backend.catalog().digest,
    }


def test_upgrading_cuda_python_alone_keeps_the_signature(trt: ModuleType, cudart: ModuleType,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """cuda-python's cudaRuntimeGetVersion is its own compile-time CUDA (12090 for cuda-bindings 12.9.x):
    it only moves data, so it must not enter the signature."""
    before = TensorRTBackend().software()
    monkeypatch.setattr(cudart, "RUNTIME_VERSION", 13050)
    assert TensorRTBackend().software() == before
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    assert TensorRTBackend().software() == before


def _fake_wheel(root: Path, dist: str, version: str, module: str = "tensorrt_bindings") -> Path:
    """A site folder holding ``module`` as installed by the distribution ``dist`` (METADATA, top_level)."""
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(f"__version__ = {version!r}\n")
    info = root / f"{dist}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(module + "\n")
    return root


@pytest.mark.parametrize(("dist", "cuda"), [("tensorrt_cu12_bindings", "12"), ("tensorrt_cu13_bindings", "13")])
def test_distribution_tells_cu12_from_cu13(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist: str,
                                           cuda: str) -> None:
    """Both wheels of TensorRT 11.4 report __version__ 11.4.0.106 (and ship byte-identical bindings)."""
    import importlib

    from trt_routes.backends.tensorrt import find_distribution

    other = "tensorrt_cu13_bindings" if cuda == "12" else "tensorrt_cu12_bindings"
    _fake_wheel(tmp_path / "other", other, "11.4.0.106")  # installed elsewhere, not the one imported
    site = _fake_wheel(tmp_path / "site", dist, "11.4.0.106")
    monkeypatch.syspath_prepend(str(tmp_path / "other"))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "tensorrt_bindings", raising=False)
    bindings = importlib.import_module("tensorrt_bindings")
    assert bindings.__file__ == str(site / "tensorrt_bindings" / "__init__.py")
    found = find_distribution(ModuleType("tensorrt"))
    assert (found.name, found.version, found.cuda) == (dist, "11.4.0.106", cuda)
    assert found.text == f"{dist} 11.4.0.106"
    monkeypatch.delitem(sys.modules, "tensorrt_bindings")


def test_distribution_unknown_without_metadata() -> None:
    from trt_routes.backends.tensorrt import find_distribution

    module = ModuleType("tensorrt")
    module.__version__ = "11.4.0.106"  # type: ignore[attr-defined]
    found = find_distribution(module)
    assert (found.name, found.cuda, found.text) == ("unknown", "unknown", "unknown")


def test_gpu_fields_from_cuda_runtime(cudart: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(cuda_device, "_proc_driver_version", lambda: "580.159.03")
    device = cudart.DEVICES[0]
    assert cuda_device.gpu_fields() == [
        {
            "gpu_name": device["name"].decode(),
            "compute_capability": f"{device['major']}.{device['minor']}",
            "sm_count": str(device["multiProcessorCount"]),
            "gpu_memory_gib": str(round(device["totalGlobalMem"] / 2**30)),
            "driver_version": "580.159.03",
            "cuda_driver": cuda_device.cuda_version_text(cudart.DRIVER_VERSION),
        }
    ]


def test_load_cudart_falls_back_to_the_old_import_path(
    cudart: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cuda_device.load_cudart() is cudart  # cuda.bindings.runtime (cuda-python 12.6+)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    old = cuda_device.load_cudart()  # cuda.cudart (older cuda-python)
    assert old.__name__ == "cuda.cudart" and old.cudaMalloc is cudart.cudaMalloc


def test_memory_rounds_to_the_same_gib_from_cuda_and_nvml() -> None:
    # totals seen on one H200: cudaDeviceProp.totalGlobalMem and NVML's memory total
    assert cuda_device.memory_gib(150_109_880_320) == cuda_device.memory_gib(150_754_820_096) == "140"


def test_gpu_fields_empty_without_gpu(cudart: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    cudart.DEVICES.clear()
    assert cuda_device.gpu_fields() == []


def test_gpu_fields_fall_back_to_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    calls: list[str] = []
    fake = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: "580.159.03",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetCudaComputeCapability=lambda h: (10, 0),
        nvmlDeviceGetName=lambda h: b"NVIDIA B200",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=150_754_820_096),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert cuda_device.gpu_fields() == [
        {
            "gpu_name": "NVIDIA B200",
            "compute_capability": "10.0",
            "gpu_memory_gib": "140",
            "driver_version": "580.159.03",
            "cuda_driver": "13.0",
        }
    ]
    assert calls == ["init", "shutdown"]


# -- end to end ------------------------------------------------------------------------------------
def _apply_in_workers(root: Path) -> None:
    """`trt-routes apply` on ``root``/tuning.yaml in a subprocess whose spawned workers import the stand-ins
    (through its PYTHONPATH); it must succeed."""
    env = {**os.environ, "PYTHONPATH": str(STANDIN), "XDG_CACHE_HOME": str(root / "xdg")}
    done = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "apply", "-m", str(root / "tuning.yaml")],
                          capture_output=True, text=True, env=env, cwd=root, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow  # an apply end to end
def test_apply_end_to_end_in_isolated_workers(trt: ModuleType, tmp_path: Path) -> None:
    """`trt-routes apply` builds and measures in spawned workers; the stand-ins reach them through the
    PYTHONPATH of this one subprocess."""
    conv_model(tmp_path / "m.onnx")
    (tmp_path / "tuning.yaml").write_text(f"""
schema_version: 1
measurement: {{warmup: 1, iterations: 3, repeats: 2, timeout_s: 120}}
targets: {{h200: {{kind: gpu, name: "*H200*"}}}}
switch_groups: {{g: "-conv_use_long_w=[on|off] -peep:max=4"}}
tolerances: {{t: {{checks: [{{metric: cos, threshold: 1.0e-5}}, {{metric: lInf, threshold: 1.0e-3}}]}}}}
defaults: {{backend: tensorrt, targets: [h200], switch_group: g, tolerance: t,
           settings: {{builder_optimization_level: 2, timing_cache_dir: "{tmp_path / "tc"}"}}}}
models:
  m:
    path: m.onnx
    shapes: {{dyn: {{x: {{min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}}}}}}
""")
    _apply_in_workers(tmp_path)
    engines = sorted((tmp_path / "engines").rglob("*.engine"))
    assert len(engines) == 1
    built = trt.inspect_engine(engines[0].read_bytes())
    # the stand-in's timings are noise, so the default route usually stays (side-by-side confirmation);
    # whichever route won, the shipped engine is the locked route's build
    locked = Lockfile.read(tmp_path / "tuning.lock").jobs["m/dyn/h200"]["route"]
    assert built["build_route"] == locked
    assert locked in {"", "-peep:max=4", "-conv_use_long_w=off -peep:max=4"}
    assert built["builder_optimization_level"] == 2
    # one timing cache per route built (the default, -peep:max=4 and -conv_use_long_w=off -peep:max=4)
    assert len(_cache_files(tmp_path / "tc")) == 3


@pytest.mark.slow  # an apply end to end
def test_apply_with_a_shape_tensor_input_in_isolated_workers(trt: ModuleType, tmp_path: Path) -> None:
    """A model whose input ``s`` is a shape tensor, declared ``shape_tensor: true``: every route is built with
    its profile values, run at opt and checked at min and max (new values, new output shapes), and locked."""
    reshape_model(tmp_path / "r.onnx")
    (tmp_path / "tuning.yaml").write_text(f"""
schema_version: 1
measurement: {{warmup: 1, iterations: 3, repeats: 2, timeout_s: 120}}
targets: {{h200: {{kind: gpu, name: "*H200*"}}}}
switch_groups: {{g: "-conv_use_long_w=[on|off]"}}
strategies: {{s: {{mode: fast}}}}
tolerances: {{t: {{checks: [{{metric: cos, threshold: 1.0e-5}}]}}}}
defaults: {{backend: tensorrt, targets: [h200], switch_group: g, strategy: s, tolerance: t,
           settings: {{timing_cache_dir: "{tmp_path / "tc"}"}}}}
models:
  r:
    path: r.onnx
    shapes: {{p: {json.dumps(RESHAPE_PROFILE)}}}
    inputs: {{s: {{dtype: int64, shape_tensor: true}}}}
""")
    _apply_in_workers(tmp_path)
    (engine,) = sorted((tmp_path / "engines").rglob("*.engine"))
    assert trt.inspect_engine(engine.read_bytes())["values"] == {"s": [[1, 3, 4], [2, 3, 4], [4, 3, 4]]}
    assert "r/p/h200" in Lockfile.read(tmp_path / "tuning.lock").jobs


def test_knobs_command_prints_the_catalog_like_help_build_route(tmp_path: Path) -> None:
    """`trt-routes knobs --backend tensorrt [KNOB]` with the stand-in importable, and exit 3 without it."""
    env = {**os.environ, "PYTHONPATH": str(STANDIN), "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    def knobs(*args: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "knobs", "--backend", "tensorrt", *args],
                              capture_output=True, text=True, env=environ, cwd=tmp_path, timeout=120, check=False)

    done = knobs(environ=env)
    assert done.returncode == 0, done.stderr
    assert "tuner" in done.stdout.splitlines()[0]
    assert "-conv_use_long_w=[on|off]" in done.stdout and "(default on, build)" in done.stdout
    one = knobs("--", "-kgen:codegen:cuda_tile", environ=env)
    assert one.returncode == 0 and "-kgen:codegen:cuda_tile=[0|1|2|3]" in one.stdout
    assert "-conv_use_long_w" not in one.stdout
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    missing = knobs(environ=bare)
    assert missing.returncode == 3 and "TensorRT Global Performance Tuner unavailable" in missing.stderr
    assert "Traceback" not in missing.stderr
