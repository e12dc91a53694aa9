"""The no-op hint (trt_routes.execute.quiet): kept per manifest and flags, true only while every file it names
is as the last finished apply left it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trt_routes.execute import quiet


def test_the_hint_holds_until_any_named_file_changes_appears_or_goes(tmp_path: Path) -> None:
    manifest, lock, wal = tmp_path / "tuning.yaml", tmp_path / "tuning.lock", tmp_path / "trials.sqlite-wal"
    manifest.write_text("a: 1\n")
    lock.write_text("{}")
    key = quiet.key(manifest, {"only": None, "retry_failed": False})
    assert not quiet.predicted(key)  # nothing kept yet
    quiet.remember(key, [manifest, lock, wal])  # the write-ahead log is absent: kept as absent
    assert quiet.predicted(key)
    assert not quiet.predicted(quiet.key(manifest, {"only": ["m/*"], "retry_failed": False}))  # other flags
    assert not quiet.predicted(quiet.key(tmp_path / "other.yaml", {"only": None, "retry_failed": False}))

    wal.write_bytes(b"x")  # another process wrote the cache
    assert not quiet.predicted(key)
    quiet.remember(key, [manifest, lock, wal])
    lock.write_text("{ }")  # same file, other size
    assert not quiet.predicted(key)
    quiet.remember(key, [manifest, lock, wal])
    st = manifest.stat()
    os.utime(manifest, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same size, touched
    assert not quiet.predicted(key)
    quiet.remember(key, [manifest, lock, wal])
    manifest.unlink()
    assert not quiet.predicted(key)


def test_without_a_memo_there_is_no_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRT_ROUTES_MEMO", "off")
    (tmp_path / "tuning.yaml").write_text("a: 1\n")
    key = quiet.key(tmp_path / "tuning.yaml", {})
    quiet.remember(key, [tmp_path / "tuning.yaml"])
    assert not quiet.predicted(key)
