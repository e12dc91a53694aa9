"""One worker process: started with its environment and cores, a pipe to it; and the early worker that
`trt-routes apply` starts before its own imports.

Only the standard library is imported here (the result records are imported when the first result is
read, the worker's code only in the child), so that the CLI can start the worker first and the two
interpreters' imports overlap: the coordinator's ~0.25 s of imports and the worker's own."""

from __future__ import annotations

__all__ = ["WORKER_ENV_DEFAULTS", "Worker", "child_main", "early_worker", "preload_early", "start_early",
           "stop_early", "take_early", "warm_early"]

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from multiprocessing.connection import Connection, Pipe
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trt_routes.execute.tasks import TaskResult
    from trt_routes.jobs import Job

#: Set in every worker unless the user's environment sets it. A worker's own numpy work (inputs, losses)
#: is small, and OpenBLAS's idle pool threads spin for a while after each call: without this, the loss
#: computation on a large output left a thread burning a core through the timed runs that follow.
WORKER_ENV_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1"}

#: Spawning takes the environment and CPU affinity from the spawning thread: one spawn at a time.
_SPAWN_LOCK = threading.Lock()


#: What a worker's interpreter runs (with ``-P``: nothing in the folder it starts in can shadow these imports):
#: the pipe's end on file descriptor argv[1]; the coordinator's ``sys.path``, its first message; then
#: ``child_main`` for the coordinator's pid, argv[2].
_CHILD = ("import sys; from multiprocessing.connection import Connection; conn = Connection(int(sys.argv[1])); "
          "sys.path[:] = conn.recv(); from trt_routes.execute.spawn import child_main; "
          "child_main(conn, int(sys.argv[2]))")


def child_main(conn: Connection, parent: int) -> None:
    """A worker process's entry: serve the tasks arriving on ``conn`` for the coordinator ``parent``
    (``execute.worker.serve``, the worker's code, imported here only)."""
    from trt_routes.execute import worker

    worker.serve(conn, parent=parent)


def _search_path() -> list[str]:
    """The coordinator's ``sys.path`` as strings (an entry may be a ``Path``; anything else is no folder)."""
    return [os.fspath(p) for p in sys.path if isinstance(p, (str, os.PathLike))]


def _interpreter_flags() -> list[str]:
    """The coordinator's interpreter options (-B, -X, -W, ...), as multiprocessing passes them to its children."""
    flags = getattr(subprocess, "_args_from_interpreter_flags", None)
    return list(flags()) if callable(flags) else []


@contextlib.contextmanager
def _spawn_context(env: Mapping[str, str], cpus: frozenset[int] | None) -> Iterator[None]:
    """``env`` set (and this thread pinned to ``cpus``) while a child is spawned, then restored.

    The child's environment is fixed at exec, before it imports numpy or any CUDA library, which is
    what CUDA_VISIBLE_DEVICES and the thread-count variables need; affinity is inherited at fork."""
    with _SPAWN_LOCK:
        saved = {k: os.environ.get(k) for k in env}
        saved_cpus = os.sched_getaffinity(0) if cpus and hasattr(os, "sched_setaffinity") else None
        os.environ.update(env)
        if saved_cpus is not None:
            os.sched_setaffinity(0, cpus)  # type: ignore[arg-type]
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if saved_cpus is not None:
                os.sched_setaffinity(0, saved_cpus)


def _signal_name(code: int | None) -> str:
    if code is None:
        return "unknown"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class Worker:
    """One isolated worker process, started with ``env`` added to its environment and, given ``cpus``, bound to
    those CPU cores; a pipe to it (``multiprocessing.connection``: pickled tasks and results).

    A fresh interpreter (nothing leaks from the coordinator), started with ``subprocess`` rather than
    multiprocessing's spawn, which also started a resource-tracker process (another interpreter, ~20 ms of CPU
    beside the coordinator's and the worker's start-up: the tracker serves named semaphores and shared memory,
    which workers never use) and ran the coordinator's main script again in the child (the whole CLI, for the
    console script). The child gets the coordinator's ``sys.path``, interpreter options and working folder."""

    def __init__(self, env: Mapping[str, str] | None = None, cpus: frozenset[int] | None = None) -> None:
        env = {**{k: v for k, v in WORKER_ENV_DEFAULTS.items() if k not in os.environ}, **(env or {})}
        self.conn, child = Pipe()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_error = ""  # the worker could not be started (the machine's failure, not a task's)
        self._stopping = False
        #: seconds of a hinted reference run (``warm_early``) that the first task may wait behind: added to that
        #: task's time limit, and a timeout or death within it is the machine's, not the task's
        self.grace_s = 0.0
        try:
            with _spawn_context(env, cpus):
                self.proc = subprocess.Popen(
                    [sys.executable, *_interpreter_flags(), "-P", "-c", _CHILD, str(child.fileno()), str(os.getpid())],
                    pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.start_error = f"{type(exc).__name__}: {exc}"
        child.close()
        if not self.start_error:
            self.send_bytes(ForkingPickler.dumps(_search_path()))  # a worker gone already: receive says how

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _wait(self, timeout: float) -> None:
        assert self.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)

    def _running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def alive(self) -> bool:
        """False once the process has exited (a worker that never started counts as alive: ``receive``
        reports why it could not start)."""
        return bool(self.start_error) or self._running()

    def send_bytes(self, data: bytes | memoryview) -> bool:
        """Put a pickled task in the worker's pipe (it runs after those already there); False if the worker
        is gone (``receive`` then says how it died)."""
        try:
            self.conn.send_bytes(data)
        except (BrokenPipeError, OSError):
            return False
        return True

    def receive(self, timeout: float) -> tuple[TaskResult, bool]:
        """The result of the oldest task in the pipe, within ``timeout``; (result, worker_still_healthy)."""
        from trt_routes.execute.tasks import TaskResult, healthy

        if self.start_error:
            return TaskResult(status="crashed", error=f"infrastructure: could not start a worker process: "
                              f"{self.start_error}", infrastructure=True), False
        grace, self.grace_s = self.grace_s, 0.0
        behind = " (it may have been running a reference run hinted ahead of this task)" if grace else ""
        if not self.conn.poll(timeout + grace):
            self.kill()
            return TaskResult(status="timeout", error=f"no result within the {timeout:g} s time limit{behind}",
                              infrastructure=bool(grace)), False
        try:
            result: TaskResult = self.conn.recv()
        except (EOFError, OSError):
            self._wait(5)
            assert self.proc is not None
            return TaskResult(status="crashed", error=f"worker died with {_signal_name(self.proc.returncode)}"
                              f"{behind}", infrastructure=bool(grace)), False
        return result, healthy(result)

    def kill(self) -> None:
        if self.start_error or self.proc is None:
            self.conn.close()
            return
        if self._running():
            with contextlib.suppress(OSError):
                self.proc.kill()
        self._wait(5)
        self.conn.close()

    def stop(self) -> None:
        """Ask the worker to exit after what is in its pipe (once); ``close`` then only waits for it."""
        if not self._stopping and not self.start_error:
            self._stopping = True
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(None)

    def close(self) -> None:
        if self.start_error or self.proc is None:
            self.conn.close()
            return
        self.stop()
        self._wait(2)
        if self._running():
            with contextlib.suppress(OSError):
                self.proc.kill()
            self._wait(2)
        self.conn.close()


