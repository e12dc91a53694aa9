"""What a command and a worker import at start-up (issue 20: the time a user waits), in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-P", "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_cache_does_not_import_pandas_and_pandas_still_imports_after() -> None:
    pytest.importorskip("pandas")  # where pandas is installed, sqlite-utils would import it (130 ms)
    assert "pandas" not in _modules_after("import trt_routes.cli.app, trt_routes.cache")
    assert "pandas" in _modules_after("import trt_routes.cache\nimport pandas")  # the block was lifted


def test_a_worker_imports_neither_the_manifest_loader_nor_the_cache() -> None:
    loaded = _modules_after("import trt_routes.execute.worker, trt_routes.execute.tasks")
    assert "trt_routes.manifest.load" not in loaded and "yaml" not in loaded
    assert "trt_routes.cache.store" not in loaded and "sqlite_utils" not in loaded
