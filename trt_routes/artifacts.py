"""Content-addressed blobs (engines, arrays) and atomic file writes.

A blob lives at ``root/ab/abcdef...`` named by the sha256 of its bytes. Writers go through a
temporary file in the same folder, fsync and rename, so a killed run leaves no partial blob."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from trt_routes.canonical import file_sha256


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give: mkstemp's 0600 would hide locks and engines


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a mix.

    ``durable`` also fsyncs (survives power loss, not only a killed process). Blobs skip it: they
    are named by their digest, verified before use, and re-made when they fail verification."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, _FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.fchmod(fd, _FILE_MODE)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class BlobStore:
    """Content-addressed files under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def has(self, sha: str) -> bool:
        return bool(sha) and self.path(sha).is_file()

    def put_file(self, src: Path, *, move: bool = False) -> str:
        """Store ``src`` by its digest; returns the sha256."""
        sha = file_sha256(src)
        dest = self.path(sha)
        if not dest.is_file():
            if move:
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dest)
            else:
                atomic_copy(src, dest)
        elif move:
            Path(src).unlink(missing_ok=True)
        return sha

    def put_bytes(self, data: bytes) -> str:
        import hashlib

        sha = hashlib.sha256(data).hexdigest()
        if not self.path(sha).is_file():
            atomic_write_bytes(self.path(sha), data, durable=False)
        return sha

    def put_arrays(self, arrays: dict[str, np.ndarray]) -> str:
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        return self.put_bytes(buf.getvalue())

    def get_arrays(self, sha: str) -> dict[str, np.ndarray]:
        with np.load(self.path(sha), allow_pickle=False) as data:
            return {k: data[k] for k in data.files}

    def verify(self, sha: str) -> bool:
        """True when the blob exists and its bytes still hash to its name."""
        return self.has(sha) and file_sha256(self.path(sha)) == sha

    def materialize(self, sha: str, dest: Path) -> bool:
        """Copy blob ``sha`` to ``dest`` unless it is already there; True when it copied."""
        if dest.is_file() and file_sha256(dest) == sha:
            return False
        atomic_copy(self.path(sha), dest)
        return True

    def iter_shas(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.glob("??/*") if p.is_file() and not p.name.startswith("."))
