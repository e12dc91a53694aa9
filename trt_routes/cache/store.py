"""SQLite store of trials, through the standard library's ``sqlite3`` (migrations, reads, writes, bulk inserts).
Only the coordinating process opens it.

Each trial is written in its own transaction as soon as it finishes, so a killed run keeps every
finished trial. A corrupt row is reported and skipped (it reads as a miss), never fatal.

A damaged file (a corrupt page) is a CacheError naming it with the way out, `trt-routes cache recover`,
wherever SQLite notices: opening (a quick check of every page for caches up to QUICK_CHECK_MAX_BYTES),
any query of this class, and anything a caller does with ``db`` inside ``with CacheStore(...)``. A full
or read-only disk is a StorageError naming the file; the transaction it interrupted is rolled back."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import socket
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from trt_routes import __version__
from trt_routes.cache.schema import SCHEMA_VERSION, migrate
from trt_routes.errors import CacheError, StorageError
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.meta import TrialMeta

LIGHT_COLUMNS = ", ".join(
    ["id", "group_key", "job", "route", "signature", "model_digest", "shape_key", "settings_key",
     "protocol_key", "reference_key", "backend", "status", "median_ms", "ci_low", "ci_high", "losses",
     "error", "engine_sha256", "outputs_sha256", "created_at", "build_s"])
STATUSES = tuple(TrialStatus)
_STATUS = {s.value: s for s in TrialStatus}  # a dict lookup: Enum(value) costs 20x more per row


#: Caches up to this size get PRAGMA quick_check when opened (a few ms per MB); larger ones are checked
#: as SQLite reads them (every query) and by `cache verify`.
QUICK_CHECK_MAX_BYTES = 64 << 20
RECOVER_HINT = ("run `trt-routes cache recover`: it salvages every readable row into a new file and keeps "
                "the damaged one beside it (or move the file away: trt-routes re-measures what it needs)")
_FULL = ("database or disk is full", "disk i/o error")
_READ_ONLY = ("readonly database", "read-only", "unable to open database file")


def database_error(exc: sqlite3.Error, path: Path, *, opening: bool = False) -> CacheError:
    """The clear form of an SQLite error on the cache at ``path`` (met while opening it, or later)."""
    text = str(exc).lower()
    if any(k in text for k in _FULL):
        return StorageError.from_os_error(OSError(errno.ENOSPC, str(exc)), path)
    if any(k in text for k in _READ_ONLY):
        return StorageError.from_os_error(OSError(errno.EROFS if _read_only_fs(path) else errno.EACCES,
                                                  str(exc)), path)
    if "locked" in text or "busy" in text:
        return CacheError(f"{path}: the trial cache is busy ({exc})",
                          "another trt-routes (or a sqlite3 shell) holds it: wait for it, then run again")
    doing = "cannot open the trial cache: it is damaged" if opening else "the trial cache is damaged"
    return CacheError(f"{path}: {doing} ({exc})", RECOVER_HINT)


def _read_only_fs(path: Path) -> bool:
    import os

    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


_F = TypeVar("_F", bound=Callable[..., Any])


def _guarded(method: _F) -> _F:
    """SQLite's errors in a CacheStore method become database_error's CacheError (a transaction it
    interrupted is rolled back by ``with conn``)."""
    @functools.wraps(method)
    def call(self: CacheStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            if not _is_fault(exc):
                raise
            raise database_error(exc, self.path) from exc
    return call  # type: ignore[return-value]


def _is_fault(exc: BaseException) -> bool:
    """An SQLite error that is the file's or the disk's fault (integrity and programming errors are bugs)."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(
        exc, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class TrialRecord:
    """One immutable measured fact: a route built and measured for one job under one signature."""

    id: str
    group_key: str
    job: str
    route: str
    signature: str
    model_digest: str
    shape_key: str
    settings_key: str
    protocol_key: str
    reference_key: str
    backend: str
    status: TrialStatus
    median_ms: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    mean_ms: float | None = None
    stdev_ms: float | None = None
    samples: list[float] = field(default_factory=list)
    losses: dict[str, dict[str, float]] = field(default_factory=dict)
    error: str = ""
    log: str = ""
    build_s: float | None = None
    measure_s: float | None = None
    engine_sha256: str = ""
    outputs_sha256: str = ""
    meta: TrialMeta = field(default_factory=TrialMeta)
    created_at: str = field(default_factory=now)
    host: str = field(default_factory=socket.gethostname)
    source: str = "local"
    tool_version: str = __version__

    def to_row(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in fields(self)}  # shallow: the JSON columns copy
        row["meta"] = self.meta.to_json()
        for key in ("samples", "losses", "meta"):
            row[key] = json.dumps(row[key], allow_nan=True, separators=(",", ":"))
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TrialRecord:
        data = dict(row)
        for key, empty in (("samples", "[]"), ("losses", "{}"), ("meta", "{}")):
            data[key] = json.loads(data.get(key) or empty)
        for key in ("error", "log", "engine_sha256", "outputs_sha256", "source", "tool_version", "host"):
            data[key] = data.get(key) or ""
        data["meta"] = TrialMeta.from_json(data["meta"])
        status = _STATUS.get(data["status"])
        if status is None:  # a status this version does not know: a corrupt row
            raise ValueError(f"{data['status']!r} is not a valid TrialStatus")
        data["status"] = status
        return cls(**data)


