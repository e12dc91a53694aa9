"""``lock show``: one job's lock entry, and the trtexec command line that rebuilds its locked engine.

Reads the manifest only for its paths (no model digests, no backend, no environment detection)."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt_routes.errors import UsageError
from trt_routes.lockfile import LockEntry, Lockfile, finite
from trt_routes.manifest.load import load_manifest

TRTEXEC_BACKEND = "tensorrt"


@dataclass(frozen=True)
class LockedJob:
    name: str
    record: LockEntry
    root: Path  # the manifest's folder: lock paths are relative to it
    lock_path: Path

    @property
    def entry(self) -> dict[str, Any]:
        """The entry as plain data, as it stands in tuning.lock (for printing it; a number that is not
        finite is None, as the lock writes it)."""
        return finite(self.record.to_data())  # type: ignore[no-any-return]


def locked_job(manifest: Path, name: str) -> LockedJob:
    """The lock entry of job ``name``; a clear error naming close matches when there is none."""
    loaded = load_manifest(manifest)
    lock_path = loaded.resolve(loaded.manifest.paths.lockfile)
    if not lock_path.exists():
        raise UsageError(f"no lockfile at {lock_path}", "run `trt-routes apply` to tune and write it")
    lock = Lockfile.read(lock_path, loaded.path.name)
    entry = lock.jobs.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, list(lock.jobs), n=3)
        raise UsageError(f"no job '{name}' in {lock_path.name}",
                         f"did you mean {', '.join(repr(c) for c in close)}?" if close else
                         f"locked jobs: {', '.join(sorted(lock.jobs)) or 'none'}")
    return LockedJob(name, entry, loaded.path.parent, lock_path)


def _from_cwd(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)


def trtexec_for(locked: LockedJob) -> str:
    """The ``trtexec`` command that rebuilds the locked engine (paths relative to the current folder).

    Only TensorRT engines come from trtexec; for any other backend this says so as a UsageError."""
    from trt_routes.interop import trtexec_command

    entry = locked.record
    backend = entry.backend if "backend" in entry else "?"
    if backend != TRTEXEC_BACKEND:
        raise UsageError(
            f"trtexec does not apply to {locked.name}: it is built by the {backend} backend, and trtexec "
            "builds TensorRT engines only",
            f"`trt-routes lock show {locked.name}` prints its locked route; "
            f"`trt-routes apply --frozen --only '{locked.name}'` rebuilds it",
        )
    model_path = entry.model.path if entry.model else None
    if entry.route is None or not model_path:
        raise UsageError(f"the lock entry of {locked.name} has no route or model path",
                         "re-run `trt-routes apply` to regenerate it")
    engine = entry.engine.path if entry.engine else None
    return trtexec_command(
        _from_cwd(locked.root / model_path), entry.route, entry.profile or {},
        entry.settings or {}, engine_path=_from_cwd(locked.root / engine) if engine else None)


def serving_for(locked: LockedJob) -> dict[str, Any]:
    """What a serving process must set to run the locked engine as it was measured (``Backend.serving``):
    ``{"backend", "engine", "settings"}``; ``settings`` null where the engine carries everything, with a
    ``note`` saying where to look instead (TensorRT: ``--trtexec``) or why it cannot be said here."""
    from trt_routes.backends import registry
    from trt_routes.errors import RouteError, TrtRoutesError
    from trt_routes.routes import route_dict

    entry = locked.record
    backend = entry.backend or "?"
    engine = _from_cwd(locked.root / entry.engine.path) if entry.engine and entry.engine.path else None
    out: dict[str, Any] = {"backend": backend, "engine": engine, "settings": None}
    if entry.route is None or engine is None:
        return {**out, "note": "the entry has no route or engine: run `trt-routes apply`"}
    try:
        impl = registry.get(backend)
        if (why := impl.unavailable_reason()) is not None:
            return {**out, "note": f"the {backend} backend is unavailable here ({why}): run this where it is"}
        settings = impl.serving(route_dict(entry.route), entry.settings or {}, engine)
    except RouteError as exc:
        raise UsageError(f"the locked route of {locked.name} is not a {backend} route: {exc.message}",
                         "restore tuning.lock from git, or run `trt-routes apply` to rewrite the entry") from None
    except TrtRoutesError as exc:
        return {**out, "note": f"the {backend} backend cannot say here: {exc.message}"}
    if settings is None:
        note = (f"the engine carries the route: `trt-routes lock show {locked.name} --trtexec` rebuilds it"
                if backend == TRTEXEC_BACKEND else "the engine carries the route: nothing to set")
        return {**out, "note": note}
    return {**out, "settings": settings}

