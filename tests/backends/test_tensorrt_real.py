"""The TensorRT backend against the REAL tensorrt library and GPU; skipped cleanly where either is missing.

Mirrors tests/test_backend_tensorrt.py (which runs against the stand-in), with routes taken from the
real catalog rather than assumed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _tensorrt_knobs import PUBLIC_KNOBS
from _trt_models import CAST_PROFILE, PROFILE, cast_model, conv_model, custom_op_model

from trt_routes.backends import cuda_device
from trt_routes.backends.base import BuildSpec
from trt_routes.backends.tensorrt import (
    TensorRTBackend,
    TensorRTBuildError,
    TensorRTRunner,
    parse_catalog,
    parse_route_text,
    readback_differences,
)
from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import ManifestError, RouteError

pytestmark = [pytest.mark.tensorrt, pytest.mark.gpu]

trt = pytest.importorskip("tensorrt")
if getattr(trt, "__standin__", False):  # the stand-in must never pass for the real library
    pytest.skip("only the test stand-in of tensorrt is importable", allow_module_level=True)
if not cuda_device.gpu_fields():
    pytest.skip("no NVIDIA GPU visible (cuda-python / NVML found none)", allow_module_level=True)



@pytest.fixture(scope="module")
def backend() -> TensorRTBackend:
    found = TensorRTBackend()
    reason = found.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return found


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRT_ROUTES_TIMING_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _target() -> dict[str, Any]:
    gpu = cuda_device.gpu_fields()[0]
    return {"kind": "gpu", "name": "*", "device": {"device": "gpu", **gpu}}


def spec_for(model: str, tmp: Path, trial: str = "t1", **kw: Any) -> BuildSpec:
    fields: dict[str, Any] = {
        "route": {},
        "profile": PROFILE,
        "settings": {},
        "target": _target(),
        "work_dir": str(tmp / "trials" / trial),
    }
    fields.update(kw)
    return BuildSpec(model_path=model, **fields)


def _non_default(catalog: Catalog) -> tuple[Knob, str]:
    """A closed knob and one of its non-default values, public names first."""
    closed = [k for k in catalog.knobs if k.values and any(v != k.default for v in k.values)]
    if not closed:
        pytest.skip("the catalog has no closed knob with a non-default value")
    closed.sort(key=lambda k: (k.option not in PUBLIC_KNOBS, k.option))
    knob = closed[0]
    return knob, next(v for v in knob.values or () if v != knob.default)


@pytest.fixture
def runner_for(backend: TensorRTBackend) -> Iterator[Any]:
    opened: list[TensorRTRunner] = []

    def load(engine: Path, spec: BuildSpec) -> TensorRTRunner:
        opened.append(backend.load(engine, spec))
        return opened[-1]

    yield load
    for runner in opened:
        runner.close()


# -- catalog and availability ------------------------------------------------------------------------
def test_real_catalog(backend: TensorRTBackend) -> None:
    catalog = backend.catalog()
    assert len(catalog) > 0 and catalog.tuner_version
    assert catalog.version == trt.__version__
    raw = trt.Builder(trt.Logger(trt.Logger.WARNING)).create_builder_config().all_build_routes
    assert parse_catalog(raw, version=trt.__version__).digest == catalog.digest
    for knob in catalog.knobs:
        assert knob.option.startswith("-")
        if knob.values is not None:
            assert knob.default in knob.values, knob
    assert PUBLIC_KNOBS & set(catalog.options), "none of the publicly named knobs is in the catalog"


def test_real_setter_is_silent_on_invalid_routes(backend: TensorRTBackend) -> None:
    config = trt.Builder(trt.Logger(trt.Logger.ERROR)).create_builder_config()
    before = config.build_route
    config.build_route = "-definitely_not_a_knob=1"  # documented: no exception
    assert "-definitely_not_a_knob" not in (config.build_route or "")
    assert (config.build_route or "") == (before or "")


# -- build -------------------------------------------------------------------------------------------
def test_real_invalid_route_rejected_before_set(backend: TensorRTBackend, tmp_path: Path) -> None:
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, route={"-definitely_not_a_knob": "1"})
    with pytest.raises(RouteError, match="unknown knob -definitely_not_a_knob"):
        backend.build(spec, tmp_path / "e.engine")
    assert not (tmp_path / "e.engine").exists()


def test_real_route_is_read_back_and_engine_runs(
    backend: TensorRTBackend, runner_for: Any, tmp_path: Path
) -> None:
    knob, value = _non_default(backend.catalog())
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, route={knob.option: value})
    engine = tmp_path / "e.engine"
    log = backend.build(spec, engine)
    readback = log.split("build_route read back: ", 1)[1].splitlines()[0]
    assert parse_route_text(readback).get(knob.option) == value
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    runner = runner_for(engine, spec)
    out, ref = runner.run(feeds)["y"], backend.reference(spec, feeds)["y"]
    assert out.shape == ref.shape == (2, 4)
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2)  # TF32 may be used for FP32 math


def test_real_parser_errors_name_the_node(backend: TensorRTBackend, tmp_path: Path) -> None:
    spec = spec_for(custom_op_model(tmp_path / "c.onnx"), tmp_path, profile={})
    with pytest.raises(TensorRTBuildError) as info:
        backend.build(spec, tmp_path / "e.engine")
    assert "ONNX parser rejected c.onnx" in info.value.message and "MyCustomOp" in info.value.message
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00 not protobuf \xff" * 4)
    with pytest.raises(TensorRTBuildError, match=r"ONNX parser rejected bad\.onnx"):
        backend.build(spec_for(str(bad), tmp_path), tmp_path / "e.engine")


def test_real_profile_reaches_the_engine(backend: TensorRTBackend, tmp_path: Path) -> None:
    engine = tmp_path / "e.engine"
    backend.build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path), engine)
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    loaded = runtime.deserialize_cuda_engine(engine.read_bytes())
    shapes = [list(s) for s in loaded.get_tensor_profile_shape("x", 0)]
    assert shapes == [PROFILE["x"]["min"], PROFILE["x"]["opt"], PROFILE["x"]["max"]]


def test_real_settings(backend: TensorRTBackend, tmp_path: Path) -> None:
    model = conv_model(tmp_path / "m.onnx")
    settings = {
        "builder_optimization_level": 0,
        "max_aux_streams": 0,
        "tiling_optimization_level": "none",
        "workspace_mib": 256,
        "avg_timing_iterations": 1,
    }
    log = backend.build(spec_for(model, tmp_path, settings=settings), tmp_path / "e.engine")
    assert "setting builder_optimization_level=0" in log and (tmp_path / "e.engine").stat().st_size > 0
    with pytest.raises(ManifestError, match="unknown TensorRT setting 'fp32_only'"):
        backend.build(spec_for(model, tmp_path, settings={"fp32_only": True}), tmp_path / "f.engine")


def test_real_timing_cache_created_and_reused(backend: TensorRTBackend, tmp_path: Path) -> None:
    model = conv_model(tmp_path / "m.onnx")
    backend.build(spec_for(model, tmp_path, "t1"), tmp_path / "e1.engine")
    files = sorted((tmp_path / "trials").glob("*.timing-cache"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    second = backend.build(spec_for(model, tmp_path, "t2"), tmp_path / "e2.engine")
    assert f"timing cache loaded from {files[0]}" in second


# -- measure and signature ---------------------------------------------------------------------------
def test_real_timing_with_cuda_events(backend: TensorRTBackend, runner_for: Any, tmp_path: Path) -> None:
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path)
    backend.build(spec, tmp_path / "e.engine")
    runner = runner_for(tmp_path / "e.engine", spec)
    samples = runner.time({"x": np.zeros((2, 3, 8, 8), dtype=np.float32)}, warmup=3, iterations=5, repeats=2)
    assert len(samples) == 10 and all(0 < s < 1000 for s in samples)
    runner.close()
    with pytest.raises(Exception, match="closed"):
        runner.run({"x": np.zeros((2, 3, 8, 8), dtype=np.float32)})


def test_real_signature_fields(backend: TensorRTBackend) -> None:
    software = backend.software()
    assert set(software) == {"backend", "backend_version", "backend_distribution", "tensorrt_cuda",
                             "tuner_version", "catalog_digest"}
    assert software["backend"] == "tensorrt" and software["backend_version"] == trt.__version__
    assert software["catalog_digest"] == backend.catalog().digest
    # pip's tensorrt-cuXX wheels and the tarballs' wheels both name what TensorRT was built for
    assert software["backend_distribution"].startswith("tensorrt"), software
    assert software["tensorrt_cuda"] != "unknown", software
    for gpu in cuda_device.gpu_fields():
        assert {"gpu_name", "compute_capability", "gpu_memory_gib", "driver_version", "cuda_driver"} <= set(
            gpu
        )


def test_real_catalog_entries_skipped_are_reported(backend: TensorRTBackend, tmp_path: Path) -> None:
    log = backend.build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path), tmp_path / "e.engine")
    for skipped in backend.catalog_skipped:  # usually none; each one is named in every build log
        assert f"catalog: {skipped}" in log


# -- the review's fixes, on the real library ---------------------------------------------------------
def test_real_version_compatible_engine_needs_host_code(
    backend: TensorRTBackend, runner_for: Any, tmp_path: Path
) -> None:
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings={"version_compatible": True})
    engine = tmp_path / "vc.engine"
    backend.build(spec, engine)
    strict = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    assert strict.engine_host_code_allowed is False  # TensorRT's default (NvInferRuntime.h)
    assert strict.deserialize_cuda_engine(engine.read_bytes()) is None
    runner = runner_for(engine, spec)
    assert runner.run({"x": np.ones((2, 3, 8, 8), dtype=np.float32)})["y"].shape == (2, 4)


def test_real_one_runtime_per_process(backend: TensorRTBackend, runner_for: Any, tmp_path: Path) -> None:
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path)
    backend.build(spec, tmp_path / "a.engine")
    backend.build(spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, "t2"), tmp_path / "b.engine")
    first, second = runner_for(tmp_path / "a.engine", spec), runner_for(tmp_path / "b.engine", spec)
    assert first._runtime is second._runtime


def test_real_timing_cache_per_route_and_fresh(backend: TensorRTBackend, tmp_path: Path) -> None:
    """One file per route; a rebuild of a route reuses it. Prints the build times it measured (fresh vs
    warm per-route cache), the numbers the choice of default is to be checked against."""
    model = conv_model(tmp_path / "m.onnx")
    knob, value = _non_default(backend.catalog())
    times: dict[str, float] = {}
    for label, trial, route, settings in (
        ("per_route cold", "a", {}, {}),
        ("per_route warm", "b", {}, {}),
        ("other route", "c", {knob.option: value}, {}),
        ("fresh", "d", {}, {"timing_cache": "fresh"}),
    ):
        started = time.perf_counter()
        log = backend.build(spec_for(model, tmp_path, trial, route=route, settings=settings), tmp_path / "e")
        times[label] = time.perf_counter() - started
        if label == "per_route warm":
            assert "timing cache loaded from" in log
        if label == "fresh":
            assert "timing cache: fresh for this build" in log
    assert len(sorted((tmp_path / "trials").glob("*.timing-cache"))) == 2
    print("build seconds:", {k: round(v, 3) for k, v in times.items()})


def test_real_bf16_io(backend: TensorRTBackend, runner_for: Any, tmp_path: Path) -> None:
    import ml_dtypes

    spec = spec_for(cast_model(tmp_path / "c.onnx", 16), tmp_path, profile=CAST_PROFILE)
    backend.build(spec, tmp_path / "e.engine")
    x = np.array([[-1.5, 0.5, 2.0], [3.0, -0.25, 1.0]], dtype=ml_dtypes.bfloat16)
    out = runner_for(tmp_path / "e.engine", spec).run({"x": x})["y"]
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.astype(np.float32), np.maximum(x.astype(np.float32), 0))


def test_real_cuda_graph_timing(backend: TensorRTBackend, runner_for: Any, tmp_path: Path) -> None:
    spec = spec_for(conv_model(tmp_path / "m.onnx"), tmp_path, settings={"cuda_graph": True})
    backend.build(spec, tmp_path / "e.engine")
    runner = runner_for(tmp_path / "e.engine", spec)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    samples = runner.time(feeds, warmup=3, iterations=5, repeats=2)
    assert len(samples) == 10 and all(0 < s < 1000 for s in samples)
    np.testing.assert_allclose(runner.run(feeds)["y"], backend.reference(spec, feeds)["y"], rtol=1e-2, atol=1e-2)


def test_real_readback_compares_canonically(backend: TensorRTBackend) -> None:
    knob, value = _non_default(backend.catalog())
    config = trt.Builder(trt.Logger(trt.Logger.ERROR)).create_builder_config()
    config.build_route = f"{knob.option}={value}"
    assert readback_differences({knob.option: value}, str(config.build_route or ""), backend.catalog()) == []
