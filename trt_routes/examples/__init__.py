"""What ships with the package for a first run without a source tree: the quickstart's model generator
(``make_models``), its ``quickstart/tuning.yaml`` and the ``recipes/`` (package data).

The quickstart manifest and the recipes are copies of the repository's ``tuning.yaml`` and ``recipes/``
(tests/unit/test_examples.py keeps them identical); ``make_models`` is the one source of the generator. This
folder imports nothing else from trt_routes."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def root() -> Path:
    """This folder on disk (a wheel installs package data as plain files)."""
    return Path(str(resources.files(__name__)))


def quickstart_manifest() -> Path:
    """The quickstart's tuning.yaml; its models are ``recipes/quickstart/*.onnx`` next to it, generated."""
    return root() / "quickstart" / "tuning.yaml"


def recipe_files() -> list[Path]:
    """Every file of the packaged recipes (``recipes/<name>/...``), sorted."""
    found = [Path(folder) / name for folder, _, names in os.walk(root() / "recipes", followlinks=True)
             for name in names]  # followlinks: in the source tree each recipe is a link
    return sorted(p for p in found if p.is_file() and "__pycache__" not in p.parts)
