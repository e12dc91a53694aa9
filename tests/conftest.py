"""Shared pytest fixtures: the quickstart models generated fresh into a temp folder, the stand-in fault
backend, and a record of the tasks the local pool was given."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
MAKE_MODELS = REPO / "recipes" / "quickstart" / "make_models.py"


def load_make_models() -> ModuleType:
    """Import ``recipes/quickstart/make_models.py`` from its file path (it is not a package module)."""
    spec = importlib.util.spec_from_file_location("quickstart_make_models", MAKE_MODELS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session", autouse=True)
def _memo_folder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The memo of derived facts (trt_routes.files.memo) in a folder of this test session, never the user's
    ~/.cache; workers inherit it."""
    import os

    saved = os.environ.get("TRT_ROUTES_MEMO")
    os.environ["TRT_ROUTES_MEMO"] = str(tmp_path_factory.mktemp("memo"))
    yield
    if saved is None:
        os.environ.pop("TRT_ROUTES_MEMO", None)
    else:
        os.environ["TRT_ROUTES_MEMO"] = saved


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``resnet_like`` and ``transformer_block`` .onnx files, freshly generated (not the committed bytes)."""
    return load_make_models().write_models(tmp_path_factory.mktemp("models"))  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def sharing_project(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]) -> Path:
    """A CPU project applied once for the cache-sharing tests (tests/_sharing.py); they copy it."""
    from _sharing import tuned_once

    return tuned_once(tmp_path_factory, tiny_models)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]) -> Path:
    """A project (tests/_project.py) applied once per test module; tests copy it before changing it."""
    from _project import make_project

    from trt_routes.project import open_project
    from trt_routes.tune.apply import apply

    manifest = make_project(tmp_path_factory.mktemp("tuned"), tiny_models)
    result = apply(open_project(manifest))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    return manifest


@pytest.fixture
def faulty(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register tests/fault_backend.py's ``faulty`` backend (ONNX Runtime plus fault knobs) for this test
    and the workers it spawns."""
    monkeypatch.setenv("TRT_ROUTES_BACKENDS", "faulty=fault_backend:FaultBackend")
    monkeypatch.syspath_prepend(str(REPO / "tests"))
    from trt_routes.backends import registry

    registry.get.cache_clear()


@pytest.fixture
def submitted_tasks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kind of every task given to a PoolExecutor, in order (a spy on the real ``submit``)."""
    from trt_routes.execute.pool import PoolExecutor

    submitted: list[str] = []
    submit = PoolExecutor.submit

    def recording(self: PoolExecutor, task: Any, timeout: float) -> int:
        submitted.append(type(task).__name__)
        return submit(self, task, timeout)

    monkeypatch.setattr(PoolExecutor, "submit", recording)
    return submitted
