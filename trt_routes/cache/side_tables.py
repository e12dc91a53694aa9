"""Cache rows beside the trials: side-by-side re-measurements, search states and related jobs' winners.

Plain JSON in and out (``trt_routes.selection.confirm`` and ``trt_routes.search.job`` give it meaning). Writes are
the coordinator's, each in its own transaction; a corrupt row reads as missing."""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Mapping
from typing import Any

from trt_routes import __version__
from trt_routes.cache.store import CacheStore, now


def add_remeasurement(cache: CacheStore, key: str, group_key: str, job: str, data: Mapping[str, Any]) -> None:
    """Store one re-measurement (``Remeasurement.to_json()``); an existing key is kept (facts are immutable)."""
    row = {"key": key, "group_key": group_key, "job": job, "baseline": data["baseline"],
           "challengers": json.dumps(list(data["challengers"])), "data": json.dumps(data, allow_nan=False),
           "created_at": now(), "host": socket.gethostname(), "tool_version": __version__}
    with cache.conn:
        cache.conn.execute(f"INSERT OR IGNORE INTO remeasurements ({', '.join(row)}) "
                           f"VALUES ({', '.join('?' * len(row))})", list(row.values()))


def remeasurement(cache: CacheStore, key: str, group_key: str) -> dict[str, Any] | None:
    """The re-measurement stored under ``key`` for job group ``group_key`` (a row whose group column says
    another group is not this group's: its changes are counted for that group, ``cache.schema._v4``)."""
    rows = list(cache.conn.execute("SELECT data FROM remeasurements WHERE key = ? AND group_key = ?",
                                 [key, group_key]))
    if not rows:
        return None
    try:
        data = json.loads(rows[0][0])
    except (TypeError, ValueError):
        cache.warnings.append(f"corrupt re-measurement row {key} skipped")
        return None
    return data if isinstance(data, dict) else None


def remeasurements_for(cache: CacheStore, group_key: str) -> list[dict[str, Any]]:
    """Every re-measurement of one job group, oldest first (for explain and reports)."""
    out = []
    for key, data, created in cache.conn.execute(
            "SELECT key, data, created_at FROM remeasurements WHERE group_key = ? ORDER BY created_at, key",
            [group_key]):
        try:
            out.append({"key": key, "created_at": created, **json.loads(data)})
        except (TypeError, ValueError):
            cache.warnings.append(f"corrupt re-measurement row {key} skipped")
    return out


def search_state(cache: CacheStore, group_key: str, strategy_key: str) -> dict[str, Any] | None:
    rows = list(cache.query("SELECT * FROM searches WHERE group_key = ? AND strategy_key = ?",
                               [group_key, strategy_key]))
    if not rows:
        return None
    row = dict(rows[0])
    try:
        warm = json.loads(row.get("warm") or "[]")
    except ValueError:
        warm = []
    # a list: the warm-start routes (before priors held failed values); else {"routes": [...], "avoid": [...]}
    if isinstance(warm, dict):
        row["warm"], row["avoid"] = list(warm.get("routes") or []), list(warm.get("avoid") or [])
    else:
        row["warm"], row["avoid"] = list(warm) if isinstance(warm, list) else [], []
    return row


def put_search_state(cache: CacheStore, group_key: str, strategy_key: str, job: str, warm: list[str],
                     state: str, builds: int, seconds: float, avoid: list[str] | None = None) -> None:
    priors: object = {"routes": warm, "avoid": avoid} if avoid else warm
    row = {"group_key": group_key, "strategy_key": strategy_key, "job": job, "warm": json.dumps(priors),
           "state": state, "builds": builds, "seconds": seconds, "updated_at": now()}
    updates = ", ".join(f"{col} = excluded.{col}" for col in row if col not in ("group_key", "strategy_key"))
    with cache.conn:
        cache.conn.execute(f"INSERT INTO searches ({', '.join(row)}) VALUES ({', '.join('?' * len(row))}) "
                           f"ON CONFLICT (group_key, strategy_key) DO UPDATE SET {updates}", list(row.values()))


def current_winners(cache: CacheStore) -> dict[str, str]:
    """Job name -> the route it last locked (the newest decision per job), routes that won."""
    rows = cache.conn.execute(
        "SELECT d.job, d.route FROM decisions d JOIN (SELECT job, max(id) AS id FROM decisions GROUP BY job) m "
        "ON d.id = m.id WHERE d.route IS NOT NULL")
    return {job: route for job, route in rows}


def put_decision_record(cache: CacheStore, job: str, group_key: str, trials: str, record: str) -> None:
    """Keep ``record`` as the decision apply last made for ``job`` (``trt_routes.plan.decision``)."""
    with cache.conn:
        cache.conn.execute("INSERT OR REPLACE INTO decision_records (job, group_key, trials, record, at) "
                           "VALUES (?, ?, ?, ?, ?)", [job, group_key, trials, record, now()])


def decision_record(cache: CacheStore, job: str) -> dict[str, Any] | None:
    """The decision record apply last stored for ``job``: ``group_key``, ``trials``, ``record``, ``at``; None
    when there is none, or the cache predates them (opened read-only, not migrated)."""
    try:
        rows = list(cache.query("SELECT * FROM decision_records WHERE job = ?", [job]))
    except sqlite3.OperationalError:
        return None
    return dict(rows[0]) if rows else None