#: The worker ``early_worker`` started, with the environment variables it was started under (at most one).
_EARLY: list[tuple[dict[str, str], Worker]] = []


def start_early() -> None:
    """Start the default local worker now, unless one is waiting already (``early_worker``)."""
    if not _EARLY:
        _EARLY.append((dict(os.environ), Worker()))


def stop_early() -> None:
    """Stop the early worker if nobody took it (never given a task: nothing of it to keep)."""
    while _EARLY:
        _EARLY.pop()[1].kill()


@contextlib.contextmanager
def early_worker(enabled: bool = True) -> Iterator[None]:
    """Start the default local worker now, before the caller imports the rest of trt-routes and loads the
    project: its interpreter and imports (~0.17 s) overlap the coordinator's own, and it is ready when
    the first task comes. The first LocalExecutor that would start an identical worker (no extra
    environment, no pinned cores, the same environment variables) takes it; one nobody took is stopped on
    exit (a no-op apply: a few milliseconds here, its start-up on another core).

    A worker already waiting (the console script starts one before the CLI's imports: ``cli.launch``) is
    adopted; ``enabled=False`` stops it at once (the parsed flags refuted the launcher's guess)."""
    if not enabled:
        stop_early()
        yield
        return
    start_early()
    try:
        yield
    finally:
        stop_early()


def preload_early(hint: object) -> None:
    """Give the early worker, if one waits, ``hint`` (a ``tasks.Preload``: the backends to import before its
    first task comes). It is a hint: a worker that is gone, or a full pipe, drops it."""
    if _EARLY:
        _EARLY[-1][1].send_bytes(ForkingPickler.dumps(hint))


def warm_early(jobs: list[Job], store_root: str, stored_references: set[str] | None) -> None:
    """Hint the early worker, if one waits, to import the backends of ``jobs``' CPU targets (the only ones it
    serves) and to run the first of those jobs' reference run, when it is neither among ``stored_references``
    (the cache's) nor the manifest's own files, into the blob store at ``store_root``, while the coordinator
    imports the rest of apply and plans: that reference run, the first task, is then
    answered at once (~25 ms: the worker's first ONNX Runtime session). ``stored_references`` None (the cache
    could not be read): no reference run is hinted. The first task may wait behind the hinted run: its time
    limit grows by the hinted job's, and a timeout or crash within it is not cached against it
    (``Worker.grace_s``)."""
    if not _EARLY:
        return
    from trt_routes.execute.tasks import Preload, reference_task, warmups

    served = [j for j in jobs if not j.blocked and j.target_data.get("kind") == "cpu"]
    found = warmups(served)
    if not found:
        return
    # only the first job's: when it has its reference, its first trial comes first, and would wait behind the run
    first = served[0] if stored_references is not None and served[0].reference_key not in stored_references \
        and served[0].reference_shas is None else None
    worker = _EARLY[-1][1]
    if first is not None:
        worker.grace_s = float(first.measurement.timeout_s)
    preload_early(Preload(tuple(found), reference_task(first, store_root) if first is not None else None))


def take_early(env: Mapping[str, str], cpus: frozenset[int] | None) -> Worker | None:
    """The early worker, if it was started for exactly this configuration and is alive; else None (and
    an early worker started for another configuration is stopped)."""
    if not _EARLY:
        return None
    environ, worker = _EARLY.pop()
    if env or cpus is not None or environ != dict(os.environ) or not worker.alive() or worker.start_error:
        worker.kill()  # started for another configuration, and never given a task
        return None
    return worker
