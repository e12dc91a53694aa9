"""Importing trtexec / Torch-TensorRT tuning caches and writing trtexec command lines.

Fixtures in tests/fixtures/tuning_cache follow the documented JSON Lines format (TENSORRT.md)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _paths import FIXTURES
from onnx import TensorProto, helper, numpy_helper

from trt_routes.backends.tensorrt import parse_catalog
from trt_routes.catalog import Catalog
from trt_routes.errors import ManifestError, RouteError, UsageError
from trt_routes.interop import (
    METRICS,
    TuningCacheFormatError,
    expression_for_trtexec,
    parse_tuning_cache,
    read_partition_caches,
    read_tuning_cache,
    trtexec_command,
)

FIXTURES = FIXTURES / "tuning_cache"
TRTEXEC = FIXTURES / "best_config.json"


def _catalog(tuner: str = "2.19.45") -> Catalog:
    """The knobs of the fixtures' default_build_route as a catalog (closed knobs on/off or 0..3)."""
    header = json.loads(TRTEXEC.read_text().splitlines()[0])
    options = []
    for token in header["default_build_route"].split():
        name, _, default = token.partition("=")
        allowed = (
            f"{name}=int32_t"
            if name in ("-cask_fusion:num_tactics", "-peep:max")
            else (f"{name}=[on|off]" if default in ("on", "off") else f"{name}=[0|1|2|3]")
        )
        options.append({"option": name, "allowed_values": allowed, "default_value": default, "help": ""})
    return parse_catalog(json.dumps({"tuner_version": tuner, "tuner_options": options}), version="11.1.0.106")


def _header_line(**changes: Any) -> str:
    header = json.loads(TRTEXEC.read_text().splitlines()[0])
    header.update(changes)
    return json.dumps({k: v for k, v in header.items() if v is not None})


ROW = {
    "iter": 0,
    "build_route": "-copy_ppg=off",
    "crash": False,
    "error_message": "",
    "accuracy_loss": {"y": 0.1},
    "gpu_time": 1.0,
}


# -- trtexec file ----------------------------------------------------------------------------------
def test_trtexec_header_is_mapped() -> None:
    cache = read_tuning_cache(TRTEXEC)
    header = cache.header
    raw = json.loads(TRTEXEC.read_text().splitlines()[0])
    assert header.source == "trtexec" and header.time_statistic == "mean"
    assert header.tuner_version == raw["tuner_version"]
    assert (header.accuracy_algorithm, header.metric) == ("LInf", "lInf")
    assert (header.atol, header.rtol, header.threshold) == (1e-05, 1e-05, 0.01)
    assert header.searching_algorithm == "fast"
    assert header.tuning_expr == raw["tuning_expr"] and header.command_line == raw["command_line"]
    assert header.default_build_route == raw["default_build_route"]
    assert header.files["ref_outputs"] == {"output": "/data/ref/output.bin"}
    assert header.argv == tuple(raw["argv"]) and header.partition_key is None
    assert header.unknown == {}


def test_trtexec_rows_status_and_routes() -> None:
    cache = read_tuning_cache(TRTEXEC)
    by_iter = {row.iter: row for row in cache.rows}
    assert [row.line for row in cache.rows] == [2, 3, 4, 5, 6]
    # without a catalog, knobs at the header's default_build_route values are dropped
    assert [by_iter[i].route for i in range(5)] == [
        "",
        "-copy_ppg=off",
        "-kgen:codegen:cuda_tile=0",
        "-kgen:codegen:cuda_tile=2",
        "-conv_use_long_w=off",
    ]
    assert by_iter[0].status == "ok" and by_iter[0].gpu_time_ms == 1.482
    assert by_iter[1].status == "accuracy-failed"  # loss written as null: NaN slipped through lInf
    assert "non-finite accuracy loss for output" in by_iter[1].note
    assert by_iter[2].status == "crashed" and "signal 11" in by_iter[2].error_message
    assert by_iter[2].accuracy_loss is None and by_iter[2].gpu_time_ms is None
    assert by_iter[3].status == "accuracy-failed" and by_iter[3].accuracy_loss == {"output": 0.0421}
    assert by_iter[4].status == "ok"
    assert cache.fastest_ok() is by_iter[4]  # trtexec itself would have taken iter 1 (1.104 ms, NaN loss)


