"""SQLite schema of the trial cache and its migrations (PRAGMA user_version)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from trt_routes.errors import CacheError


def _create(conn: sqlite3.Connection, table: str, columns: str, *indexes: tuple[str, ...]) -> None:
    """``CREATE TABLE "table" (columns)`` and an index ``idx_<table>_<columns>`` on each tuple of ``indexes``: the
    statements, quoting and layout that sqlite-utils' ``Table.create`` and ``create_index`` wrote for the caches
    made before these migrations were SQL (``tests/fixtures/cache-schema-4.json``)."""
    body = ",\n".join(f"   {line.strip()}" for line in columns.strip().splitlines())
    conn.execute(f'CREATE TABLE "{table}" (\n{body}\n)')
    for cols in indexes:
        quoted = ", ".join(f'"{c}"' for c in cols)
        conn.execute(f'CREATE INDEX "idx_{table}_{"_".join(cols)}"\n    ON "{table}" ({quoted})')


def _v1(conn: sqlite3.Connection) -> None:
    _create(conn, "trials", """
        "id" TEXT PRIMARY KEY
        "group_key" TEXT NOT NULL
        "job" TEXT NOT NULL
        "route" TEXT NOT NULL
        "signature" TEXT NOT NULL
        "model_digest" TEXT
        "shape_key" TEXT
        "settings_key" TEXT
        "protocol_key" TEXT
        "reference_key" TEXT
        "backend" TEXT
        "status" TEXT NOT NULL
        "median_ms" REAL
        "ci_low" REAL
        "ci_high" REAL
        "mean_ms" REAL
        "stdev_ms" REAL
        "samples" TEXT
        "losses" TEXT
        "error" TEXT
        "log" TEXT
        "build_s" REAL
        "measure_s" REAL
        "engine_sha256" TEXT
        "outputs_sha256" TEXT
        "meta" TEXT
        "created_at" TEXT
        "host" TEXT
        "source" TEXT
        "tool_version" TEXT""", ("group_key",), ("job", "created_at"))
    _create(conn, "signatures", """
        "hash" TEXT PRIMARY KEY
        "fields" TEXT
        "first_seen" TEXT""")
    _create(conn, "references", """
        "key" TEXT PRIMARY KEY
        "inputs_sha256" TEXT
        "outputs_sha256" TEXT
        "created_at" TEXT""")
    _create(conn, "decisions", """
        "id" INTEGER PRIMARY KEY
        "job" TEXT
        "at" TEXT
        "route" TEXT
        "previous_route" TEXT
        "reason" TEXT
        "engine_sha256" TEXT""", ("job", "id"))


def _v2(conn: sqlite3.Connection) -> None:
    """Cache sharing: remotes used by push/pull (for lazy engine fetches) and what each one holds."""
    _create(conn, "remotes", """
        "url" TEXT PRIMARY KEY
        "options" TEXT
        "added_at" TEXT
        "last_pull" TEXT""")
    _create(conn, "remote_state", """
        "remote" TEXT
        "kind" TEXT
        "key" TEXT
        "at" TEXT
        PRIMARY KEY ("remote", "kind", "key")""")


def _v3(conn: sqlite3.Connection) -> None:
    """Measurement and search: side-by-side re-measurements that confirm winners (keyed by job group,
    routes and re-measurement protocol), and per job group and strategy the state of its search (the
    warm-start routes it was given, builds and minutes spent, whether it stopped at its budget)."""
    _create(conn, "remeasurements", """
        "key" TEXT PRIMARY KEY
        "group_key" TEXT NOT NULL
        "job" TEXT
        "baseline" TEXT NOT NULL
        "challengers" TEXT NOT NULL
        "data" TEXT NOT NULL
        "created_at" TEXT
        "host" TEXT
        "tool_version" TEXT""", ("group_key",))
    _create(conn, "searches", """
        "group_key" TEXT
        "strategy_key" TEXT
        "job" TEXT
        "warm" TEXT
        "state" TEXT NOT NULL
        "builds" INTEGER
        "seconds" REAL
        "updated_at" TEXT
        PRIMARY KEY ("group_key", "strategy_key")""")


#: The tables whose rows carry a job group: a change to any of them may change that group's plan.
GROUP_TABLES = ("trials", "remeasurements", "searches")
#: Tables derived from the others (``plan.settled``, ``plan.decision``): never copied between caches, never
#: salvaged (a decision record lost is derived again from the trials, and explain says so).
DERIVED_TABLES = ("group_state", "settled", "decision_records")


def _v4(conn: sqlite3.Connection) -> None:
    """No-op plans: ``group_state`` counts the changes to each job group's rows in ``GROUP_TABLES``, kept by
    triggers (so every writer counts, trt-routes' own, a bundle import or a sqlite3 shell alike), and
    ``settled`` remembers the plans apply found up to date, keyed by everything they were derived from
    (``trt_routes.plan.settled``)."""
    conn.execute("CREATE TABLE group_state (group_key TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    bump = ("INSERT INTO group_state (group_key, version) VALUES ({row}.group_key, 1) "
            "ON CONFLICT (group_key) DO UPDATE SET version = version + 1;")
    for table in GROUP_TABLES:
        for op, rows in (("INSERT", ("NEW",)), ("DELETE", ("OLD",)), ("UPDATE", ("OLD", "NEW"))):
            body = " ".join(bump.format(row=row) for row in rows)
            conn.execute(f"CREATE TRIGGER {table}_{op.lower()}_counts AFTER {op} ON [{table}] BEGIN {body} END")
    conn.execute("CREATE TABLE settled (fingerprint TEXT PRIMARY KEY, job TEXT NOT NULL, data TEXT NOT NULL, "
               "at TEXT NOT NULL)")
    conn.execute("CREATE INDEX settled_job ON settled (job)")


def _v5(conn: sqlite3.Connection) -> None:
    """Decisions as values (``trt_routes.plan.decision``): per job, the decision apply last made (its selection,
    confirmation and search notes as JSON), the job group it was made for and a digest of the trials it saw."""
    conn.execute("CREATE TABLE decision_records (job TEXT PRIMARY KEY, group_key TEXT NOT NULL, "
                 "trials TEXT NOT NULL, record TEXT NOT NULL, at TEXT NOT NULL)")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3, _v4, _v5]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the database to SCHEMA_VERSION inside one transaction; refuse newer versions. A cache already at
    SCHEMA_VERSION costs one PRAGMA. The migrations are SQL statements on ``conn``."""
    current = _version(conn, path)
    if current == SCHEMA_VERSION:
        return
    with conn:  # commits, or rolls back on any error (a full disk midway leaves the file as it was)
        # one explicit transaction: Python's sqlite3 begins none for CREATE statements
        conn.execute("BEGIN IMMEDIATE")
        # read again under the write lock: another process may have migrated the file while this one waited
        current = _version(conn, path)
        for step in MIGRATIONS[current:]:
            step(conn)
        if current != SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _version(conn: sqlite3.Connection, path: str) -> int:
    current = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if current > SCHEMA_VERSION:
        raise CacheError(
            f"{path}: trial cache schema version {current} is newer than this trt-routes understands "
            f"({SCHEMA_VERSION})",
            "upgrade trt-routes (pip install -U trt-routes), or point paths.cache at another file",
        )
    return current
