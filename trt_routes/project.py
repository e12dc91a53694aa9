"""A project: the loaded manifest, its resolved paths, the environment and its jobs; and the project
lock that keeps two applies (or an apply and a cache merge) from interleaving."""

from __future__ import annotations

__all__ = ["LossLookupFromBlobs", "Project", "exclusive", "open_project"]

import fnmatch
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.errors import CacheError, UsageError
from trt_routes.files.artifacts import BlobStore
from trt_routes.jobs import Job, resolve_jobs
from trt_routes.lockfile import Lockfile
from trt_routes.manifest.load import LoadedManifest, load_manifest
from trt_routes.manifest.schema import Check
from trt_routes.signature import Environment, detect

if TYPE_CHECKING:
    from filelock import FileLock


@dataclass
class Project:
    loaded: LoadedManifest
    env: Environment = field(default_factory=detect)
    #: (concurrent CPU trials per machine, cores each): see ``Environment.cpu_shared``.
    cpu_share: tuple[int, int | None] = (1, None)

    @property
    def root(self) -> Path:
        return self.loaded.path.parent

    @property
    def cache_path(self) -> Path:
        return self.loaded.resolve(self.loaded.manifest.paths.cache)

    @property
    def profiles_dir(self) -> Path:
        """Layer profiles of trials, ``<id>.json`` beside the cache (``trt_routes.audit.layers``)."""
        return self.cache_path.parent / "profiles"

    @property
    def store(self) -> BlobStore:
        return BlobStore(self.loaded.resolve(self.loaded.manifest.paths.engines))

    @property
    def lock_path(self) -> Path:
        return self.loaded.resolve(self.loaded.manifest.paths.lockfile)

    @property
    def out_dir(self) -> Path:
        return self.loaded.resolve(self.loaded.manifest.paths.out)

    @property
    def job_env(self) -> Environment:
        """The environment jobs are resolved with: ``env`` with the CPU shared as trials will share it."""
        return self.env.cpu_shared(*self.cpu_share)

    @cached_property
    def jobs(self) -> list[Job]:
        return resolve_jobs(self.loaded, self.job_env)

    def use_environment(self, env: Environment | None = None,
                        cpu_share: tuple[int, int | None] | None = None) -> None:
        """Resolve jobs for another environment (a cluster's) or CPU split; forgets jobs resolved before (always:
        a project kept between calls, as ``trt_routes.api`` keeps it, then reads its models' digests anew)."""
        if env is not None:
            self.env = env
        if cpu_share is not None:
            self.cpu_share = cpu_share
        self.__dict__.pop("jobs", None)

    def select_jobs(self, patterns: list[str] | None) -> list[Job]:
        if not patterns:
            return self.jobs
        return [j for j in self.jobs if any(fnmatch.fnmatchcase(j.name, p) for p in patterns)]

    def read_lock(self, remember: bool = False) -> Lockfile:
        """tuning.lock, through a memo of parsed copies beside the cache (``caches/lock-memo``); ``remember``
        (apply): the memo keeps this read's parse and every write's (plan and dry runs write nothing)."""
        return Lockfile.read(self.lock_path, self.loaded.path.name, memo=self.cache_path.parent / "lock-memo",
                             remember=remember)

    def read_cache(self) -> CacheStore:
        """The trial cache to read without writing anything: the project's when it exists, else an empty
        one in memory (no file is created)."""
        if self.cache_path.exists():
            return self.open_cache(create=False)
        return CacheStore(Path(":memory:"))

    def open_cache(self, create: bool = True) -> CacheStore:
        try:
            return CacheStore(self.cache_path, create=create)
        except CacheError as exc:  # name the tuning.yaml line that chose a cache file of its own
            if ("paths", "cache") not in self.loaded.positions:
                raise
            line, column = self.loaded.positions[("paths", "cache")]
            raise type(exc)(f"{exc.message} (chosen by {self.loaded.path.name}:{line}:{column}, paths.cache)",
                            exc.hint) from exc

    def engine_path(self, job: Job, suffix: str) -> Path:
        return self.out_dir / job.model / job.shape / f"{job.target}{suffix}"

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()