def test_trtexec_rows_with_catalog_use_canonical_routes() -> None:
    catalog = _catalog()
    cache = read_tuning_cache(TRTEXEC, catalog=catalog)
    assert [row.route for row in cache.rows] == [
        "",
        "-copy_ppg=off",
        "-kgen:codegen:cuda_tile=0",
        "-kgen:codegen:cuda_tile=2",
        "-conv_use_long_w=off",
    ]
    assert cache.tuner_mismatch(catalog) is None
    mismatch = cache.tuner_mismatch(_catalog("2.20.1"))
    assert mismatch is not None and "2.19.45" in mismatch and "2.20.1" in mismatch


def test_route_outside_the_catalog_names_the_line() -> None:
    text = _header_line() + "\n" + json.dumps({**ROW, "build_route": "-copy_ppg=maybe"}) + "\n"
    with pytest.raises(TuningCacheFormatError) as info:
        parse_tuning_cache(text, path="x.json", catalog=_catalog())
    assert info.value.message.startswith("x.json:2: build_route '-copy_ppg=maybe' does not fit")
    assert info.value.line == 2


# -- Torch-TensorRT partitions ---------------------------------------------------------------------
def test_torch_tensorrt_partitions() -> None:
    caches = read_partition_caches(FIXTURES / "tune.jsonl", catalog=_catalog())
    assert sorted(caches) == ["3f2a9c1d4e5b6a70", "9b8c7d6e5f4a3b21"]
    first = caches["3f2a9c1d4e5b6a70"]
    assert first.header.source == "torch-tensorrt" and first.header.argv is None
    assert first.header.partition_key == "3f2a9c1d4e5b6a70"
    assert first.header.time_statistic == "median of 10 runs"
    assert (first.header.accuracy_algorithm, first.header.metric, first.header.threshold) == (
        "cos",
        "cos",
        0.001,
    )
    assert first.header.command_line == ""
    assert first.header.unknown == {"user_tuning_cache_file": "/work/tune.jsonl"}
    assert [(r.route, r.status) for r in first.rows] == [
        ("", "ok"),
        ("-transpose_ppg=off", "ok"),
        ("-match_ragged_mha=off", "accuracy-failed"),
    ]
    assert first.fastest_ok() is first.rows[1]
    second = caches["9b8c7d6e5f4a3b21"]
    assert [r.status for r in second.rows] == ["ok", "crashed", "ok"]
    assert second.rows[0].accuracy_loss == {"output.0": 0.0, "output.1": 1e-07}
    assert second.fastest_ok() is second.rows[2]


def test_partition_key_must_match_file_name(tmp_path: Path) -> None:
    source = (FIXTURES / "tune.3f2a9c1d4e5b6a70.jsonl").read_text()
    (tmp_path / "tune.0000000000000000.jsonl").write_text(source)
    with pytest.raises(TuningCacheFormatError, match="file name says partition 0000000000000000"):
        read_partition_caches(tmp_path / "tune.jsonl")
    with pytest.raises(TuningCacheFormatError, match="no partition files"):
        read_partition_caches(tmp_path / "other.jsonl")


# -- malformed input -------------------------------------------------------------------------------
def test_malformed_fixture_names_file_and_line() -> None:
    with pytest.raises(TuningCacheFormatError) as info:
        read_tuning_cache(FIXTURES / "malformed.jsonl")
    assert info.value.message.startswith(f"{FIXTURES / 'malformed.jsonl'}:3: not a JSON object")
    assert info.value.line == 3


@pytest.mark.parametrize(
    ("lines", "line", "needle"),
    [
        ([], None, "no header line"),
        ([json.dumps(ROW)], 1, "the first line is an iteration"),
        ([_header_line(argv=None)], 1, "neither 'argv' (trtexec) nor 'partition_key'"),
        ([_header_line(accuracy_algorithm="L3")], 1, "unknown accuracy_algorithm 'L3'"),
        ([_header_line(accuracy_parameter={"atol": "small"})], 1, "accuracy_parameter.atol"),
        ([_header_line(tuner_version=2)], 1, "'tuner_version' must be a string"),
        ([_header_line(), "[1, 2]"], 2, "expected a JSON object, got list"),
        ([_header_line(), json.dumps({"iter": 1, "crash": False})], 2, "row lacks build_route"),
        ([_header_line(), json.dumps({**ROW, "crash": "no"})], 2, "'crash' must be true or false"),
        ([_header_line(), "", json.dumps({**ROW, "iter": -1})], 3, "'iter' must be a non-negative integer"),
        ([_header_line(), json.dumps({**ROW, "gpu_time": "fast"})], 2, "'gpu_time' must be a number"),
        (
            [_header_line(), json.dumps({**ROW, "accuracy_loss": [0.1]})],
            2,
            "'accuracy_loss' must be an object",
        ),
        ([_header_line(), json.dumps({**ROW, "build_route": "copy_ppg=off"})], 2, "does not fit"),
    ],
)
def test_malformed_lines(lines: list[str], line: int | None, needle: str) -> None:
    with pytest.raises(TuningCacheFormatError) as info:
        parse_tuning_cache("\n".join(lines), path="c.jsonl")
    assert needle in info.value.message
    assert info.value.line == line


