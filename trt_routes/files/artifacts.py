"""Content-addressed blobs (engines, arrays) and atomic file writes.

A blob lives at ``root/ab/abcdef...`` named by the sha256 of its bytes. Writers go through a
temporary file in the same folder, fsync and rename, so a killed run leaves no partial blob. A name is
never trusted: a blob is checked against its digest when it is written over an existing file, when it
is materialized and whenever ``has`` vouches for it (a corrupt blob is evicted and reads as missing, so
callers rebuild or re-fetch it). Hashes are remembered per (size, mtime, ctime, inode), so a file that
did not change is hashed once per process, and a materialized file's digest is kept beside it
(``.trt-routes-digests.json``) so `plan` can check it without reading it again.

Every write that the disk refuses (full, read-only, not ours) is a StorageError naming the file, with
no temp file left behind; a move across file systems (EXDEV) falls back to copy, fsync and rename.
Workers keep their scratch under the store itself (``root/.tmp``), so their builds are renamed into
place on one file system; scratch a killed run left is swept by the next worker or `cache gc`."""

from __future__ import annotations

__all__ = ["DIGESTS", "BlobStore", "atomic_copy", "atomic_output", "atomic_write_text", "file_digest",
           "stale_leftovers", "sweep_stale"]

import errno
import hashlib
import io
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from trt_routes.canonical import file_sha256
from trt_routes.errors import CacheError, StorageError, storage_error

if TYPE_CHECKING:  # numpy only where arrays are stored or read (workers, loss checks)
    import numpy as np


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