def open_project(manifest: Path | str, env: Environment | None = None) -> Project:
    loaded = load_manifest(manifest)
    execution = loaded.manifest.execution
    share = (execution.workers or 1, None) if execution.executor == "local" else (1, None)
    return Project(loaded, env or detect(), cpu_share=share)


APPLY_RUNNING = "another `trt-routes apply` is running on {cache}"
APPLY_RUNNING_HINT = "wait for it to finish (or remove a stale .lock file if none is running)"


def project_lock(project: Project) -> FileLock:
    """The one lock of a project (beside its cache): whoever writes the cache, the engines or tuning.lock
    holds it (apply, apply --frozen, cache import/pull/gc)."""
    from filelock import FileLock  # imported by the commands that write (~10 ms a `plan` does without)

    check_writable(project)
    project.cache_path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(project.cache_path) + ".lock")


def check_writable(project: Project) -> None:
    """Before anything is written: each folder ``paths`` names (the cache's, the engines', the lockfile's, the
    output's) exists and is writable, or can be made; else a ManifestError at that ``paths`` entry (a path under
    /proc or a read-only mount failed half-way through apply with a traceback)."""
    import os
    import tempfile

    engines = project.loaded.resolve(project.loaded.manifest.paths.engines)
    folders = {"cache": project.cache_path.parent, "engines": engines, "lockfile": project.lock_path.parent,
               "out": project.out_dir}
    for name, folder in folders.items():
        ancestor = folder
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        why = None
        if not ancestor.is_dir():
            why = f"{ancestor} is not a folder"
        elif ancestor == folder and not os.access(folder, os.W_OK | os.X_OK):
            read_only = hasattr(os, "statvfs") and os.statvfs(folder).f_flag & os.ST_RDONLY
            why = f"{folder} is on a read-only file system" if read_only else f"{folder} is not writable"
        elif ancestor != folder:
            try:  # what mkdir would meet (procfs, a read-only mount, permissions), undone at once
                os.rmdir(tempfile.mkdtemp(prefix=".trt-routes-probe-", dir=ancestor))
            except OSError as exc:
                why = f"{folder} cannot be created under {ancestor} ({exc.strerror or exc})"
        if why is not None:
            raise project.loaded.error(("paths", name), f"paths.{name}: {why}",
                                       "point it at a folder this user can write (relative paths are taken from "
                                       "the manifest's folder)")


@contextmanager
def exclusive(project: Project, busy: str = APPLY_RUNNING, hint: str = APPLY_RUNNING_HINT) -> Iterator[None]:
    """Hold the project lock, or fail at once with a UsageError (``busy`` may name ``{cache}``)."""
    from filelock import Timeout

    lock = project_lock(project)
    try:
        lock.acquire(timeout=0)
    except Timeout as exc:
        raise UsageError(busy.format(cache=project.cache_path), hint) from exc
    try:
        yield
    finally:
        lock.release()


class LossLookupFromBlobs:
    """Computes a loss a trial did not store (l0 at new atol/rtol) from its stored outputs."""

    def __init__(self, cache: CacheStore, store: BlobStore) -> None:
        self.cache = cache
        self.store = store
        self._memo: dict[tuple[str, str, str], float | None] = {}

    def __call__(self, trial: TrialRecord, output: str, check: Check) -> float | None:
        key = (trial.id, output, check.key)
        if key not in self._memo:
            self._memo[key] = self._compute(trial, output, check)
        return self._memo[key]

    def _compute(self, trial: TrialRecord, output: str, check: Check) -> float | None:
        ref = self.cache.reference(trial.reference_key)
        if ref is None or not self.store.has(trial.outputs_sha256) or not self.store.has(ref[1]):
            return None
        outs = self.store.get_arrays(trial.outputs_sha256)
        refs = self.store.get_arrays(ref[1])
        if output not in outs or output not in refs:
            return None
        atol, rtol = check.l0_params
        from trt_routes.evidence import measure  # numpy: not imported by commands that compute no loss

        return measure.loss(check.metric, outs[output], refs[output], atol=atol, rtol=rtol)
