"""The package's examples (trt_routes/examples/) are the repository's tuning.yaml and recipes/, byte for byte,
and recipes/quickstart/make_models.py is the packaged generator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trt_routes import examples
from trt_routes.examples.make_models import write_models

REPO = Path(__file__).resolve().parents[2]
PACKAGED = ("ci", "onnx-gpu", "tensorrt", "torch-gpu")


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")
            and not {"models", "caches", "engines"} & set(p.relative_to(root).parts)}


def test_quickstart_manifest_is_the_repositorys() -> None:
    assert examples.quickstart_manifest().read_bytes() == (REPO / "tuning.yaml").read_bytes(), (
        "trt_routes/examples/quickstart/tuning.yaml differs from tuning.yaml: copy tuning.yaml over it")


def test_packaged_recipes_are_the_repositorys() -> None:
    for name in PACKAGED:
        repo, packaged = _files(REPO / "recipes" / name), _files(examples.root() / "recipes" / name)
        assert repo == packaged, f"recipes/{name} and trt_routes/examples/recipes/{name} differ: copy recipes/{name}"
    assert {p.parent.relative_to(examples.root() / "recipes").parts[0] for p in examples.recipe_files()} == set(
        PACKAGED)


def test_committed_quickstart_models_are_what_the_generator_writes(tmp_path: Path) -> None:
    for name, path in write_models(tmp_path).items():
        assert path.read_bytes() == (REPO / "recipes" / "quickstart" / f"{name}.onnx").read_bytes(), name


def test_repository_script_runs_the_packaged_generator(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "recipes" / "quickstart" / "make_models.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resnet_like.onnx", "transformer_block.onnx"]
