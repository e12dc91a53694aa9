"""A host made busy by real CPU burners while apply times its trials: ``measurement.busy: warn`` says so in
apply and explain; ``refuse`` keeps no trial and fails the job."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
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



def _confirmed(tmp_path: Path, tiny_models: dict[str, Path], busy: object) -> Path:
    """A job with a clear winner (-sleep_ms=2 against the default's 4 ms) decided side by side on a quiet host."""
    manifest = make_project(tmp_path / "c", tiny_models, backend="faulty", group="-sleep_ms=[4|2]",
                            measurement={**FAST, "iterations": 10})

    def edit(data: dict) -> None:
        data["measurement"]["busy"] = busy
        data["models"]["cnn"]["shapes"] = {"bs1": data["models"]["cnn"]["shapes"]["bs1"]}

    edit_manifest(manifest, edit)
    code, out = cli("apply", "-m", str(manifest))
    assert code == 0, out
    return manifest


def test_a_decision_taken_again_under_load_is_refused_and_the_old_one_kept(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """The confirmation carries the trials' busy check: its turns timed under load are taken again, then
    refused (measurement.busy: refuse), and the decision made on the quiet host stays locked. The limit is 0.3:
    one burner per CPU kept others at 50-52% of a 2-CPU CI host while the turns ran, so 0.5 sat on that edge."""
    manifest = _confirmed(tmp_path, tiny_models, {"action": "refuse", "max_others": 0.3})
    before = (manifest.parent / "tuning.lock").read_text()
    import os

    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        import time

        time.sleep(0.3)
        code, out = cli("apply", "--remeasure", "-m", str(manifest))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert code == 4, out
    assert "its decision will be taken again" in out and "taking it again (1 of 2)" in out
    assert "side-by-side re-measurement was not kept" in out and "measurement.busy: refuse" in out
    locked = yaml.safe_load(before)["jobs"]["cnn/bs1/cpu"]["route"]
    assert yaml.safe_load((manifest.parent / "tuning.lock").read_text())["jobs"]["cnn/bs1/cpu"]["route"] == locked


def test_a_decision_made_under_load_says_so_and_remeasure_takes_it_again(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path], burners: None) -> None:
    manifest = _confirmed(tmp_path, tiny_models, {"action": "warn", "max_others": 0.3})
    code, out = cli("apply", "--remeasure", "-m", str(manifest))
    assert code == 0, out
    assert "decided side by side while other processes kept" in out and "apply --remeasure" in out
    code, out = cli("explain", "cnn/bs1/cpu", "-m", str(manifest))
    assert code == 0 and "host while measured side by side: other processes kept" in out
