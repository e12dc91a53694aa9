"""The wheel runs on its own: built from this tree, installed (not editable) in a fresh virtual environment,
`trt-routes init --example` + `trt-routes apply` there write a lockfile for every quickstart job. The sdist
carries the tests and runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(*cmd: str | Path, cwd: Path | None = None, timeout: float = 900) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from this tree installed (dependencies from the normal index)."""
    dist = tmp_path_factory.mktemp("dist")
    leftover = not (REPO / "build").exists()
    try:
        _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", dist)
    finally:
        if leftover:  # setuptools builds in the tree: a build/ folder left there shadows the `build` package
            import shutil

            shutil.rmtree(REPO / "build", ignore_errors=True)
    wheel = next(dist.glob("trt_routes-*.whl"))
    env = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=True).create(env)
    _run(env / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    return env


def test_wheel_install_runs_init_example_and_apply(wheel_venv: Path, tmp_path: Path) -> None:
    bin_ = wheel_venv / "bin"
    where = _run(bin_ / "python", "-c", "import trt_routes; print(trt_routes.__file__)", cwd=tmp_path)
    assert str(wheel_venv) in where, f"not the installed wheel: {where}"  # not this source tree
    _run(bin_ / "trt-routes", "init", "--example", "demo", cwd=tmp_path)
    demo = tmp_path / "demo"
    _run(bin_ / "trt-routes", "apply", "--quiet", cwd=demo)  # the README's first command
    lock = yaml.safe_load((demo / "tuning.lock").read_text())
    jobs = {"resnet-like/bs1/cpu", "resnet-like/bs8/cpu", "transformer-block/s32/cpu", "transformer-block/b4-s64/cpu"}
    assert set(lock["jobs"]) == jobs, lock
    out = _run(bin_ / "trt-routes", "plan", "--check", cwd=demo)
    assert "up to date" in out


def test_sdist_has_the_tests_and_runs_them(wheel_venv: Path, tmp_path: Path) -> None:
    import importlib.metadata

    try:  # the installed distribution, not any folder named build/ on sys.path
        importlib.metadata.version("build")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("python -m build makes the sdist: pip install build")
    _run(sys.executable, "-m", "build", "--sdist", "--outdir", tmp_path / "dist", REPO)
    sdist = next((tmp_path / "dist").glob("trt_routes-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "src", filter="data")
    root = tmp_path / "src" / sdist.name.removesuffix(".tar.gz")
    for needed in ("LICENSE", "tuning.yaml", "tests/conftest.py", "tests/unit/test_examples.py",
                   "recipes/quickstart/make_models.py", "trt_routes/examples/quickstart/tuning.yaml"):
        assert f"{root.name}/{needed}" in names, needed
    py = wheel_venv / "bin" / "python"
    _run(py, "-m", "pip", "install", "-q", "pytest", "hypothesis")
    out = _run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_examples.py",
               "tests/unit/test_routes.py", cwd=root)
    assert " passed" in out
