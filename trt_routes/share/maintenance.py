"""cache stats, gc and verify.

gc policy. An engine blob is kept when tuning.lock references it (never dropped, whatever the flags), or
when it belongs to the fastest ``ok`` trial of its group (the winner under any tolerance that passes it);
engines of slower trials go (their routes rebuild them if a tolerance change ever needs one). Output and
reference blobs stay while a trial or reference row names them. ``--older-than DAYS`` also drops the trials
of signatures whose newest trial is older than DAYS, unless a job of the manifest resolves to that
signature here or tuning.lock references it. Blobs named by nothing are dropped; so are stale temp files,
worker scratch folders of dead workers and staging folders (``.incoming-*``) an interrupted import left.

recover: a damaged cache file (a corrupt page) is read table by table, row by row, skipping what SQLite
cannot read; every readable row goes into a new file of the same schema, which replaces the damaged one
(kept beside it as ``trials.sqlite.damaged-<time>``)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes.cache.schema import DERIVED_TABLES
from trt_routes.canonical import file_sha256
from trt_routes.errors import CacheError
from trt_routes.evidence import TrialStatus
from trt_routes.files.artifacts import stale_leftovers
from trt_routes.share import AS_DOCUMENT
from trt_routes.share.merge import exclusive

if TYPE_CHECKING:
    from trt_routes.project import Project

_STALE_TMP_S = 3600


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _db_bytes(path: Path) -> int:
    return sum(_size(Path(str(path) + suffix)) for suffix in ("", "-wal", "-shm"))


def lock_refs(project: Project) -> tuple[set[str], set[str], set[str]]:
    """(engine shas, trial ids, signature hashes) that tuning.lock references."""
    lock = project.read_lock()
    engines = {e.engine_sha256 for e in lock.jobs.values()} - {""}
    trials = {e.trial or "" for e in lock.jobs.values()} - {""}
    sigs = {(e.signature.hash if e.signature else None) or "" for e in lock.jobs.values()} - {""}
    return engines, trials, sigs


# -- stats ---------------------------------------------------------------------------------------------
@dataclass
class Stats:
    __pydantic_config__ = AS_DOCUMENT

    path: str
    db_bytes: int
    trials: int
    by_status: dict[str, int]
    by_backend: dict[str, int]
    by_source: dict[str, int]
    signatures: list[dict[str, Any]]
    blobs: int
    blob_bytes: int
    engines_referenced: int
    engines_present: int
    remotes: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _describe(fields: dict[str, str]) -> str:
    """A short human name for a signature: its device and backend versions."""
    keys = ("gpu_name", "cpu_model", "backend", "backend_version", "origin")
    return ", ".join(fields[k] for k in keys if fields.get(k)) or "?"


def stats(project: Project) -> Stats:
    store = project.store
    shas = store.iter_shas()
    with project.open_cache() as cache:
        db = cache.conn

        def counts(col: str) -> dict[str, int]:
            return {str(k): n for k, n in db.execute(f"SELECT {col}, count(*) FROM trials GROUP BY {col} "
                                                     "ORDER BY count(*) DESC, 1")}
        source_col = ("CASE WHEN source LIKE 'trtexec:%' THEN 'trtexec' WHEN source LIKE 'torch-tensorrt:%' "
                      "THEN 'torch-tensorrt' ELSE coalesce(nullif(source, ''), 'local') END")
        sigs = []
        for sig, n, ok, last, hosts in db.execute(
                "SELECT signature, count(*), sum(status = 'ok'), max(created_at), count(DISTINCT host) "
                "FROM trials GROUP BY signature ORDER BY max(created_at) DESC"):
            fields = cache.signature_fields(sig) or {}
            sigs.append({"hash": sig, "trials": n, "ok": ok, "last_seen": last, "hosts": hosts,
                         "describe": _describe(fields), "fields": fields})
        engines = {r[0] for r in db.execute("SELECT DISTINCT engine_sha256 FROM trials WHERE engine_sha256 != ''")}
        remotes = []
        for url, last_pull in db.execute("SELECT url, last_pull FROM remotes ORDER BY url"):
            pushed = db.execute("SELECT count(*) FROM remote_state WHERE remote = ? AND kind = 'trial'",
                                [url]).fetchone()[0]
            remotes.append({"url": url, "last_pull": last_pull or None, "trials_exchanged": pushed})
        have = set(shas)
        return Stats(
            path=str(project.cache_path), db_bytes=_db_bytes(project.cache_path), trials=cache.count(),
            by_status=counts("status"), by_backend=counts("backend"), by_source=counts(source_col),
            signatures=sigs, blobs=len(shas), blob_bytes=sum(_size(store.path(s)) for s in shas),
            engines_referenced=len(engines), engines_present=len(engines & have), remotes=remotes)


# -- gc ------------------------------------------------------------------------------------------------
@dataclass
class GcReport:
    __pydantic_config__ = AS_DOCUMENT

    dry_run: bool
    trials: int = 0
    signatures: list[str] = field(default_factory=list)
    blobs: int = 0
    bytes: int = 0
    temp_files: int = 0
    leftover_folders: int = 0  # scratch of dead workers, staging of interrupted imports
    kept_by_lock: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        verb = "would drop" if self.dry_run else "dropped"
        sigs = f" under {len(self.signatures)} old signature(s)" if self.signatures else ""
        return (f"gc {verb} {self.trials} trial(s){sigs}, {self.blobs} blob(s) ({self.bytes / 1e6:.1f} MB)"
                f", {self.temp_files} stale temp file(s) and {self.leftover_folders} leftover folder(s); "
                f"{self.kept_by_lock} engine(s) kept for tuning.lock")


def gc(project: Project, *, dry_run: bool = False, older_than_days: float | None = None) -> GcReport:
    report = GcReport(dry_run=dry_run)
    store = project.store
    lock_engines, lock_trials, lock_sigs = lock_refs(project)
    current = {j.signature.hash for j in project.jobs if j.signature is not None}
    with exclusive(project, "cache gc"), project.open_cache() as cache:
        db = cache.conn
        drop_ids: list[str] = []
        if older_than_days is not None:
            cutoff = (datetime.now(UTC) - timedelta(days=older_than_days)).strftime("%Y-%m-%dT%H:%M:%SZ")
            for sig, last in db.execute("SELECT signature, max(created_at) FROM trials GROUP BY signature"):
                if last < cutoff and sig not in current and sig not in lock_sigs:
                    report.signatures.append(sig)
                    drop_ids += [r[0] for r in db.execute("SELECT id FROM trials WHERE signature = ?", [sig])
                                 if r[0] not in lock_trials]
        report.trials = len(drop_ids)
        dropping = set(drop_ids)
        keep: set[str] = set(lock_engines)
        best: dict[str, tuple[float, str]] = {}
        for tid, group, status, median, engine, outputs in db.execute(
                "SELECT id, group_key, status, median_ms, engine_sha256, outputs_sha256 FROM trials"):
            if tid in dropping:
                continue
            if outputs:
                keep.add(outputs)
            better = group not in best or (median is not None and median < best[group][0])
            if status == TrialStatus.OK and engine and median is not None and better:
                best[group] = (median, engine)
        keep |= {engine for _, engine in best.values()}
        for ins, outs in db.execute("SELECT inputs_sha256, outputs_sha256 FROM [references]"):
            keep |= {ins, outs}
        doomed = [s for s in store.iter_shas() if s not in keep]
        report.kept_by_lock = sum(1 for s in lock_engines if store.has(s))
        report.blobs = len(doomed)
        report.bytes = sum(_size(store.path(s)) for s in doomed)
        temps = [p for p in store.root.glob("**/.*") if p.is_file() and p.name.endswith(".tmp")
                 and time.time() - p.stat().st_mtime > _STALE_TMP_S] if store.root.is_dir() else []
        report.temp_files = len(temps)
        leftovers = stale_leftovers(store.root, locked=True)  # we hold the project lock: no import runs
        report.leftover_folders = len(leftovers)
        if dry_run:
            return report
        if drop_ids:
            with db:
                db.executemany("DELETE FROM trials WHERE id = ?", [(i,) for i in drop_ids])
                db.execute("DELETE FROM signatures WHERE hash NOT IN (SELECT DISTINCT signature FROM trials)")
        for sha in doomed:  # after the rows are gone: a crash in between leaves only unreferenced blobs
            store.path(sha).unlink(missing_ok=True)
        for p in temps:
            p.unlink(missing_ok=True)
        for folder in leftovers:
            shutil.rmtree(folder, ignore_errors=True)
    return report


# -- verify --------------------------------------------------------------------------------------------
@dataclass
class VerifyReport:
    integrity: str
    blobs_checked: int = 0
    corrupt_blobs: list[str] = field(default_factory=list)
    bad_rows: list[str] = field(default_factory=list)
    unshareable_rows: list[str] = field(default_factory=list)  # decode, but fail bundle validation
    missing_lock_engines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.integrity == "ok" and not self.corrupt_blobs and not self.bad_rows

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def verify(project: Project, *, evict: bool = True) -> VerifyReport:
    """PRAGMA integrity_check, every trial row, every blob's digest. A corrupt blob is evicted (the next
    plan re-plans or re-fetches what needed it); the cache is never fatal."""
    from trt_routes.share.rows import BundleError, parse_trial, trial_json

    store = project.store
    lock_engines, _, _ = lock_refs(project)
    try:
        cache = project.open_cache(create=False)
    except CacheError as exc:
        return VerifyReport(integrity=str(exc))
    report = VerifyReport(integrity="ok")
    try:
        with cache:
            report.integrity = cache.integrity_check()
            if report.integrity == "ok":
                for t in cache.all_trials():
                    try:
                        parse_trial(trial_json(t), f"trial {t.id}")
                    except BundleError as exc:
                        report.unshareable_rows.append(exc.message)
                report.bad_rows += cache.warnings
    except CacheError as exc:  # damage SQLite met while reading
        report.integrity = str(exc)
    for sha in store.iter_shas():
        report.blobs_checked += 1
        path = store.path(sha)
        try:
            good = file_sha256(path) == sha
        except OSError:
            good = False
        if not good:
            report.corrupt_blobs.append(sha)
            if evict:
                os.unlink(path)
    report.missing_lock_engines = sorted(s for s in lock_engines if not store.has(s))
    return report


# -- recover -------------------------------------------------------------------------------------------
@dataclass
class RecoverReport:
    __pydantic_config__ = AS_DOCUMENT

    path: str
    damaged: str  # where the damaged file was kept
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows salvaged
    lost: dict[str, int] = field(default_factory=dict)  # table -> rows known unreadable (at least)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        got = ", ".join(f"{n} {t}" for t, n in sorted(self.rows.items()))
        lost = sum(self.lost.values())
        return (f"{self.path}: recovered {got or 'nothing'}"
                + (f"; {lost} unreadable row(s) or page(s) skipped" if lost else "")
                + f"; the damaged file is kept as {self.damaged}")


def _salvage(src: sqlite3.Connection, table: str) -> tuple[list[tuple[Any, ...]], list[str], int]:
    """Every row of ``table`` SQLite can read, in rowid order, stepping over damaged pages: a failed
    scan resumes past the last row read, jumping ever further until a readable page is found."""
    try:
        cols = [r[1] for r in src.execute(f"PRAGMA table_info([{table}])")]
    except sqlite3.DatabaseError:
        return [], [], 1
    if not cols:
        return [], [], 0
    select = f"SELECT rowid, {', '.join(f'[{c}]' for c in cols)} FROM [{table}] WHERE rowid > ? ORDER BY rowid"
    try:
        top = int(src.execute(f"SELECT max(rowid) FROM [{table}]").fetchone()[0] or 0)
    except sqlite3.DatabaseError:
        top = 1 << 40
    rows: list[tuple[Any, ...]] = []
    after, skipped, jump = -(1 << 62), 0, 1
    while after < top:
        try:
            for row in src.execute(select, [after]):
                rows.append(tuple(row[1:]))
                after, jump = row[0], 1
            return rows, cols, skipped
        except sqlite3.DatabaseError:
            skipped += 1
            after = max(after, 0) + jump
            jump *= 2
    return rows, cols, skipped


def recover(project: Project) -> RecoverReport:
    """Salvage every readable row of the damaged cache into a new file with the same schema, keep the
    damaged file as ``<name>.damaged-<time>`` and put the new one in its place (under the project lock)."""
    from trt_routes.cache.store import CacheStore

    path = project.cache_path
    if not path.exists():
        raise CacheError(f"no trial cache at {path}", "nothing to recover")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    damaged = path.with_name(f"{path.name}.damaged-{stamp}")
    fresh = path.with_name(f".{path.name}.recovering-{stamp}")
    report = RecoverReport(path=str(path), damaged=str(damaged))
    with exclusive(project, "cache recover"):
        for suffix in ("", "-wal", "-shm"):
            Path(str(fresh) + suffix).unlink(missing_ok=True)
        try:
            with CacheStore(fresh) as new:  # the current schema, empty
                tables = [r[0] for r in new.conn.execute(  # derived tables are not facts: left to be rebuilt
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
                    if r[0] not in DERIVED_TABLES]
                src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                try:
                    with new.conn:
                        for table in tables:
                            rows, cols, lost = _salvage(src, table)
                            keep = [r[1] for r in new.conn.execute(f"PRAGMA table_info([{table}])")]
                            picked = [i for i, c in enumerate(cols) if c in keep]
                            names = ", ".join(f"[{cols[i]}]" for i in picked)
                            sql = (f"INSERT OR IGNORE INTO [{table}] ({names}) "
                                   f"VALUES ({', '.join('?' * len(picked))})")
                            before = new.conn.execute(f"SELECT count(*) FROM [{table}]").fetchone()[0]
                            for row in rows:
                                try:
                                    new.conn.execute(sql, [row[i] for i in picked])
                                except sqlite3.DatabaseError:
                                    lost += 1
                            report.rows[table] = new.conn.execute(f"SELECT count(*) FROM [{table}]").fetchone()[0] \
                                - before
                            if lost:
                                report.lost[table] = lost
                finally:
                    src.close()
                new.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            for suffix in ("", "-wal", "-shm"):  # the damaged file and its journal, kept together
                if Path(str(path) + suffix).exists():
                    os.replace(str(path) + suffix, str(damaged) + suffix)
            os.replace(fresh, path)
            for suffix in ("-wal", "-shm"):
                Path(str(fresh) + suffix).unlink(missing_ok=True)
        except BaseException:
            for suffix in ("", "-wal", "-shm"):
                Path(str(fresh) + suffix).unlink(missing_ok=True)
            raise
    return report
