"""A TensorRT timing cache shared by every build of one (TensorRT version, GPU), guarded by a file lock.

Loaded before each build and combined back after it, so parallel workers only ever add entries."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


def timing_cache_path(directory: Path, trt_version: str, gpu: str) -> Path:
    """Where the cache for ``trt_version`` on ``gpu`` lives inside ``directory``."""
    return directory / f"tensorrt-{_slug(trt_version)}-{_slug(gpu)}.timing-cache"


def host_bytes(blob: Any) -> bytes:
    """Bytes of an ``IHostMemory`` (buffer protocol) or of plain bytes."""
    return blob if isinstance(blob, bytes) else bytes(memoryview(blob))


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class TimingCacheFile:
    """One timing-cache file and its lock."""

    def __init__(self, path: Path, lock_timeout_s: float = 600.0) -> None:
        self.path = path
        self.lock = FileLock(str(path) + ".lock", timeout=lock_timeout_s)

    def _read(self) -> bytes:
        return self.path.read_bytes() if self.path.exists() else b""

    def load_into(self, config: Any) -> list[str]:
        """Create the config's timing cache from the file (empty when absent, unreadable or mismatched)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:
            data = self._read()
        lines: list[str] = []
        cache = config.create_timing_cache(data) if data else None
        if data and cache is None:
            lines.append(f"timing cache {self.path} is unreadable; starting an empty one")
        if cache is not None and not config.set_timing_cache(cache, False):
            lines.append(f"timing cache {self.path} does not match this TensorRT/GPU; starting an empty one")
            cache = None
        if cache is None:
            if not config.set_timing_cache(config.create_timing_cache(b""), False):
                raise RuntimeError("TensorRT refused an empty timing cache")
        else:
            lines.append(f"timing cache loaded from {self.path} ({len(data)} bytes)")
        return lines

    def save_from(self, config: Any) -> list[str]:
        """Combine the cache the build filled into the file (re-read under the lock) and write it back."""
        built = config.get_timing_cache()
        if built is None:
            return ["no timing cache to save"]
        with self.lock:
            existing = self._read()
            merged = config.create_timing_cache(existing) if existing else None
            if merged is not None and merged.combine(built, False):
                data = host_bytes(merged.serialize())
            else:
                data = host_bytes(built.serialize())
            atomic_write(self.path, data)
        return [f"timing cache saved to {self.path} ({len(data)} bytes)"]
