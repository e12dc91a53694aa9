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
from _trt_models import PROFILE, conv_model, custom_op_model

from trt_routes.backends import cuda_device
from trt_routes.backends.base import BuildSpec
from trt_routes.backends.tensorrt import (
    SETTINGS,
    CatalogFormatError,
    TensorRTBackend,
    TensorRTBuildError,
    TensorRTRunError,
    check_settings,
    parse_catalog,
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
        (
            _catalog_json({"option": "-a", "allowed_values": "-a=[0|1]", "default_value": 0}),
            "must be a string",
        ),
        (_catalog_json({"option": "-a", "allowed_values": "-a=[0|1]"}), "no default_value"),
        (_catalog_json(_opt("-a", "-a=[0|1]", "0"), _opt("-a", "-a=[0|1]", "1")), "listed twice"),
        (_catalog_json(_opt("a", "a=[0|1]", "0")), "bad option name"),
        (_catalog_json(_opt("-a b", "-a=[0|1]", "0")), "bad option name"),
    ],
)
def test_parse_catalog_rejects_malformed_json(text: str, needle: str) -> None:
    with pytest.raises(CatalogFormatError) as info:
        parse_catalog(text, version="11.1")
    assert needle in info.value.message
    assert isinstance(info.value, TrtRoutesError)


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
    problems = route_problems({"-copy_pg": "off", "-peep:max": "four", "-kgen:tiling": "7"}, catalog)
    assert len(problems) == 3
    assert any("unknown knob -copy_pg" in p and "-copy_ppg" in p for p in problems)
    assert any("-peep:max=four" in p and "integer" in p for p in problems)
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
        route={"-nope": "1", "-conv_use_long_w": "maybe", "-peep:max": "many"},
    )
    engine = tmp_path / "e.engine"
    with pytest.raises(RouteError) as info:
        backend.build(spec, engine)
    assert "unknown knob -nope" in info.value.message
    assert "-conv_use_long_w=maybe" in info.value.message and "-peep:max=many" in info.value.message
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
    assert built["flags"] == ["VERSION_COMPATIBLE"]


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


def test_timing_cache_created_and_reused(trt: ModuleType, tmp_path: Path) -> None:
    model = conv_model(tmp_path / "m.onnx")
    backend = TensorRTBackend()
    first = backend.build(spec_for(model, tmp_path, "trial-1"), tmp_path / "e1.engine")
    files = _cache_files(tmp_path / "trials")
    assert [f.name for f in files] == ["tensorrt-11.1.0.106-nvidia-h200-sm9.0.timing-cache"]
    assert "Timing cache: 0 hits, 4 misses" in first
    size = files[0].stat().st_size
    second = backend.build(spec_for(model, tmp_path, "trial-2"), tmp_path / "e2.engine")
    assert f"timing cache loaded from {files[0]}" in second
    assert "Timing cache: 4 hits, 0 misses" in second
    assert files[0].stat().st_size == size
    third = backend.build(
        spec_for(model, tmp_path, "trial-3", route={"-copy_ppg": "off"}), tmp_path / "e3.engine"
    )
    assert "Timing cache: 0 hits, 4 misses" in third
    assert files[0].stat().st_size > size  # entries were combined in, not replaced


def test_timing_cache_dir_setting_and_corrupt_file(trt: ModuleType, tmp_path: Path) -> None:
    folder = tmp_path / "tc"
    folder.mkdir()
    corrupt = folder / "tensorrt-11.1.0.106-nvidia-h200-sm9.0.timing-cache"
    corrupt.write_bytes(b"garbage")
    log = TensorRTBackend().build(
        spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings={"timing_cache_dir": str(folder)}),
        tmp_path / "e.engine",
    )
    assert "is unreadable; starting an empty one" in log
    assert corrupt.read_bytes().startswith(trt.CACHE_MAGIC)
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
        "tuner_version": json.loads(trt.STANDIN.catalog_json)["tuner_version"],
        "catalog_digest": backend.catalog().digest,
        "cuda_runtime": cuda_device.cuda_version_text(cudart.RUNTIME_VERSION),
    }


def test_software_without_cuda_python(trt: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    assert TensorRTBackend().software()["cuda_runtime"] == "unavailable"


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
    env = {**os.environ, "PYTHONPATH": str(STANDIN), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(
        [sys.executable, "-m", "trt_routes.cli.app", "apply", "-m", str(tmp_path / "tuning.yaml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    engines = sorted((tmp_path / "engines").rglob("*.engine"))
    assert len(engines) == 1
    built = trt.inspect_engine(engines[0].read_bytes())
    # the stand-in's timings are noise, so the default route usually stays (side-by-side confirmation);
    # whichever route won, the shipped engine is the locked route's build
    locked = Lockfile.read(tmp_path / "tuning.lock").jobs["m/dyn/h200"]["route"]
    assert built["build_route"] == locked
    assert locked in {"", "-peep:max=4", "-conv_use_long_w=off -peep:max=4"}
    assert built["builder_optimization_level"] == 2
    assert len(_cache_files(tmp_path / "tc")) == 1


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
