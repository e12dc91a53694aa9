"""cache stats, gc (policy, --dry-run, --older-than, never what tuning.lock references) and verify
(integrity check, blob digests, corrupt blobs evicted and re-planned, exit codes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _project import copy_project
from _sharing import add_foreign_trials, machine
from typer.testing import CliRunner

from trt_routes.canonical import file_sha256
from trt_routes.cli.app import app
from trt_routes.lockfile import Lockfile
from trt_routes.share.maintenance import gc, stats, verify
from trt_routes.tune.apply import apply, compute_plan

runner = CliRunner()

@pytest.fixture
def a(sharing_project: Path, tmp_path: Path) -> Path:
    """Machine A's project (applied once per session), copied to change it."""
    return copy_project(sharing_project, tmp_path / "a")


def _locked_engines(manifest: Path) -> set[str]:
    return {e["engine"]["sha256"] for e in Lockfile.read(manifest.parent / "tuning.lock").jobs.values()}


def _store(manifest: Path) -> Path:
    return manifest.parent / "caches" / "engines"


def test_stats(a: Path) -> None:
    s = stats(machine(a))
    assert s.trials == 10 and s.by_status == {"ok": 10} and s.by_backend == {"onnxruntime": 10}
    assert s.by_source == {"local": 10} and len(s.signatures) == 1 and s.signatures[0]["trials"] == 10
    assert s.blobs > 0 and s.blob_bytes > 0 and s.engines_present == s.engines_referenced
    result = runner.invoke(app, ["cache", "stats", "-m", str(a)])
    assert result.exit_code == 0 and "10 trial(s)" in result.output and "by status: ok 10" in result.output
    result = runner.invoke(app, ["cache", "stats", "--json", "-m", str(a)])
    assert json.loads(result.output)["trials"] == 10


def test_gc_keeps_locked_and_fastest_engines(a: Path) -> None:
    before = set(p.name for p in _store(a).glob("??/*"))
    dry = gc(machine(a), dry_run=True)
    assert dry.dry_run and dry.trials == 0 and set(p.name for p in _store(a).glob("??/*")) == before
    done = gc(machine(a))
    after = set(p.name for p in _store(a).glob("??/*"))
    assert done.blobs == dry.blobs == len(before - after) > 0  # engines of slower routes
    assert _locked_engines(a) <= after  # never what tuning.lock references
    project = machine(a)
    with project.open_cache() as cache:
        for t in cache.all_trials():
            assert t.outputs_sha256 in after  # outputs stay while their trial does
        plan = compute_plan(project, cache, project.read_lock())
    assert not plan.has_work
    assert apply(machine(a)).built == 0
    assert gc(machine(a)).blobs == 0  # nothing more to drop


def test_gc_older_than_drops_old_foreign_signatures_only(a: Path) -> None:
    assert add_foreign_trials(a, a, when="2020-01-01T00:00:00Z") == 10
    assert gc(machine(a), older_than_days=30, dry_run=True).trials == 10
    result = runner.invoke(app, ["cache", "gc", "--older-than", "30", "--json", "-m", str(a)])
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["trials"] == 10 and len(report["signatures"]) == 1
    s = stats(machine(a))
    assert s.trials == 10 and len(s.signatures) == 1  # this machine's own signature stays
    assert gc(machine(a), older_than_days=0).trials == 0  # current signature: never dropped by age


def test_verify_evicts_corrupt_blobs_and_the_next_apply_replans(a: Path) -> None:
    assert verify(machine(a)).ok
    locked = sorted(_locked_engines(a))[0]
    blob = _store(a) / locked[:2] / locked
    blob.write_bytes(b"bit rot")
    entry = next(e for e in Lockfile.read(a.parent / "tuning.lock").jobs.values()
                 if e["engine"]["sha256"] == locked)
    (a.parent / entry["engine"]["path"]).unlink()  # the materialized copy is gone too
    result = runner.invoke(app, ["cache", "verify", "-m", str(a)])
    assert result.exit_code == 1 and f"corrupt blob {locked}: evicted" in result.output
    assert not blob.exists()
    result = runner.invoke(app, ["cache", "verify", "-m", str(a)])
    assert result.exit_code == 0 and "ok" in result.output and "not in the store" in result.output
    project = machine(a)
    with project.open_cache() as cache:
        plan = compute_plan(project, cache, project.read_lock())
    assert {jp.action for jp in plan.jobs} >= {"materialize"}
    applied = apply(machine(a))
    assert applied.exit_code == 0 and applied.built >= 1
    engine = a.parent / entry["engine"]["path"]
    assert engine.is_file() and file_sha256(engine) in {p.name for p in _store(a).glob("??/*")}


def test_verify_reports_a_corrupt_database(a: Path) -> None:
    db = a.parent / "caches" / "trials.sqlite"
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # clobber the header's tail and the first page
    db.write_bytes(bytes(data))
    result = runner.invoke(app, ["cache", "verify", "-m", str(a)])
    assert result.exit_code == 1 and "Traceback" not in result.output