@contextmanager
def atomic_output(path: Path, *, durable: bool = True) -> Iterator[BinaryIO]:
    """A file for ``path``'s new bytes: renamed over ``path`` when the block ends, removed if it raises, so
    readers see the old file or the new one, never a mix. ``durable`` also fsyncs the file and its folder
    (survives power loss, not only a killed process). A write the disk refuses is a StorageError naming
    ``path`` (the old file, if any, is untouched)."""
    with _storage(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, _FILE_MODE)
            with os.fdopen(fd, "wb") as f:
                yield f
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    if durable:
        _fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (``atomic_output``). Blobs skip ``durable``: they are named by
    their digest, verified before use, and re-made when they fail verification."""
    with atomic_output(path, durable=durable) as f:
        f.write(data)


class _storage:
    """Re-raise an OSError the disk gave (ENOSPC, EROFS, EACCES...) as a StorageError naming ``path``."""

    def __init__(self, path: object) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, OSError) and not isinstance(exc, StorageError):
            clear = storage_error(exc, self.path)
            if clear is not None:
                raise clear from exc


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_copy(src: Path, dest: Path, *, expect: str | None = None, durable: bool = False) -> str:
    """Copy ``src`` to ``dest`` atomically, hashing the bytes as they are copied; returns their sha256.
    With ``expect``, bytes that hash differently never reach ``dest`` (CacheError). ``durable`` fsyncs the
    copy before the rename (a move across file systems must not leave a torn file once ``src`` is gone)."""
    h = hashlib.sha256()
    with atomic_output(dest, durable=durable) as out, open(src, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
            out.write(block)
        got = h.hexdigest()
        if expect is not None and got != expect:  # raised inside: the copy never replaces dest
            raise CacheError(f"{src} is corrupt: its bytes hash to {got[:16]}..., not to its name "
                             f"{expect[:16]}...",
                             "it was evicted; run `trt-routes apply` again (it rebuilds or re-fetches it)")
    return got


# -- leftovers of killed runs ----------------------------------------------------------------------
SCRATCH = ".tmp"
_SCRATCH_PREFIX = "worker-"
INCOMING_PREFIX = ".incoming-"
#: A leftover older than this is stale whoever made it (the longest time limit a trial is given).
STALE_AFTER_S = 3600.0


def _host() -> str:
    return socket.gethostname().replace("-", "_")[:40] or "host"


def _pid_alive(pid: int) -> bool:
    """``pid`` runs on this host (a zombie, killed and not reaped yet, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # someone else's process: alive
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def stale_leftovers(root: Path, *, max_age_s: float = STALE_AFTER_S, locked: bool = False) -> list[Path]:
    """Scratch folders (``root/.tmp/worker-HOST-PID-*``) whose worker is dead (on this host; another host's
    when older than ``max_age_s``), and ``root/.incoming-*`` staging folders older than ``max_age_s`` (any of
    them when ``locked``: the caller holds the project lock, so no import or pull is using one)."""
    found: list[Path] = []
    scratch = root / SCRATCH
    if scratch.is_dir():
        for folder in scratch.iterdir():
            parts = folder.name.split("-")
            if folder.name.startswith(_SCRATCH_PREFIX) and len(parts) >= 4 and parts[2].isdigit():
                pid = int(parts[2])
                if parts[1] == _host():  # a live worker's folder stays, however old
                    if pid != os.getpid() and not _pid_alive(pid):
                        found.append(folder)
                elif _age(folder) > max_age_s:  # another host's (a shared disk): by age only
                    found.append(folder)
            elif _age(folder) > max_age_s:
                found.append(folder)
    if root.is_dir():
        found += [p for p in root.glob(f"{INCOMING_PREFIX}*") if p.is_dir() and (locked or _age(p) > max_age_s)]
    return found


def sweep_stale(root: Path, *, max_age_s: float = STALE_AFTER_S, locked: bool = False) -> int:
    """Remove what ``stale_leftovers`` finds; the number of folders removed."""
    gone = 0
    for folder in stale_leftovers(root, max_age_s=max_age_s, locked=locked):
        shutil.rmtree(folder, ignore_errors=True)
        gone += not folder.exists()
    return gone


# -- digests remembered by stat ------------------------------------------------------------------
def stat_key(st: os.stat_result) -> list[int]:
    """What changes whenever a file's bytes may have: size, mtime, ctime (not settable by users), inode."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


_SEEN: dict[tuple[str, tuple[int, ...]], str] = {}  # (path, stat key) -> sha256, this process
_SEEN_LOCK = threading.Lock()


def cached_sha256(path: Path) -> str:
    """sha256 of ``path``'s bytes, hashed once per process while its stat stays the same."""
    key = (str(path), tuple(stat_key(os.stat(path))))
    with _SEEN_LOCK:
        sha = _SEEN.get(key)
    if sha is None:
        sha = file_sha256(path)
        with _SEEN_LOCK:
            if len(_SEEN) > 100_000:
                _SEEN.clear()
            _SEEN[key] = sha
    return sha


DIGESTS = ".trt-routes-digests.json"
_MAX_DIGESTS_BYTES = 4 << 20


def _read_digests(folder: Path) -> dict[str, Any]:
    try:
        with open(folder / DIGESTS, "rb") as f:
            data = json.loads(f.read(_MAX_DIGESTS_BYTES + 1)[:_MAX_DIGESTS_BYTES])
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def recorded_sha256(path: Path) -> str | None:
    """The digest recorded for ``path`` when it was materialized, if its stat has not changed since."""
    try:
        key = stat_key(os.stat(path))
    except OSError:
        return None
    entry = _read_digests(path.parent).get(path.name)
    if isinstance(entry, dict) and entry.get("stat") == key and isinstance(entry.get("sha256"), str):
        return str(entry["sha256"])
    return None


def file_digest(path: Path) -> str:
    """``path``'s sha256: the recorded one while its stat is unchanged, else hashed (no plan stays slow
    for a file materialized by trt-routes; any change to the bytes is seen)."""
    return recorded_sha256(path) or cached_sha256(path)


def record_sha256(path: Path, sha: str) -> None:
    """Remember ``sha`` for ``path``'s current stat in its folder's digest file (best effort)."""
    try:
        data = _read_digests(path.parent)
        data[path.name] = {"sha256": sha, "stat": stat_key(os.stat(path))}
        data = {k: v for k, v in data.items() if (path.parent / k).is_file()}
        atomic_write_bytes(path.parent / DIGESTS, json.dumps(data, sort_keys=True, indent=1).encode(),
                           durable=False)
    except (OSError, StorageError):
        pass  # only a speed-up: plan hashes the file instead


class BlobStore:
    """Content-addressed files under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.evicted: list[str] = []  # blobs found corrupt (and removed) by this object

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def exists(self, sha: str) -> bool:
        """A file of that name is there (its bytes unchecked: ``has`` checks them)."""
        return bool(sha) and len(sha) == 64 and self.path(sha).is_file()

    def has(self, sha: str) -> bool:
        """True when blob ``sha`` is here and its bytes hash to its name. A corrupt blob is evicted, so it
        reads as missing and the caller rebuilds or re-fetches it."""
        if not self.exists(sha):
            return False
        try:
            if cached_sha256(self.path(sha)) == sha:
                return True
        except OSError:
            return False
        self.evict(sha)
        return False

    def evict(self, sha: str) -> None:
        self.path(sha).unlink(missing_ok=True)
        self.evicted.append(sha)

    def put_file(self, src: Path, *, move: bool = False) -> str:
        """Store ``src`` by its digest; returns the sha256. A file already under that name is kept only
        when its bytes hash to it (a corrupt one is replaced by these verified bytes)."""
        sha = file_sha256(src)
        dest = self.path(sha)
        if self.has(sha):
            if move:
                Path(src).unlink(missing_ok=True)
            return sha
        if move:
            with _storage(dest):
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.replace(src, dest)
                    return sha
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
            atomic_copy(src, dest, expect=sha, durable=True)  # another file system: copy, fsync, rename
            Path(src).unlink(missing_ok=True)
        else:
            atomic_copy(src, dest, expect=sha)
        return sha

    # -- scratch: worker build folders on the store's own file system --------------------------------
    @property
    def scratch_root(self) -> Path:
        """Where workers build (``root/.tmp``): renaming a finished engine into the store never crosses a
        file system, whatever ``$TMPDIR`` is."""
        return self.root / SCRATCH

    def make_scratch(self) -> Path:
        """A fresh scratch folder for this process, named by host and pid (so a later run can tell a dead
        owner's leftovers); stale folders of dead workers are swept first."""
        root = self.scratch_root
        with _storage(root):
            root.mkdir(parents=True, exist_ok=True)
            sweep_stale(self.root)
            return Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{_host()}-{os.getpid()}-", dir=root))

    def put_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        if not self.has(sha):
            atomic_write_bytes(self.path(sha), data, durable=False)
        return sha

    def put_arrays(self, arrays: dict[str, np.ndarray]) -> str:
        import numpy as np

        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        return self.put_bytes(buf.getvalue())

    def get_arrays(self, sha: str) -> dict[str, np.ndarray]:
        if not self.has(sha):
            raise CacheError(f"array blob {sha[:16]}... in {self.root} is missing or corrupt",
                             "run `trt-routes apply` again: it re-measures what it needs")
        import numpy as np

        with np.load(self.path(sha), allow_pickle=False) as data:
            return {k: data[k] for k in data.files}

    def verify(self, sha: str) -> bool:
        """True when the blob exists and its bytes still hash to its name (hashed again, not remembered)."""
        ok = self.exists(sha) and file_sha256(self.path(sha)) == sha
        if self.exists(sha) and not ok:
            self.evict(sha)
        return ok

    def materialize(self, sha: str, dest: Path) -> bool:
        """Copy blob ``sha`` to ``dest`` unless it is already there; True when it copied. The bytes are
        hashed as they are copied: a corrupt blob is evicted and never reaches ``dest`` (CacheError)."""
        try:
            if dest.is_file() and file_digest(dest) == sha:
                record_sha256(dest, sha)
                return False
        except OSError:
            pass
        if not self.exists(sha):
            raise CacheError(f"blob {sha[:16]}... is not in {self.root}",
                             "run `trt-routes apply` again: it rebuilds the engine")
        try:
            atomic_copy(self.path(sha), dest, expect=sha)
        except CacheError:
            self.evict(sha)
            raise
        record_sha256(dest, sha)
        return True

    def iter_shas(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.glob("??/*") if p.is_file() and not p.name.startswith("."))
