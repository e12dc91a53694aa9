"""kill -9 of a running apply, then apply again: no finished trial is measured twice, the cache
passes PRAGMA integrity_check, and the lockfile is the old one or the new one, never partial."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _project import make_project

from trt_routes.lockfile import Lockfile


def count_trials(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM trials").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def rows(db: Path) -> dict[str, tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, created_at, samples FROM trials")}


def apply_cmd(manifest: Path) -> list[str]:
    return [sys.executable, "-m", "trt_routes.cli.app", "apply", "-m", str(manifest), "--quiet"]


@pytest.mark.slow  # kills a real apply mid-run: timing-dependent
def test_kill_9_then_resume(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, mode="full",
                            measurement={"warmup": 3, "iterations": 40, "repeats": 3, "timeout_s": 60})
    db = manifest.parent / "caches" / "trials.sqlite"
    proc = subprocess.Popen(apply_cmd(manifest), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while count_trials(db) < 11 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)  # 11: past the first job (9 trials), so one lock write has happened
    assert proc.poll() is None, "apply finished before it could be killed: make the trials slower"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    before = rows(db)
    assert 11 <= len(before) < 18
    lock_path = manifest.parent / "tuning.lock"
    lock = Lockfile.read(lock_path)  # parses: never partial
    assert set(lock.jobs) <= {"cnn/bs1/cpu", "cnn/bs4/cpu"}
    assert "cnn/bs1/cpu" in lock.jobs

    done = subprocess.run(apply_cmd(manifest), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = rows(db)
    assert len(after) == 18  # 2 jobs x (8 routes of the full product + the default route)
    for tid, row in before.items():
        assert after[tid] == row, "a finished trial was measured again"
    assert f"Built {18 - len(before)} trial(s)" in done.stdout
    assert sorted(Lockfile.read(lock_path).jobs) == ["cnn/bs1/cpu", "cnn/bs4/cpu"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


MANIFEST = """schema_version: 1
measurement: {{warmup: 0, iterations: 20, repeats: 5, settle: false}}
switch_groups: {{g: "{group}"}}
strategies: {{s: {{mode: {mode}, max_builds: {budget}}}}}
tolerances: {{t: {{checks: [{{metric: cos, threshold: 1.0e-4}}]}}}}
defaults: {{backend: replay, switch_group: g, strategy: s, tolerance: t}}
models: {{m: {{path: {model}, shapes: {{a: {{x: [1]}}}}}}}}
"""


@pytest.mark.slow  # kills a real apply mid-run: timing-dependent
@pytest.mark.parametrize("mode", ["fast", "mixed", "full"])
def test_a_search_killed_mid_run_resumes_with_what_is_left_of_its_budget(
        tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``max_builds`` is kept across applies, an interrupted one too: the second apply builds what the first left
    of the budget (it built the whole budget again before: 310 trials for ``max_builds: 200``)."""
    import json

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from make_trt_landscapes import make

    from trt_routes.backends.landscape_model import validate_model

    data = make(3, 200)
    model = tmp_path / "m.json"
    model.write_text(json.dumps(data))
    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(model))
    budget = 240
    manifest = tmp_path / "tuning.yaml"
    manifest.write_text(MANIFEST.format(group=validate_model(data).expression_text(), mode=mode, budget=budget,
                                        model=model))
    db = tmp_path / "caches" / "trials.sqlite"
    proc = subprocess.Popen(apply_cmd(manifest), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while count_trials(db) < 40 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    assert proc.poll() is None, "apply finished before it could be killed: raise the budget"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    before = count_trials(db)
    assert 40 <= before < budget

    done = subprocess.run(apply_cmd(manifest), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert count_trials(db) == budget, (before, done.stdout)
    assert f"Built {budget - before} trial(s)" in done.stdout
