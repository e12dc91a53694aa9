"""Builds throw-away trt-routes projects (manifest + real ONNX models) for tests."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

FAST = {"warmup": 1, "iterations": 3, "repeats": 2, "timeout_s": 60}


def write_manifest(root: Path, data: dict[str, Any]) -> Path:
    path = root / "tuning.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def make_project(root: Path, models: dict[str, Path], *, group: str | None = None,
                 mode: str = "fast", backend: str = "onnxruntime", tolerance: dict[str, Any] | None = None,
                 measurement: dict[str, Any] | None = None, both_models: bool = False) -> Path:
    """A project in ``root`` tuning the resnet-like model (and the transformer block) at two shapes."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "models").mkdir(exist_ok=True)
    shutil.copy(models["resnet_like"], root / "models" / "cnn.onnx")
    shutil.copy(models["transformer_block"], root / "models" / "tb.onnx")
    data: dict[str, Any] = {
        "schema_version": 1,
        "measurement": measurement or FAST,
        "switch_groups": {"g": group or "-graph_optimization_level=[basic|all] -intra_op_num_threads=[1|2] "
                                         "-disable:NchwcTransformer=[off|on]"},
        "strategies": {"s": {"mode": mode}},
        "tolerances": {"t": tolerance or {"checks": [{"metric": "cos", "threshold": 1e-4},
                                                     {"metric": "lInf", "threshold": 1e-2}]}},
        "defaults": {"backend": backend, "switch_group": "g", "strategy": "s", "tolerance": "t"},
        "models": {"cnn": {"path": "models/cnn.onnx",
                           "shapes": {"bs1": {"input": [1, 3, 32, 32]}, "bs4": {"input": [4, 3, 32, 32]}}}},
    }
    if both_models:
        data["models"]["tb"] = {"path": "models/tb.onnx", "shapes": {"s16": {"x": [1, 16, 64]}}}
    return write_manifest(root, data)


def edit_manifest(path: Path, fn: Any) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def copy_project(manifest: Path, dest: Path) -> Path:
    """A copy of the project folder (manifest, models, cache, engines, lock) at ``dest``."""
    shutil.copytree(manifest.parent, dest)
    return dest / "tuning.yaml"


def cli(*args: str) -> tuple[int, str]:
    """Run the trt-routes CLI in process; (exit code, output). With ``--json``, stdout alone: the document
    (warnings and progress go to stderr)."""
    from typer.testing import CliRunner

    from trt_routes.cli.app import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout if "--json" in args else result.output


def routes_and_statuses(manifest: Path) -> dict[str, dict[str, str]]:
    """job -> route -> status of every trial in the project's cache."""
    from trt_routes.project import open_project

    with open_project(manifest).open_cache() as cache:
        out: dict[str, dict[str, str]] = {}
        for t in cache.all_trials():
            out.setdefault(t.job, {})[t.route] = t.status
        return out
