"""The blob store trusts no file name: a blob is checked against its digest when it is written over an
existing file, when it is materialized and whenever ``has`` vouches for it; plan sees a materialized
engine whose bytes changed (a digest remembered by stat keeps a no-op plan from reading engines)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from _project import cli, copy_project

from trt_routes.errors import CacheError
from trt_routes.files import artifacts
from trt_routes.files.artifacts import DIGESTS, BlobStore
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.tune.apply import apply


def _flip(path: Path, at: int = 100) -> None:
    """Flip one byte in place: same size, same name."""
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("move", [False, True])
def test_put_file_replaces_a_corrupt_file_of_the_same_name(tmp_path: Path, move: bool) -> None:
    store = BlobStore(tmp_path / "store")
    data = b"a fresh engine build" * 100
    sha = _sha(data)
    store.path(sha).parent.mkdir(parents=True)
    store.path(sha).write_bytes(b"a corrupt copy")  # what a crashed copy or a flipped byte leaves
    src = tmp_path / "engine"
    src.write_bytes(data)
    assert store.put_file(src, move=move) == sha
    assert store.path(sha).read_bytes() == data and store.verify(sha)
    assert src.exists() is not move
    src.write_bytes(data)  # a file that is already right is kept (and a moved source removed)
    before = store.path(sha).stat().st_ino
    store.put_file(src, move=True)
    assert store.path(sha).stat().st_ino == before and not src.exists()


def test_put_bytes_and_has_check_the_bytes(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    sha = store.put_bytes(b"outputs")
    assert store.has(sha)
    _flip(store.path(sha), 0)
    assert not store.has(sha) and not store.path(sha).exists() and store.evicted == [sha]  # evicted: a miss
    assert store.put_bytes(b"outputs") == sha and store.has(sha)
    store.path(sha).write_bytes(b"planted")
    assert store.put_bytes(b"outputs") == sha and store.path(sha).read_bytes() == b"outputs"
    with pytest.raises(CacheError, match="missing or corrupt"):
        store.get_arrays(_sha(b"nothing"))


def test_materialize_never_copies_a_corrupt_blob(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    sha = store.put_bytes(b"engine bytes" * 50)
    dest = tmp_path / "out" / "engine.onnx"
    assert store.materialize(sha, dest) and dest.read_bytes() == b"engine bytes" * 50
    record = json.loads((dest.parent / DIGESTS).read_text())
    assert record["engine.onnx"]["sha256"] == sha
    assert artifacts.recorded_sha256(dest) == sha
    assert not store.materialize(sha, dest)  # already there
    _flip(dest, 3)
    assert artifacts.recorded_sha256(dest) is None  # the stat changed: the record no longer vouches
    assert store.materialize(sha, dest) and dest.read_bytes() == b"engine bytes" * 50
    dest.unlink()
    _flip(store.path(sha), 3)
    with pytest.raises(CacheError, match="corrupt"):
        store.materialize(sha, dest)
    assert not dest.exists() and not store.exists(sha)  # nothing corrupt copied; the blob evicted
    assert not list(dest.parent.glob(".*.tmp"))


def _engine(manifest: Path) -> tuple[Path, dict[str, object]]:
    lock = Lockfile.read(manifest.parent / "tuning.lock")
    _, entry = sorted(lock.jobs.items())[0]
    return manifest.parent / entry["engine"]["path"], entry


def test_plan_sees_a_flipped_byte_and_apply_rematerializes(tuned: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    code, out = cli("plan", "--check", "-m", str(manifest))
    assert code == 0, out
    engine, entry = _engine(manifest)
    _flip(engine)
    assert engine.stat().st_size == entry["engine"]["size"]  # sizes agree: only the digest can tell
    code, out = cli("plan", "--check", "-m", str(manifest))
    assert code == 1 and "corrupt or was changed" in out and "materialize" in out, out
    result = apply(open_project(manifest))
    assert result.exit_code == 0 and result.built == 0
    assert _sha(engine.read_bytes()) == entry["engine"]["sha256"]
    # a no-op plan reads no engine it materialized: the digest recorded then vouches while the stat
    # holds (the other job's engine was copied with the project: a new inode, so it is hashed)
    hashed: list[Path] = []
    real = artifacts.file_sha256

    def counting(path: Path, chunk: int = 1 << 20) -> str:
        hashed.append(Path(path))
        return real(path)
    monkeypatch.setattr(artifacts, "file_sha256", counting)
    artifacts._SEEN.clear()
    code, out = cli("plan", "--check", "-m", str(manifest))
    assert code == 0, out
    assert engine not in hashed and hashed  # the copied one was checked by its bytes


def test_a_corrupt_blob_is_rebuilt_not_materialized(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    engine, entry = _engine(manifest)
    store = open_project(manifest).store
    sha = str(entry["engine"]["sha256"])  # type: ignore[index]
    _flip(store.path(sha))
    engine.unlink()
    _, out = cli("plan", "-m", str(manifest))
    assert "engine missing" in out
    result = apply(open_project(manifest))
    assert result.exit_code == 0 and result.built >= 1  # the corrupt blob read as missing: rebuilt
    _, entry = _engine(manifest)
    assert _sha(engine.read_bytes()) == entry["engine"]["sha256"]  # type: ignore[index]
    assert open_project(manifest).store.verify(str(entry["engine"]["sha256"]))  # type: ignore[index]


def test_engines_gone_from_the_store_are_rebuilt_inside_the_progress_count(tuned: Path, tmp_path: Path) -> None:
    """A cache carried without its blob store (run 3 on the H200 printed "[3/2]"): every engine gone is built
    again, said as such, and the progress count grows with it instead of running past its total."""
    manifest = copy_project(tuned, tmp_path / "p")
    store = open_project(manifest).store
    for blob in [p for p in store.root.glob("??/*") if p.is_file()]:
        blob.unlink()
    for engine in (manifest.parent / "engines").rglob("*"):
        if engine.is_file():
            engine.unlink()
    code, out = cli("apply", "-m", str(manifest))
    assert code == 0, out
    assert "is gone from the blob store; building it again" in out
    counts = [tuple(map(int, m.groups())) for m in re.finditer(r"\[(\d+)/(\d+)\]", out)]
    assert counts and all(done <= total for done, total in counts), counts
