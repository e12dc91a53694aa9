"""status: tuning.lock against the trial cache against the engines on disk, one state per job, with
the fix in its detail; exit 1 unless every job is ok (or cannot run here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _project import cli, edit_manifest, make_project
from typer.testing import CliRunner

from trt_routes.audit.status import status
from trt_routes.cli.app import app
from trt_routes.project import open_project
from trt_routes.tune.apply import apply


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]) -> Path:
    manifest = make_project(tmp_path_factory.mktemp("status") / "p", tiny_models)
    assert apply(open_project(manifest)).exit_code == 0
    return manifest


@pytest.fixture
def project(applied: Path, tmp_path: Path) -> Path:
    shutil.copytree(applied.parent, tmp_path / "p")
    return tmp_path / "p" / "tuning.yaml"


def states(manifest: Path) -> dict[str, tuple[str, str]]:
    return {r.job: (r.state, r.detail) for r in status(open_project(manifest))}


def cli_status(manifest: Path) -> tuple[int, list[dict[str, str]]]:
    result = CliRunner().invoke(app, ["status", "--json", "-m", str(manifest)])
    return result.exit_code, json.loads(result.output)["jobs"]


def test_all_ok_after_apply(project: Path) -> None:
    assert {s for s, _ in states(project).values()} == {"ok"}
    code, rows = cli_status(project)
    assert code == 0 and [r["state"] for r in rows] == ["ok", "ok"] and all(r["route"] is not None for r in rows)


def test_missing_engine_and_digest_mismatch(project: Path) -> None:
    root = project.parent
    (root / "engines" / "cnn" / "bs1" / "cpu.onnx").unlink()
    (root / "engines" / "cnn" / "bs4" / "cpu.onnx").write_bytes(b"not the locked engine")
    got = states(project)
    assert got["cnn/bs1/cpu"][0] == "missing-engine"
    assert "engines/cnn/bs1/cpu.onnx" in got["cnn/bs1/cpu"][1] and "trt-routes apply" in got["cnn/bs1/cpu"][1]
    assert got["cnn/bs4/cpu"][0] == "digest-mismatch" and "does not match the locked sha256" in got["cnn/bs4/cpu"][1]
    code, rows = cli_status(project)
    assert code == 1 and {r["state"] for r in rows} == {"missing-engine", "digest-mismatch"}
    result = CliRunner().invoke(app, ["status", "-m", str(project)])
    assert result.exit_code == 1 and "missing-engine" in result.output and "digest-mismatch" in result.output
    assert apply(open_project(project)).built == 0  # engines come back from the blob store
    assert {s for s, _ in states(project).values()} == {"ok"}


def test_jobs_without_lock_entry_and_lock_entries_without_job(project: Path) -> None:
    edit_manifest(project, lambda d: d["models"]["cnn"]["shapes"].update(
        bs2={"input": [2, 3, 32, 32]}) or d["models"]["cnn"]["shapes"].pop("bs4"))
    got = states(project)
    assert got["cnn/bs2/cpu"] == ("no-lock", "no lock entry: run `trt-routes apply`")
    assert got["cnn/bs4/cpu"][0] == "orphan-lock" and got["cnn/bs1/cpu"][0] == "ok"
    code, rows = cli_status(project)
    assert code == 1 and [r["job"] for r in rows] == ["cnn/bs1/cpu", "cnn/bs2/cpu", "cnn/bs4/cpu"]


def test_a_stale_lock_is_not_ok(project: Path) -> None:
    edit_manifest(project, lambda d: d.update(measurement={**d["measurement"], "iterations": 4}))
    got = states(project)
    assert {s for s, _ in got.values()} == {"stale"}
    assert got["cnn/bs1/cpu"][1] == "measurement protocol changed: run `trt-routes apply`"
    edit_manifest(project, lambda d: d.update(measurement={**d["measurement"], "iterations": 3},
                                              tolerances={"t": {"checks": [{"metric": "cos", "threshold": 1e-3}]}}))
    assert states(project)["cnn/bs1/cpu"][1].startswith("tolerance 't' changed: cos<0.0001, lInf<0.01 -> cos<0.001")


def test_lock_without_its_trials_and_without_a_cache(project: Path) -> None:
    cache = project.parent / "caches" / "trials.sqlite"
    with open_project(project).open_cache() as store:
        lock_trial = open_project(project).read_lock().jobs["cnn/bs1/cpu"]["trial"]
        store.delete_trials([lock_trial])
    got = states(project)
    assert got["cnn/bs1/cpu"][0] == "not-in-cache" and "cache pull" in got["cnn/bs1/cpu"][1]
    assert got["cnn/bs4/cpu"][0] == "ok"
    for f in cache.parent.glob("trials.sqlite*"):
        f.unlink()
    got = states(project)
    assert {s for s, _ in got.values()} == {"not-in-cache"} and "no trial cache at" in got["cnn/bs1/cpu"][1]
    assert not cache.exists()  # status reads; it does not create a cache


def test_jobs_that_cannot_run_here_are_blocked_not_up_to_date(project: Path) -> None:
    edit_manifest(project, lambda d: d.update(targets={"h200": {"kind": "gpu", "name": "*H200*"}},
                                              defaults={**d["defaults"], "targets": ["h200"]}))
    code, rows = cli_status(project)
    by = {r["job"]: r for r in rows}
    assert by["cnn/bs1/h200"]["state"] == "blocked" and "tunes CPU targets" in by["cnn/bs1/h200"]["detail"]
    # a job that cannot work as written exits 2, as apply does, before the orphan lock entry's 1
    assert by["cnn/bs1/cpu"]["state"] == "orphan-lock" and code == 2
    (project.parent / "tuning.lock").unlink()
    code, rows = cli_status(project)
    assert code == 2 and {r["state"] for r in rows} == {"blocked"}
    code, out = cli("plan", "--check", "-m", str(project))
    assert code == 2 and "blocked here, not up to date" in out and "every job is up to date" not in out


def test_a_lock_entry_with_an_unknown_knob_or_an_engine_outside_the_engine_folder_is_invalid(
        project: Path, tmp_path: Path) -> None:
    import yaml

    from trt_routes.canonical import file_sha256

    lock = project.parent / "tuning.lock"
    data = yaml.safe_load(lock.read_text())
    outside = tmp_path / "passwd"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n")
    data["jobs"]["cnn/bs1/cpu"]["route"] = "-no_such_knob=1"
    data["jobs"]["cnn/bs4/cpu"]["engine"] = {"path": str(outside), "sha256": file_sha256(outside),
                                             "size": outside.stat().st_size}
    lock.write_text(yaml.safe_dump(data))
    got = states(project)
    assert got["cnn/bs1/cpu"][0] == "invalid-lock" and "no_such_knob" in got["cnn/bs1/cpu"][1], got
    assert got["cnn/bs4/cpu"][0] == "invalid-lock" and "outside the project's engine folder" in got["cnn/bs4/cpu"][1]
    code, rows = cli_status(project)
    assert code == 1 and {r["state"] for r in rows} == {"invalid-lock"}
    result = CliRunner().invoke(app, ["lock", "check", "-m", str(project)])
    assert result.exit_code != 0 and "no_such_knob" in result.output, result.output
