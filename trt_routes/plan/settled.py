"""Settled plans: a no-op plan re-derives nothing it derived before.

A dynamic search's plan (adaptive, mixed) replays the search over the job group's cached trials and runs the
selection again: on 200 jobs / 50k trials that is most of a no-op plan's time. Yet a job's plan is a function
of what it reads: the job (every field the manifest and the environment gave it), its lock entry, the rows
of its job group (trials, side-by-side re-measurements, the search's recorded state) and trt-routes' own code.
When apply finds a job up to date it stores a fingerprint of those inputs with what the plan derived (the
``settled`` table: how many cached trials it reused, its candidate routes). A later plan whose inputs hash to a
stored fingerprint takes that and checks only the engine file, which every plan checks.

The fingerprint holds:
- the job, whole: model digest, shapes, settings, switch group and catalog (cost hints included), strategy
  and its budgets, tolerance, measurement protocol, baselines, objective, signature;
- its lock entry, whole;
- the warm-start routes an adaptive search would take from related jobs' winners (``related_winners``; used
  only until the group's search state records its own);
- its job group's change counter: ``cache.schema``'s triggers count every insert, update and delete of the
  group's rows, whoever writes them (apply, a bundle import or pull, ``cache gc``, a sqlite3 shell);
- the code: trt-routes' version, the size and modification time of each of its source files, Python's version.

Nothing is stored for a job whose plan read anything else: a loss computed from stored outputs (the
artifact store can be collected), or a corrupt row (its warning is shown again). ``$TRT_ROUTES_SETTLED=off``
turns the shortcut off (every plan derives everything); ``tests/func/test_settled.py`` checks that both ways
give the same plan."""

from __future__ import annotations

__all__ = ["OFF_VAR", "Settled", "code_identity"]

import dataclasses
import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes import __version__, canonical
from trt_routes.search.job import related_winners

if TYPE_CHECKING:
    from trt_routes.cache.store import CacheStore
    from trt_routes.jobs import Job
    from trt_routes.lockfile import LockEntry, Lockfile

OFF_VAR = "TRT_ROUTES_SETTLED"
#: Bumped whenever what a fingerprint covers changes.
SETTLED_VERSION = 2  # 2: the lock entry as pydantic-core serializes it (identity_json)


@functools.cache
def code_identity() -> str:
    """trt-routes' version, each of its source files' path, size and modification time, and Python's version:
    an upgrade or an edited checkout gets other fingerprints (a stat per file, no file read)."""
    package = Path(__file__).resolve().parents[1]
    files = []
    for path in sorted(package.rglob("*.py")):
        try:
            st = path.stat()
        except OSError:
            continue
        files.append([path.relative_to(package).as_posix(), st.st_size, st.st_mtime_ns])
    return canonical.digest({"version": __version__, "python": sys.version, "files": files}, 32)


class _Unknown(TypeError):
    """A job field this module cannot fingerprint: that job is never settled."""


class Settled:
    """The settled plans of one plan's jobs: their fingerprints (computed once) and the stored verdicts."""

    def __init__(self, cache: CacheStore, jobs: Iterable[Job], lock: Lockfile, root: Path,
                 winners: Callable[[], Mapping[str, str]] | None = None) -> None:
        """``root``: the project's folder (paths inside it count relative to it: a project moved or checked out
        elsewhere keeps its settled plans). ``winners``: every job's current winner, read once
        (``plan.diff.make_plan``)."""
        self.root = root
        self._shared: dict[int, Any] = {}  # objects jobs share (a catalog): identified once
        live = [j for j in jobs if not j.blocked and j.name in lock.jobs]
        versions = cache.group_versions(j.group_key for j in live)
        self.prints: dict[str, str] = {}
        for job in live:
            warm = related_winners(cache, job, winners=winners() if winners is not None else None) \
                if job.strategy.mode == "adaptive" and job.strategy.warm_start else ()
            fp = self._fingerprint(job, lock.jobs[job.name], versions.get(job.group_key, 0), warm)
            if fp is not None:
                self.prints[job.name] = fp
        self.rows = cache.settled(self.prints.values()) if self.prints else {}

    @classmethod
    def enabled(cls) -> bool:
        return os.environ.get(OFF_VAR, "").lower() != "off"

    def verdict(self, job: Job) -> dict[str, Any] | None:
        """What an earlier full plan derived for ``job`` from these very inputs: ``reused``, ``candidates``."""
        fp = self.prints.get(job.name)
        row = self.rows.get(fp) if fp is not None else None
        if row is None or not isinstance(row.get("reused"), int) or not isinstance(row.get("candidates"), list):
            return None
        return row

    def fingerprint(self, job: Job) -> str | None:
        return self.prints.get(job.name)

    def _fingerprint(self, job: Job, entry: LockEntry, version: int, warm: tuple[str, ...]) -> str | None:
        try:
            ident = {"v": SETTLED_VERSION, "code": code_identity(), "group": [job.group_key, version],
                     "warm": list(warm), "job": self._identify(job, top=True),
                     "entry": entry.identity_json()}  # as tuning.lock holds it (read from it)
            return _digest(ident)
        except (_Unknown, TypeError, ValueError):
            return None

    def _identify(self, value: Any, top: bool = False) -> Any:
        """``value`` as JSON data (not canonical: a fingerprint is only ever compared with one computed by the
        same code, and Python's JSON of equal data is the same text)."""
        if value is None or isinstance(value, str | int | float | bool):
            return value
        if isinstance(value, Path):
            return value.relative_to(self.root).as_posix() if value.is_relative_to(self.root) else value.as_posix()
        if isinstance(value, dict):
            return {str(k): self._identify(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._identify(v) for v in value]
        if isinstance(value, set | frozenset):
            return sorted(json.dumps(self._identify(v), sort_keys=True) for v in value)
        if hasattr(value, "model_dump"):
            return value.model_dump(mode="json")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            key = id(value)
            if not top and key in self._shared:
                return self._shared[key]
            out = {"type": type(value).__name__,
                   **{f.name: self._identify(getattr(value, f.name)) for f in dataclasses.fields(value)}}
            if top:
                return out
            self._shared[key] = _digest(out)  # a catalog: serialized once, not once per job
            return self._shared[key]
        raise _Unknown(type(value).__name__)


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:40]
