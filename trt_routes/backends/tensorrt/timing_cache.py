"""TensorRT timing caches on disk: one file per (TensorRT build, GPU, build settings, route), file-locked.

Why per route: a timing cache keys its entries by layer and tactic, not by build route, while routes change
how layers are implemented; one cache shared by every route lets timings measured under one route pick the
tactics of another, so the comparison the tuner makes is blurred (trtexec avoids it by starting every
tuning iteration from a fresh cache: each runs in its own process without --timingCacheFile). A file per
route keeps routes apart and still lets every rebuild of a route (other shapes or models with the same
settings, `apply --frozen`) reuse its timings, so the rebuilt engine picks the tactics the measured one
picked. The setting ``timing_cache: fresh`` gives trtexec's behaviour instead (no file at all).

Loaded before each build and combined back after it, so parallel workers only ever add entries."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from trt_routes import canonical


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


def timing_cache_path(
    directory: Path, trt_build: str, gpu: str, settings: Mapping[str, Any], route: str
) -> Path:
    """Where the cache of one (TensorRT build, GPU, build settings, route) lives inside ``directory``.

    ``trt_build`` names the TensorRT version and distribution, ``settings`` are the checked settings that
    reach the builder, ``route`` is the canonical route text ("" for the default route)."""
    key = canonical.digest({"settings": dict(settings), "route": route}, 16)
    return directory / f"tensorrt-{_slug(trt_build)}-{_slug(gpu)}-{key}.timing-cache"


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
