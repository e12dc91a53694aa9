"""Whether an ``apply`` will most likely find nothing to do: the hint that decides if it starts a worker early.

``trt-routes apply`` starts its default worker before its own imports (``spawn.early_worker``), so that the
worker's interpreter and imports overlap the coordinator's. When every job is up to date that worker is never
given a task, and on a two-core machine its start-up (an interpreter, then ONNX Runtime and numpy, imported on
the preload hint) takes the core the coordinator's own start-up could use: ~0.1 s of a ~0.5 s no-op apply.

After an apply that ended with every job done (exit 0), ``remember`` keeps, in the memo (``trt_routes.memo``),
the size and modification time of the files that apply's next plan reads first: the manifest, tuning.lock,
the trial cache (its write-ahead log included) and each job's model file (a model exported again). The next
apply of the same manifest with the same flags that finds every one of them unchanged is ``predicted`` to be a
no-op and starts no early worker. The console script (``cli.launch``) keeps and reads hints under the command
line as given, the folder and the flag-like environment variables (``command_key``), before anything is parsed;
an apply started otherwise (``trt_routes.cli.app.main``, a test's runner) under the parsed manifest and flags
(``key``).

Only the early start depends on it: a wrong guess (new weights in an external-data file alone, an engine file
deleted, an environment variable changed) costs that apply a worker started when its first task comes (its
start-up then counts in that task's time limit, as for any worker started on demand), never a result. Stat
calls and one memo read: the standard library and ``trt_routes.memo`` only, imported before the worker would
start."""

from __future__ import annotations

__all__ = ["KIND", "LAUNCHED", "command_key", "key", "predicted", "project_files", "remember"]

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes import memo

if TYPE_CHECKING:
    from trt_routes.project import Project

#: The memo's kind for these hints.
KIND = "quiet-apply"


def key(manifest: Path | str, flags: Mapping[str, Any]) -> dict[str, Any]:
    """What a hint is kept under: the manifest's absolute path and the apply flags that change its plan."""
    return {"manifest": os.path.abspath(manifest), "flags": dict(flags)}  # the memo compares keys as data


#: Environment variables that stand for ``apply``'s flags (``--manifest``, ``--workers``, ``--executor``).
ENV_FLAGS = ("TRT_ROUTES_MANIFEST", "TRT_ROUTES_WORKERS", "TRT_ROUTES_EXECUTOR")


def command_key(argv: list[str]) -> dict[str, Any]:
    """What the console script's launcher (``cli.launch``) keeps a hint under, before anything is parsed: the
    command line as given, the folder it runs in and the environment variables that act as its flags. The same
    command in the same folder is the same manifest with the same flags."""
    return {"cwd": os.getcwd(), "argv": list(argv), "env": {k: os.environ.get(k) for k in ENV_FLAGS}}


#: The launcher's guess for this process: ``{"key": command_key(...), "predicted": bool}``, which ``apply`` then
#: uses (and remembers under) instead of its own; empty when the CLI was not started by the console script.
LAUNCHED: dict[str, Any] = {}


def _stats(paths: Iterable[str]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append([path, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([path, None, None])
    return out


def predicted(hint_key: Mapping[str, Any]) -> bool:
    """True when the files the last finished apply under ``hint_key`` left behind are all as it left them."""
    seen = memo.lookup(KIND, hint_key)
    if not isinstance(seen, list) or not seen or not all(isinstance(s, list) and len(s) == 3 for s in seen):
        return False
    return _stats(str(s[0]) for s in seen) == seen


def project_files(project: Project) -> list[Path]:
    """The files a hint watches for ``project``: its manifest, tuning.lock, the trial cache and its write-ahead
    log, each job's model file."""
    cache = project.cache_path
    return [project.loaded.path, project.lock_path, cache, cache.with_name(cache.name + "-wal"),
            *sorted({job.model_path for job in project.jobs})]


def remember(hint_key: Mapping[str, Any], files: Iterable[Path]) -> None:
    """Keep the state of ``files`` (as they are now, after every write of this apply) under ``hint_key``."""
    paths = [os.path.abspath(f) for f in files]
    memo.remember(KIND, hint_key, _stats(paths))
    memo.save()
