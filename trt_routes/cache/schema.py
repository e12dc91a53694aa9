"""SQLite schema of the trial cache and its migrations (PRAGMA user_version)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

    import sqlite_utils

from trt_routes.errors import CacheError


def _v1(db: sqlite_utils.Database) -> None:
    db.table("trials").create(
        {
            "id": str, "group_key": str, "job": str, "route": str, "signature": str,
            "model_digest": str, "shape_key": str, "settings_key": str, "protocol_key": str,
            "reference_key": str, "backend": str, "status": str, "median_ms": float, "ci_low": float,
            "ci_high": float, "mean_ms": float, "stdev_ms": float, "samples": str, "losses": str,
            "error": str, "log": str, "build_s": float, "measure_s": float, "engine_sha256": str,
            "outputs_sha256": str, "meta": str, "created_at": str, "host": str, "source": str,
            "tool_version": str,
        },
        pk="id",
        not_null={"group_key", "job", "route", "signature", "status"},
    )
    db.table("trials").create_index(["group_key"])
    db.table("trials").create_index(["job", "created_at"])
    db.table("signatures").create({"hash": str, "fields": str, "first_seen": str}, pk="hash")
    db.table("references").create(
        {"key": str, "inputs_sha256": str, "outputs_sha256": str, "created_at": str}, pk="key"
    )
    db.table("decisions").create(
        {"id": int, "job": str, "at": str, "route": str, "previous_route": str, "reason": str,
         "engine_sha256": str},
        pk="id",
    )
    db.table("decisions").create_index(["job", "id"])


def _v2(db: sqlite_utils.Database) -> None:
    """Cache sharing: remotes used by push/pull (for lazy engine fetches) and what each one holds."""
    db.table("remotes").create({"url": str, "options": str, "added_at": str, "last_pull": str}, pk="url")
    db.table("remote_state").create({"remote": str, "kind": str, "key": str, "at": str},
                              pk=("remote", "kind", "key"))


def _v3(db: sqlite_utils.Database) -> None:
    """Measurement and search: side-by-side re-measurements that confirm winners (keyed by job group,
    routes and re-measurement protocol), and per job group and strategy the state of its search (the
    warm-start routes it was given, builds and minutes spent, whether it stopped at its budget)."""
    db.table("remeasurements").create(
        {"key": str, "group_key": str, "job": str, "baseline": str, "challengers": str, "data": str,
         "created_at": str, "host": str, "tool_version": str},
        pk="key", not_null={"group_key", "baseline", "challengers", "data"},
    )
    db.table("remeasurements").create_index(["group_key"])
    db.table("searches").create(
        {"group_key": str, "strategy_key": str, "job": str, "warm": str, "state": str, "builds": int,
         "seconds": float, "updated_at": str},
        pk=("group_key", "strategy_key"), not_null={"state"},
    )


#: The tables whose rows carry a job group: a change to any of them may change that group's plan.
GROUP_TABLES = ("trials", "remeasurements", "searches")
#: Tables derived from the others (``plan.settled``): never copied between caches, never salvaged.
DERIVED_TABLES = ("group_state", "settled")


def _v4(db: sqlite_utils.Database) -> None:
    """No-op plans: ``group_state`` counts the changes to each job group's rows in ``GROUP_TABLES``, kept by
    triggers (so every writer counts, trt-routes' own, a bundle import or a sqlite3 shell alike), and
    ``settled`` remembers the plans apply found up to date, keyed by everything they were derived from
    (``trt_routes.plan.settled``)."""
    db.execute("CREATE TABLE group_state (group_key TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    bump = ("INSERT INTO group_state (group_key, version) VALUES ({row}.group_key, 1) "
            "ON CONFLICT (group_key) DO UPDATE SET version = version + 1;")
    for table in GROUP_TABLES:
        for op, rows in (("INSERT", ("NEW",)), ("DELETE", ("OLD",)), ("UPDATE", ("OLD", "NEW"))):
            body = " ".join(bump.format(row=row) for row in rows)
            db.execute(f"CREATE TRIGGER {table}_{op.lower()}_counts AFTER {op} ON [{table}] BEGIN {body} END")
    db.execute("CREATE TABLE settled (fingerprint TEXT PRIMARY KEY, job TEXT NOT NULL, data TEXT NOT NULL, "
               "at TEXT NOT NULL)")
    db.execute("CREATE INDEX settled_job ON settled (job)")


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_v1, _v2, _v3, _v4]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the database to SCHEMA_VERSION inside one transaction; refuse newer versions. A cache already at
    SCHEMA_VERSION costs one PRAGMA (sqlite-utils is not imported)."""
    current = _version(conn, path)
    if current == SCHEMA_VERSION:
        return
    from trt_routes.cache.sqlite import database

    db = database(conn)
    with conn:  # commits, or rolls back on any error (a full disk midway leaves the file as it was)
        # one explicit transaction: Python's sqlite3 begins none for CREATE statements, and sqlite-utils
        # commits each statement run outside a transaction on its own
        db.execute("BEGIN IMMEDIATE")
        # read again under the write lock: another process may have migrated the file while this one waited
        current = _version(conn, path)
        for step in MIGRATIONS[current:]:
            step(db)
        if current != SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _version(conn: sqlite3.Connection, path: str) -> int:
    current = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if current > SCHEMA_VERSION:
        raise CacheError(
            f"{path}: trial cache schema version {current} is newer than this trt-routes understands "
            f"({SCHEMA_VERSION})",
            "upgrade trt-routes (pip install -U trt-routes), or point paths.cache at another file",
        )
    return current
