"""plan sees the world apply will run in: TRT_ROUTES_WORKERS (or --workers) changes the CPU signature for both,
so plan --check no longer says 'up to date' while apply --dry-run plans builds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _project import cli, copy_project


def test_plan_and_apply_read_the_workers_variable_alike(tuned: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2:
        pytest.skip("two CPU workers need two cores")
    manifest = copy_project(tuned, tmp_path / "a")
    assert cli("plan", "--check", "-m", str(manifest))[0] == 0  # one worker: up to date
    monkeypatch.setenv("TRT_ROUTES_WORKERS", "2")
    code, out = cli("plan", "--check", "-m", str(manifest))
    _, dry = cli("apply", "--dry-run", "-m", str(manifest))
    assert code == 1, out
    assert "build(s) to run now" in out and "build(s) to run now" in dry
    assert out.split("build(s) to run now")[0].split()[-1] == dry.split("build(s) to run now")[0].split()[-1]
