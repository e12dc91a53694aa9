"""What a command and a worker import at start-up (issue 20: the time a user waits), in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_a_worker_imports_neither_the_manifest_schema_nor_pydantic() -> None:
    """A worker's start-up is on apply's path to its first task: the schema and pydantic were ~45 ms of it."""
    loaded = _modules_after("import trt_routes.execute.worker, trt_routes.execute.tasks, trt_routes.execute.spawn,"
                            " trt_routes.backends.onnxruntime")
    assert "trt_routes.manifest.schema" not in loaded and "pydantic" not in loaded


def test_the_units_name_every_fact_of_the_schema() -> None:
    from trt_routes.facts import UNITS
    from trt_routes.manifest.schema import FACTS

    assert set(UNITS) == set(FACTS)


def test_the_early_worker_starts_before_the_coordinator_imports_numpy_or_the_worker_code(tmp_path: Path) -> None:
    """The CLI imports execute.spawn alone to start the early worker: the standard library only (no numpy,
    pydantic, ONNX Runtime, nor the worker's own module in the coordinator), yet the child serves tasks."""
    code = (
        "import sys\n"
        "from trt_routes.execute.spawn import early_worker, _EARLY\n"
        "heavy = sorted(m for m in ('numpy', 'pydantic', 'onnxruntime', 'onnx', 'yaml', 'trt_routes.execute.worker',\n"
        "                           'trt_routes.execute.tasks') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "with early_worker():\n"
        "    assert _EARLY and 'numpy' not in sys.modules\n"
        "    from trt_routes.execute.local import LocalExecutor\n"
        "    from trt_routes.execute.tasks import WarmupTask\n"
        "    worker = _EARLY[0][1]\n"
        "    with LocalExecutor() as ex:\n"
        "        assert ex.run(WarmupTask(backend='onnxruntime', spec=None), 60).status == 'ok'\n"
        "        assert ex._worker is worker\n"
        "    assert 'trt_routes.execute.worker' not in sys.modules\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]