def test_unknown_fields_are_kept_not_guessed() -> None:
    header = json.loads(_header_line())
    header["accuracy_parameter"]["beta"] = 2
    header["new_field"] = {"x": 1}
    row = {**ROW, "build_time_ms": 812.5}
    cache = parse_tuning_cache(json.dumps(header) + "\n" + json.dumps(row))
    assert cache.header.unknown == {"new_field": {"x": 1}, "accuracy_parameter": {"beta": 2}}
    assert cache.rows[0].unknown == {"build_time_ms": 812.5}


@pytest.mark.parametrize("gpu_time", [0, 0.0, None, float("inf"), float("nan"), -1.0])
def test_an_unmeasured_row_is_crashed_and_never_wins(gpu_time: float | None) -> None:
    """trtexec writes gpu_time 0 when its child left no timing trace (and nlohmann::json writes NaN as
    null); trtexec's own strict < would let the 0 win. Such a row is crashed, not ok or accuracy-failed."""
    rows = [{**ROW, "iter": 0, "gpu_time": 2.0}, {**ROW, "iter": 1, "gpu_time": gpu_time}]
    cache = parse_tuning_cache(_header_line() + "\n" + "\n".join(json.dumps(r) for r in rows))
    bad = cache.rows[1]
    assert bad.status == "crashed" and bad.gpu_time_ms is None and not bad.crash
    assert f"no usable gpu_time ({gpu_time!r})" in bad.note
    assert cache.fastest_ok() is cache.rows[0]


def test_an_accuracy_failure_keeps_its_status_when_its_time_is_unusable() -> None:
    row = {**ROW, "error_message": "child exited with status 1", "gpu_time": float("nan")}
    imported = parse_tuning_cache(_header_line() + "\n" + json.dumps(row)).rows[0]
    assert imported.status == "accuracy-failed" and imported.gpu_time_ms is None
    assert "gpu_time nan dropped" in imported.note


def test_torch_tensorrt_non_finite_time_is_a_failed_measurement_not_an_accuracy_failure() -> None:
    """Torch-TensorRT's tuner sets ``error_message = f"non-finite gpu_time: {gpu_time}"`` and gpu_time None,
    crashed false (its tuning loop): the route was not measured, its accuracy was never in question."""
    row = {**ROW, "error_message": "non-finite gpu_time: inf", "gpu_time": None}
    imported = parse_tuning_cache(_header_line() + "\n" + json.dumps(row)).rows[0]
    assert imported.status == "crashed" and imported.gpu_time_ms is None and not imported.crash
    assert "the iteration was not measured (non-finite gpu_time: inf)" in imported.note


def test_unknown_algorithm_means_no_metric() -> None:
    """trtexec's getAlgorithmName writes "Unknown" for an algorithm it has no name for."""
    header = parse_tuning_cache(_header_line(accuracy_algorithm="Unknown")).header
    assert (header.accuracy_algorithm, header.metric) == ("Unknown", None)
    with pytest.raises(TuningCacheFormatError, match="unknown accuracy_algorithm 'L3'"):
        parse_tuning_cache(_header_line(accuracy_algorithm="L3"))


def test_open_knob_with_a_non_integer_value_does_not_abort_the_import() -> None:
    """trtexec takes any fixed value for an open knob, so its cache can hold one; the row imports."""
    catalog = _catalog()
    rows = [{**ROW, "build_route": "-peep:max=auto"}, {**ROW, "iter": 1, "build_route": "-peep:max=+8"}]
    cache = parse_tuning_cache(
        _header_line() + "\n" + "\n".join(json.dumps(r) for r in rows), catalog=catalog
    )
    assert [r.route for r in cache.rows] == ["-peep:max=auto", "-peep:max=8"]
    with pytest.raises(TuningCacheFormatError, match="not allowed"):
        parse_tuning_cache(
            _header_line() + "\n" + json.dumps({**ROW, "build_route": "-peep:max=int32_t"}), catalog=catalog
        )


