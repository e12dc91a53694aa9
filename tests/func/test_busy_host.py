"""A host made busy by real CPU burners while apply times its trials: ``measurement.busy: warn`` says so in
apply and explain; ``refuse`` keeps no trial and fails the job."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _project import FAST, cli, edit_manifest, make_project


@pytest.fixture
def burners() -> Iterator[None]:
    import os

    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        import time

        time.sleep(0.3)  # past the burners' own start-up: they are spinning when apply begins
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _project(tmp_path: Path, tiny_models: dict[str, Path], busy: object) -> Path:
    manifest = make_project(tmp_path / "p", tiny_models, group="-graph_optimization_level=[basic|all]",
                            measurement={**FAST, "iterations": 10})

    def edit(data: dict) -> None:
        data["measurement"]["busy"] = busy
        data["strategies"]["s"]["confirm"] = False
        data["models"]["cnn"]["shapes"] = {"bs1": data["models"]["cnn"]["shapes"]["bs1"]}

    edit_manifest(manifest, edit)
    return manifest


def test_warn_tunes_and_says_the_host_was_busy(tmp_path: Path, tiny_models: dict[str, Path],
                                               burners: None) -> None:
    manifest = _project(tmp_path, tiny_models, {"action": "warn", "max_others": 0.05})
    # trials long enough (hundreds of runs) to be judged alone: warn does not stretch a window
    edit_manifest(manifest, lambda d: d["measurement"].update(iterations=200, repeats=3))
    code, out = cli("apply", "-m", str(manifest))
    assert code == 0, out
    assert "was timed on a busy host" in out
    assert "of the CPUs busy" in out
    code, out = cli("explain", "cnn/bs1/cpu", "-m", str(manifest))
    assert code == 0 and "Busy host:" in out
    page = tmp_path / "report.html"
    code, out = cli("report", "--html", str(page), "-m", str(manifest))
    assert code == 0, out
    assert "Busy host:" in page.read_text()


def test_refuse_keeps_no_trial_and_fails_the_job(tmp_path: Path, tiny_models: dict[str, Path],
                                                 burners: None) -> None:
    manifest = _project(tmp_path, tiny_models, {"action": "refuse", "max_others": 0.05})
    code, out = cli("apply", "-m", str(manifest))
    assert code == 4, out
    assert "was not kept" in out and "measurement.busy: refuse" in out
    from _project import routes_and_statuses

    # nothing measured on the busy host was cached: these trials take a few milliseconds, fewer clock
    # ticks than /proc/stat needs to tell (a 6 ms trial once read 0% others here), so refuse stretches
    # each trial's noise window until it can
    assert routes_and_statuses(manifest) == {}
    assert not (manifest.parent / "tuning.lock").exists() or "cnn/bs1/cpu" not in (
        manifest.parent / "tuning.lock").read_text()