class CacheStore:
    """The trial cache at ``path`` (created on first use)."""

    #: opened read-only (``_open_read_only``): a reader of a cache this user may not write
    read_only: bool = False

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise CacheError(f"no trial cache at {self.path}", "run `trt-routes apply` first")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError.from_os_error(exc, self.path.parent) from exc
        try:
            self.conn = sqlite3.connect(str(self.path))
            # as sqlite-utils sets it on every connection: REPLACE fires the DELETE triggers (schema._v4's counters)
            self.conn.execute("PRAGMA recursive_triggers = on")
            self.conn.execute("PRAGMA busy_timeout = 10000")
            if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                self.conn.execute("PRAGMA journal_mode = wal")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            migrate(self.conn, str(self.path))
            self._quick_check()
        except sqlite3.DatabaseError as exc:
            if hasattr(self, "conn"):
                self.conn.close()
            error = database_error(exc, self.path, opening=True)
            if create or not isinstance(error, StorageError) or not self._open_read_only():
                raise error from exc
        self.warnings: list[str] = []
        self._signatures_written: set[str] = set()  # by add_trial, in this process

    def _open_read_only(self) -> bool:
        """For a reader (``create=False``: plan, status, explain, trials) of a cache it may not write (a
        read-only ``caches/``, a file of another user): open it read-only, as an unchanging file (SQLite's
        ``immutable``: no -wal/-shm to create). False when that fails too, or the file needs a migration that
        only a writer can make."""
        from urllib.parse import quote

        try:
            conn = sqlite3.connect(f"file:{quote(str(self.path.resolve()))}?mode=ro&immutable=1", uri=True)
        except sqlite3.Error:
            return False
        try:
            if int(conn.execute("PRAGMA user_version").fetchone()[0]) != SCHEMA_VERSION:
                conn.close()
                return False
        except sqlite3.Error:
            conn.close()
            return False
        self.conn = conn
        self.read_only = True
        return True

    def _quick_check(self) -> None:
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        if size > QUICK_CHECK_MAX_BYTES:
            return
        problems = [str(r[0]) for r in self.conn.execute("PRAGMA quick_check(5)").fetchall()]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError("; ".join(problems)[:300])

    def query(self, sql: str, params: Iterable[Any] = ()) -> Iterator[dict[str, Any]]:
        """The rows of ``sql`` as dicts keyed by column name."""
        cur = self.conn.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return (dict(zip(names, row, strict=True)) for row in cur)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> CacheStore:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.close()
        if exc is not None and _is_fault(exc):  # a caller's own query on ``db`` met a damaged file
            raise database_error(exc, self.path) from exc  # type: ignore[arg-type]

    # -- writes (coordinator only) -------------------------------------------------------------
    @_guarded
    def add_trial(self, trial: TrialRecord, signature_fields: dict[str, str] | None = None) -> None:
        """Insert one trial in its own transaction (an existing id is replaced)."""
        row = trial.to_row()
        with self.conn:
            if signature_fields is not None and trial.signature not in self._signatures_written:
                self.conn.execute("INSERT OR IGNORE INTO signatures (hash, fields, first_seen) VALUES (?, ?, ?)",
                                [trial.signature, json.dumps(signature_fields, sort_keys=True), trial.created_at])
            self.conn.execute(  # one prepared statement: the hot path of every trial
                f"INSERT OR REPLACE INTO trials ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()),
            )
        if signature_fields is not None:
            self._signatures_written.add(trial.signature)

    @_guarded
    def add_trials(self, trials: Iterable[TrialRecord], signatures: dict[str, dict[str, str]]) -> int:
        """Insert many trials in one transaction; existing ids are kept (trials are immutable)."""
        rows = [t.to_row() for t in trials]
        with self.conn:
            self.conn.executemany("INSERT OR IGNORE INTO signatures (hash, fields, first_seen) VALUES (?, ?, ?)",
                                  [(sig, json.dumps(fields, sort_keys=True), now())
                                   for sig, fields in signatures.items()])
            before = self.count()
            if rows:
                cols = list(rows[0])
                self.conn.executemany(
                    f"INSERT OR IGNORE INTO trials ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [[row[c] for c in cols] for row in rows])
            return self.count() - before

    @_guarded
    def add_reference(self, key: str, inputs_sha: str, outputs_sha: str) -> None:
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO [references] (key, inputs_sha256, outputs_sha256, created_at) "
                              "VALUES (?, ?, ?, ?)", [key, inputs_sha, outputs_sha, now()])

    @_guarded
    def add_decision(self, job: str, route: str | None, previous: str | None, reason: str,
                     engine_sha: str) -> None:
        with self.conn:
            self.conn.execute("INSERT INTO decisions (job, at, route, previous_route, reason, engine_sha256) "
                              "VALUES (?, ?, ?, ?, ?, ?)", [job, now(), route, previous, reason, engine_sha])

    @_guarded
    def delete_trials(self, ids: Iterable[str]) -> None:
        with self.conn:
            for tid in ids:
                self.conn.execute("DELETE FROM trials WHERE id = ?", [tid])

    # -- reads -----------------------------------------------------------------------------
    def _records(self, rows: Iterator[dict[str, Any]]) -> list[TrialRecord]:
        out = []
        for row in rows:
            try:
                out.append(TrialRecord.from_row(row))
            except (ValueError, TypeError) as exc:
                self.warnings.append(f"corrupt trial row {row.get('id', '?')} skipped: {exc}")
        return out

    @_guarded
    def group(self, group_key: str, *, light: bool = False) -> dict[str, TrialRecord]:
        """Trials of one job group (same signature and job parts), by route.

        ``light`` leaves out samples and logs (what plan needs is status, median and losses)."""
        cols = LIGHT_COLUMNS if light else "*"
        rows = self.query(f"SELECT {cols} FROM trials WHERE group_key = ?", [group_key])
        return {t.route: t for t in self._records(rows)}

    @_guarded
    def group_rowids(self, group_key: str) -> dict[str, int]:
        """Route -> rowid of one job group's trials (one indexed SELECT, nothing decoded): for a reader that
        fetches only the few rows it reads (``light_row``)."""
        return {r[0]: r[1] for r in self.conn.execute("SELECT route, rowid FROM trials WHERE group_key = ?",
                                                    [group_key])}

    @_guarded
    def light_row(self, rowid: int) -> tuple[list[str], tuple[Any, ...]] | None:
        """One trial's light row by rowid, not decoded: (column names, values); None if it is gone."""
        cur = self.conn.execute(f"SELECT {LIGHT_COLUMNS} FROM trials WHERE rowid = ?", [rowid])
        row = cur.fetchone()
        return ([d[0] for d in cur.description], row) if row is not None else None

    @_guarded
    def routes(self, group_key: str) -> set[str]:
        """Routes with a trial in one job group (no row decoding: the cheap check plan needs)."""
        return {r[0] for r in self.conn.execute("SELECT route FROM trials WHERE group_key = ?", [group_key])}

    def _where_in(self, select: str, column: str, keys: Iterable[str]) -> Iterator[tuple[Any, ...]]:
        """Rows of ``select ... WHERE column IN (keys)``, the keys sent in chunks under SQLite's variable limit."""
        ordered = sorted(set(keys))
        for i in range(0, len(ordered), 500):
            chunk = ordered[i:i + 500]
            yield from self.conn.execute(f"{select} WHERE {column} IN ({', '.join('?' * len(chunk))})", chunk)

    @_guarded
    def group_versions(self, group_keys: Iterable[str]) -> dict[str, int]:
        """How many times each job group's rows changed (``schema._v4``'s triggers); 0 for a group never
        changed since the counting began."""
        keys = set(group_keys)
        return {**dict.fromkeys(keys, 0),
                **dict(self._where_in("SELECT group_key, version FROM group_state", "group_key", keys))}

    @_guarded
    def settled(self, fingerprints: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The settled plans (``plan.settled``) stored under these fingerprints, decoded; a row that does not
        decode is left out (a miss)."""
        out: dict[str, dict[str, Any]] = {}
        for fp, data in self._where_in("SELECT fingerprint, data FROM settled", "fingerprint", fingerprints):
            with contextlib.suppress(ValueError, TypeError):
                value = json.loads(data)
                if isinstance(value, dict):
                    out[fp] = value
        return out

    @_guarded
    def put_settled(self, rows: Iterable[tuple[str, str, dict[str, Any]]]) -> None:
        """Store (fingerprint, job, data) rows in one transaction; a job keeps only its newest row."""
        at = now()
        with self.conn:
            for fp, job, data in rows:
                self.conn.execute("DELETE FROM settled WHERE job = ? AND fingerprint != ?", [job, fp])
                self.conn.execute("INSERT OR REPLACE INTO settled (fingerprint, job, data, at) VALUES (?, ?, ?, ?)",
                                [fp, job, json.dumps(data, separators=(",", ":")), at])

    @_guarded
    def trials_for_job(self, job: str) -> list[TrialRecord]:
        rows = self.query("SELECT * FROM trials WHERE job = ? ORDER BY created_at, id", [job])
        return self._records(rows)

    @_guarded
    def latest_for_job(self, job: str) -> TrialRecord | None:
        """The job's newest trial of our own (rows imported from trtexec / Torch-TensorRT files left out)."""
        rows = list(self.query(
            "SELECT * FROM trials WHERE job = ? AND coalesce(source, '') NOT LIKE 'trtexec:%' "
            "AND coalesce(source, '') NOT LIKE 'torch-tensorrt:%' ORDER BY created_at DESC, id LIMIT 1", [job]))
        recs = self._records(iter(rows))
        return recs[0] if recs else None

    @_guarded
    def get(self, trial_id: str) -> TrialRecord | None:
        rows = list(self.query("SELECT * FROM trials WHERE id = ?", [trial_id]))
        recs = self._records(iter(rows))
        return recs[0] if recs else None

    @_guarded
    def all_trials(self) -> list[TrialRecord]:
        return self._records(self.query("SELECT * FROM trials ORDER BY id"))

    @_guarded
    def signature_fields(self, sig: str) -> dict[str, str] | None:
        rows = list(self.query("SELECT fields FROM signatures WHERE hash = ?", [sig]))
        return json.loads(rows[0]["fields"]) if rows else None

    @_guarded
    def reference(self, key: str) -> tuple[str, str] | None:
        rows = list(self.query("SELECT * FROM [references] WHERE key = ?", [key]))
        return (rows[0]["inputs_sha256"], rows[0]["outputs_sha256"]) if rows else None

    @_guarded
    def decisions(self, job: str) -> list[dict[str, Any]]:
        return list(self.query("SELECT * FROM decisions WHERE job = ? ORDER BY id", [job]))

    @_guarded
    def count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM trials").fetchone()[0])

    @_guarded
    def integrity_check(self) -> str:
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])
