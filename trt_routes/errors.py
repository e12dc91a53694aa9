"""The error tree: every user-facing failure is a TrtRoutesError with a message and a hint.

``Exit`` is the one table of exit codes, and each error class names its code (``exit_code``); only
``trt_routes.cli`` turns an error into a process exit (``trt_routes.cli.app``)."""

from __future__ import annotations

import errno
import os
from enum import IntEnum
from typing import ClassVar


class Exit(IntEnum):
    """Every exit code trt-routes returns."""

    OK = 0
    WORK = 1  # plan --check, lock check, status, cache verify: something to do or to fix
    USAGE = 2  # arguments, manifest, lockfile, saved plan or bundle segment that cannot work
    UNAVAILABLE = 3  # a backend's library or hardware is missing on this machine
    FAILED = 4  # trials or rebuilds failed
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT): every finished trial is kept


class TrtRoutesError(Exception):
    """Base of every error trt-routes reports to a user."""

    exit_code: ClassVar[Exit] = Exit.USAGE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(TrtRoutesError):
    """A command was called with arguments that cannot work."""


class ManifestError(TrtRoutesError):
    """tuning.yaml is malformed or inconsistent; carries file:line:col and a snippet."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        snippet: str | None = None,
    ) -> None:
        super().__init__(message, hint)
        self.path = path
        self.line = line
        self.column = column
        self.snippet = snippet

    @property
    def location(self) -> str:
        if self.path is None:
            return ""
        if self.line is None:
            return self.path
        return f"{self.path}:{self.line}:{self.column or 1}"

    def __str__(self) -> str:
        parts = [f"{self.location}: {self.message}" if self.location else self.message]
        if self.snippet:
            parts.append(self.snippet)
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)


class RouteError(TrtRoutesError):
    """A tuning expression or route does not parse or does not fit the catalog."""


class LockfileError(TrtRoutesError):
    """tuning.lock is unreadable, from a newer version, or out of date with the manifest."""


class CacheError(TrtRoutesError):
    """The trial cache cannot be opened or is from a newer trt-routes."""


#: errno values that mean "this storage cannot take the write": full, over quota, read-only, not ours.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


class StorageError(CacheError):
    """The disk under the cache, the engines or the project is full, read-only or not writable by us:
    a fact about this machine, never about a route. Nothing was half-written."""

    def __init__(self, message: str, hint: str | None = None, *, errno_: int | None = None,
                 path: str | None = None) -> None:
        super().__init__(message, hint)
        self.errno = errno_
        self.path = path

    @classmethod
    def from_os_error(cls, exc: OSError, path: object = None) -> StorageError:
        """The clear form of ``exc`` (an OSError whose errno is in STORAGE_ERRNOS), naming the file."""
        where = str(path if path is not None else (exc.filename or "")) or "?"
        code = exc.errno
        if code in (errno.ENOSPC, errno.EDQUOT):
            what, hint = "no space left on the device", ("free space there, or point paths.cache and "
                                                        "paths.engines in tuning.yaml at a larger disk")
        elif code == errno.EROFS:
            what, hint = "the file system is read-only", ("remount it read-write, or point paths.cache and "
                                                          "paths.engines in tuning.yaml at a writable folder")
        else:
            what, hint = "permission denied", (f"give this user ({_user()}) write access to it, or point "
                                               "paths.cache and paths.engines at a folder it owns")
        return cls(f"cannot write {where}: {what} ({os.strerror(code) if code else exc})", hint,
                   errno_=code, path=where)


def _user() -> str:
    try:
        return os.getlogin()
    except OSError:
        return str(os.getuid()) if hasattr(os, "getuid") else "?"


def storage_error(exc: BaseException, path: object = None) -> StorageError | None:
    """``exc`` (or the OSError it was raised from) as a StorageError when it is one, else None."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, StorageError):
            return seen
        if isinstance(seen, OSError) and seen.errno in STORAGE_ERRNOS:
            return StorageError.from_os_error(seen, path)
        seen = seen.__cause__ or seen.__context__
    return None


class BackendUnavailable(TrtRoutesError):
    """A backend's library or hardware is missing on this machine."""

    exit_code = Exit.UNAVAILABLE


class TrialsFailed(TrtRoutesError):
    """Some jobs ended with no eligible route."""

    exit_code = Exit.FAILED
