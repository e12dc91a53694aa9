"""Layer profiles travel with their trials (issue 32): `cache export`/`import` and `cache push`/`pull` carry the
profiles a cache has taken, a teammate's `explain --layers` then reads them without profiling, and a profile row
in a bundle that is not a checked layer profile of a 32-hex trial id is refused with nothing written."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
from _project import copy_project
from _sharing import fresh_clone, machine

from trt_routes.audit.layers import profile_job
from trt_routes.errors import CacheError
from trt_routes.share.merge import export_bundle, import_bundle
from trt_routes.share.remote import pull, push


def _profiled(sharing_project: Path, tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """Machine A's project with its profiles (apply's finalists, and the default's, taken here if missing):
    trial id -> profile."""
    a = copy_project(sharing_project, tmp_path / "a")
    project = machine(a)
    profile_job(project, project.jobs[0].name, "")
    stored = {p.stem: json.loads(p.read_text()) for p in project.profiles_dir.glob("*.json")}
    assert stored
    return a, stored


def test_export_and_import_carry_a_profile(sharing_project: Path, tmp_path: Path) -> None:
    a, profiles = _profiled(sharing_project, tmp_path)
    export_bundle(machine(a), tmp_path / "x.tar.gz")
    b = fresh_clone(a, tmp_path / "b")
    report = import_bundle(machine(b), tmp_path / "x.tar.gz")
    assert report.profiles == len(profiles)
    got = {p.stem: json.loads(p.read_text()) for p in machine(b).profiles_dir.glob("*.json")}
    assert got == profiles
    # read back as the trial's profile, not taken again (that would build the engine B does not have)
    project = machine(b)
    assert profile_job(project, project.jobs[0].name, "")[1].layers
    assert not [p for p in project.store.root.glob("??/*") if p.is_file()]


def test_push_and_pull_carry_a_profile(sharing_project: Path, tmp_path: Path) -> None:
    a, profiles = _profiled(sharing_project, tmp_path)
    url = str(tmp_path / "remote")
    push(machine(a), url)
    b = fresh_clone(a, tmp_path / "b")
    got = pull(machine(b), url)
    assert got.rejected == []
    assert {p.stem: json.loads(p.read_text()) for p in machine(b).profiles_dir.glob("*.json")} == profiles


@pytest.mark.parametrize("row", [
    {"trial": "../../../../tmp/evil", "profile": {}},
    {"trial": "0" * 32, "profile": {"backend": "x", "route": "", "runs": 1, "layers": [{"name": "n"}]}},
    {"trial": "0" * 32, "profile": {"backend": "x", "route": "", "runs": 1, "wall_ms": None,
                                   "layers": [{"name": "n", "op": "o", "where": "w", "ms": 1.0}] * 30000}},
    {"trial": "0" * 32},
])
def test_a_bad_profile_row_refuses_the_bundle(sharing_project: Path, tmp_path: Path, row: dict[str, object]) -> None:
    a, _ = _profiled(sharing_project, tmp_path)
    export_bundle(machine(a), tmp_path / "x.tar.gz")
    with tarfile.open(tmp_path / "x.tar.gz", "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]
    import hashlib

    head = json.loads(next(d for m, d in members if m.name == "trt-routes-bundle.json"))
    bad = json.dumps(row).encode() + b"\n"
    head["members"]["profiles.jsonl"] = {"sha256": hashlib.sha256(bad).hexdigest(), "size": len(bad), "rows": 1}
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for m, data in members:
            data = json.dumps(head).encode() if m.name == "trt-routes-bundle.json" else \
                bad if m.name == "profiles.jsonl" else data
            m.size = len(data)
            tar.addfile(m, io.BytesIO(data))
    (tmp_path / "bad.tar.gz").write_bytes(buf.getvalue())
    b = fresh_clone(a, tmp_path / "b")
    with pytest.raises(CacheError, match="profile"):
        import_bundle(machine(b), tmp_path / "bad.tar.gz")
    assert not machine(b).profiles_dir.exists() or not list(machine(b).profiles_dir.iterdir())
    assert not (tmp_path / "tmp" / "evil.json").exists()