@pytest.mark.parametrize(
    ("written", "ours"),
    [
        ("L0", "l0"),
        ("L1", "l1"),
        ("L2", "l2"),
        ("LInf", "lInf"),
        ("Cosine", "cos"),
        ("linf", "lInf"),
        ("linfinity", "lInf"),  # Torch-TensorRT's compute_tensor_loss takes it and writes it as given
        ("LINF", "lInf"),
        ("cos", "cos"),
        ("cosine", "cos"),
    ],
)
def test_metric_names_map_to_ours(written: str, ours: str) -> None:
    assert parse_tuning_cache(_header_line(accuracy_algorithm=written)).header.metric == ours
    assert METRICS[written.lower()] == ours


# -- trtexec command -------------------------------------------------------------------------------
def _dynamic_model(path: Path) -> str:
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), dtype=np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["input", "w"], ["out"]),
            helper.make_node("Add", ["out", "bias"], ["output"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8]),
            helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, 4, 8, 8]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


PROFILE = {
    "input": {"min": [1, 3, 8, 8], "opt": [8, 3, 8, 8], "max": [32, 3, 8, 8]},
    "bias": {"min": [1, 4, 8, 8], "opt": [1, 4, 8, 8], "max": [1, 4, 8, 8]},
}


def test_trtexec_command_for_a_locked_route(tmp_path: Path) -> None:
    model = _dynamic_model(tmp_path / "m.onnx")
    settings = {
        "builder_optimization_level": 5,
        "hardware_compatibility_level": "ampere_plus",
        "tiling_optimization_level": "moderate",
        "max_aux_streams": 0,
        "workspace_mib": 4096,
        "tactic_shared_memory_kib": 48,
        "version_compatible": True,
        "timing_cache_dir": "/tmp/tc",
        "timing_cache": "fresh",
        "cuda_graph": True,  # how it was timed, not what was built
    }
    line = trtexec_command(
        model,
        "-conv_use_long_w=off  -kgen:codegen:cuda_tile=2",
        PROFILE,
        settings,
        engine_path=str(tmp_path / "out.engine"),
    )
    words = shlex.split(line)
    assert words[0] == "trtexec" and words[1] == f"--onnx={model}"
    # only the model's dynamic input gets shapes: trtexec refuses explicit shapes for static inputs
    assert words[2:5] == [
        "--minShapes=input:1x3x8x8",
        "--optShapes=input:8x3x8x8",
        "--maxShapes=input:32x3x8x8",
    ]
    assert {
        "--builderOptimizationLevel=5",
        "--hardwareCompatibilityLevel=ampere+",
        "--tilingOptimizationLevel=2",
        "--maxAuxStreams=0",
        "--versionCompatible",
        "--memPoolSize=tacticSharedMem:48K,workspace:4096M",
        f"--saveEngine={tmp_path / 'out.engine'}",
    } <= set(words)
    assert not any("tc" in w and "timing" in w.lower() for w in words)
    assert not any("fresh" in w or "CudaGraph" in w for w in words)
    assert line.endswith('--setBuildRoute="-conv_use_long_w=off -kgen:codegen:cuda_tile=2"')


def test_trtexec_command_without_model_file_and_default_route() -> None:
    line = trtexec_command(
        "/absent/model with space.onnx", "", {"x:0": {"min": [1], "opt": [2], "max": [4]}}, {}
    )
    words = shlex.split(line)
    assert words == [
        "trtexec",
        "--onnx=/absent/model with space.onnx",
        "--minShapes='x:0':1",
        "--optShapes='x:0':2",
        "--maxShapes='x:0':4",
    ]


def test_trtexec_command_rejects_what_trtexec_cannot_express() -> None:
    with pytest.raises(UsageError, match="no flag for the setting 'tactic_dram_mib'"):
        trtexec_command("m.onnx", "", {}, {"tactic_dram_mib": 64})
    with pytest.raises(ManifestError, match="unknown TensorRT setting"):
        trtexec_command("m.onnx", "", {}, {"opt_level": 3})


def test_expression_for_trtexec() -> None:
    catalog = _catalog()
    text = "# knobs to try\n-conv_use_long_w=[on|off]\n\n-kgen:codegen:cuda_tile=[0|2]\n-peep:max=4\n"
    assert (
        expression_for_trtexec(text, catalog)
        == "-conv_use_long_w=[on|off] -kgen:codegen:cuda_tile=[0|2] -peep:max=4"
    )
    with pytest.raises(UsageError, match="open integer knob -peep:max"):
        expression_for_trtexec("-peep:max=[4|8]", catalog)
    with pytest.raises(RouteError):
        expression_for_trtexec("-copy_ppg=[on|maybe]", catalog)
