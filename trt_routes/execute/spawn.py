"""One worker process: started with its environment and cores, a pipe to it.

Only the standard library is imported here (the result records are imported when the first result is
read, the worker's code only in the child)."""

from __future__ import annotations

__all__ = ["WORKER_ENV_DEFAULTS", "Worker", "child_main"]

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from multiprocessing.connection import Connection, Pipe
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import TYPE_CHECKING

from trt_routes.evidence import TrialStatus

if TYPE_CHECKING:
    from trt_routes.execute.tasks import TaskResult

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


#: Signals a route does not send itself: a worker that dies of one was killed from outside.
OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT})


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

    def _stopped(self) -> bool:
        """Whether the worker process is stopped (state T in /proc: SIGSTOP or a debugger), where Linux tells."""
        if self.proc is None:
            return False
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return False
        return bool(fields) and fields[0] in ("T", "t")

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
            return TaskResult(status=TrialStatus.CRASHED, error=f"infrastructure: could not start a worker process: "
                              f"{self.start_error}", infrastructure=True), False
        if not self.conn.poll(timeout):
            stopped = self._stopped()
            self.kill()
            if stopped:  # SIGSTOP from outside: the machine's doing, never the route's time
                return TaskResult(status=TrialStatus.TIMEOUT,
                                  error=f"infrastructure: the worker was stopped from outside (SIGSTOP)"
                                  f" and gave no result within {timeout:g} s", infrastructure=True), False
            return TaskResult(status=TrialStatus.TIMEOUT, error=f"no result within the {timeout:g} s time limit"), False
        try:
            result: TaskResult = self.conn.recv()
        except (EOFError, OSError):
            self._wait(5)
            assert self.proc is not None
            code = self.proc.returncode
            if code is not None and -code in OUTSIDE_SIGNALS:  # killed, not crashed: not a fact about the route
                return TaskResult(status=TrialStatus.CRASHED,
                                  error=f"infrastructure: the worker was killed from outside "
                                  f"({_signal_name(code)}: another process, or the kernel's out-of-memory killer)",
                                  infrastructure=True), False
            return TaskResult(status=TrialStatus.CRASHED, error=f"worker died with {_signal_name(code)}"), False
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
