"""Merging trials into the local cache (bundles, remote segments, tuning caches) and exporting bundles.

Trials are immutable facts keyed by their id. When two rows share an id but differ (two machines with
one signature measured the same route before they synced, or a bundle forged a row), the local row
stands: an import never replaces a trial (nor a re-measurement) this cache already holds, whatever its
date, unless the caller asks for ``prefer_incoming``. Within one import, the earliest of several incoming
rows of one id is taken (created_at, then host, then the digest of the row), so a merge is idempotent.
A search state is kept only when its builds do not exceed the trials its group has. One merge is one
transaction."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes.cache.store import CacheStore, TrialRecord, now
from trt_routes.files.artifacts import BlobStore
from trt_routes.project import exclusive as project_exclusive
from trt_routes.share import AS_DOCUMENT
from trt_routes.share.bundle import read_bundle, write_bundle
from trt_routes.share.profiles import install_profiles, profiles_of
from trt_routes.share.rows import (
    REMEASUREMENT_FIELDS,
    SEARCH_FIELDS,
    SEARCH_STATES,
    BundleError,
    parse_remeasurement,
    parse_search,
    parse_trial,
    trial_json,
)

if TYPE_CHECKING:
    from trt_routes.project import Project

_CHUNK = 400


@dataclass
class MergeReport:
    """What one merge did."""

    __pydantic_config__ = AS_DOCUMENT

    source: str
    added: int = 0
    present: int = 0  # identical rows already here
    replaced: int = 0  # conflicting rows replaced by the incoming one (only with prefer_incoming)
    kept: int = 0  # conflicting rows: ours stays
    signatures: int = 0
    references: int = 0
    remeasurements: int = 0
    searches: int = 0
    profiles: int = 0  # layer profiles of trials written here (trt_routes.share.profiles)
    blobs: int = 0
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        parts = [f"{self.added} new trial(s)", f"{self.present} already here"]
        if self.replaced or self.kept:
            parts.append(f"{self.replaced + self.kept} conflicting ({self.kept} kept ours"
                         + (f", {self.replaced} replaced by the incoming row" if self.replaced else "") + ")")
        if self.blobs:
            parts.append(f"{self.blobs} blob(s)")
        return f"{self.source}: " + ", ".join(parts)


def content(trial: TrialRecord) -> str:
    """A trial's content as text, independent of the order of keys inside its JSON columns."""
    return json.dumps(trial_json(trial), sort_keys=True, allow_nan=True)


def row_rank(trial: TrialRecord) -> tuple[str, str, str]:
    """The order that decides between two rows of one id: earliest created_at, then host, then content."""
    return trial.created_at, trial.host, hashlib.sha256(content(trial).encode()).hexdigest()


def _chunks(items: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


def existing_trials(cache: CacheStore, ids: Iterable[str]) -> dict[str, TrialRecord | None]:
    """Rows already in the cache for ``ids`` (None for a row that does not decode: it is replaced)."""
    out: dict[str, TrialRecord | None] = {}
    for chunk in _chunks(sorted(set(ids))):
        rows = cache.query(f"SELECT * FROM trials WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
        for row in rows:
            try:
                out[row["id"]] = TrialRecord.from_row(row)
            except (ValueError, TypeError):
                out[row["id"]] = None
    return out


def has_table(cache: CacheStore, name: str) -> bool:
    return cache.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [name]).fetchone() \
        is not None


def _merge_remeasurements(cache: CacheStore, rows: list[dict[str, str]], prefer_incoming: bool = False) -> int:
    """Re-measurements are facts keyed like trials: a local one stands (unless ``prefer_incoming``), the
    earliest of incoming ones is taken, inside the caller's transaction. A cache without the table (an
    older schema) skips them."""
    if not rows or not has_table(cache, "remeasurements"):
        return 0

    def rank(r: dict[str, Any]) -> tuple[str, str, str]:
        text = json.dumps({k: r[k] for k in REMEASUREMENT_FIELDS}, sort_keys=True)
        return r["created_at"], r["host"], hashlib.sha256(text.encode()).hexdigest()

    changed = 0
    cols = ", ".join(REMEASUREMENT_FIELDS)
    for row in rows:
        old = cache.conn.execute(f"SELECT {cols} FROM remeasurements WHERE key = ?", [row["key"]]).fetchone()
        if old is None or (prefer_incoming and rank(row) != rank(dict(zip(REMEASUREMENT_FIELDS, old, strict=True)))):
            cache.conn.execute(f"INSERT OR REPLACE INTO remeasurements ({cols}) VALUES "
                             f"({', '.join('?' * len(REMEASUREMENT_FIELDS))})",
                             [row[k] for k in REMEASUREMENT_FIELDS])
            changed += 1
    return changed


def search_rank(row: dict[str, Any]) -> tuple[int, float, int, str]:
    """The order that decides between two states of one search: the one that got further (more builds,
    then more time, then finished over stopped over running), then the digest of the row. Taking the
    maximum is idempotent and independent of the order in which states arrive."""
    text = json.dumps({k: row[k] for k in SEARCH_FIELDS}, sort_keys=True)
    return (int(row["builds"]), float(row["seconds"]), SEARCH_STATES.index(row["state"]),
            hashlib.sha256(text.encode()).hexdigest())


def search_row_key(row: dict[str, Any]) -> str:
    """What a push records for a search state: its identity and content (a changed state pushes again;
    a rewrite that changes only its time does not)."""
    text = json.dumps({k: row[k] for k in SEARCH_FIELDS if k != "updated_at"}, sort_keys=True)
    return f"{row['group_key']}:{row['strategy_key']}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _merge_searches(cache: CacheStore, rows: list[dict[str, Any]]) -> int:
    """Search states, inside the caller's transaction: per (group_key, strategy_key) the one that got
    further stands. A cache without the table (an older schema) skips them."""
    if not rows or not has_table(cache, "searches"):
        return 0
    changed = 0
    cols = ", ".join(SEARCH_FIELDS)
    for row in rows:
        old = cache.conn.execute(f"SELECT {cols} FROM searches WHERE group_key = ? AND strategy_key = ?",
                               [row["group_key"], row["strategy_key"]]).fetchone()
        mine: dict[str, Any] | None = None
        if old is not None:
            try:
                mine = parse_search(_search_item(old), "local search state")
            except BundleError:
                mine = None  # a row that does not decode is replaced
        if mine is None or search_rank(row) > search_rank(mine):
            marks = ", ".join("?" * len(SEARCH_FIELDS))
            cache.conn.execute(f"INSERT OR REPLACE INTO searches ({cols}) VALUES ({marks})",
                               [row[k] for k in SEARCH_FIELDS])
            changed += 1
    return changed


def _search_item(row: Iterable[Any]) -> dict[str, Any]:
    item = dict(zip(SEARCH_FIELDS, row, strict=True))
    for k in ("group_key", "strategy_key", "job", "warm", "state", "updated_at"):
        item[k] = "" if item[k] is None else str(item[k])
    item["builds"] = int(item["builds"] or 0)
    item["seconds"] = float(item["seconds"] or 0.0)
    return item


def check_searches(cache: CacheStore, trials: list[TrialRecord], searches: list[dict[str, Any]], source: str,
                   where: dict[tuple[str, str], str] | None = None) -> None:
    """Refuse search states that claim more builds than their group has trials (here and incoming): a
    forged ``builds`` would stop the search that should go on (BundleError naming the row)."""
    groups = sorted({r["group_key"] for r in searches})
    counts: dict[str, set[str]] = {g: set() for g in groups}
    for t in trials:
        if t.group_key in counts:
            counts[t.group_key].add(t.id)
    for chunk in _chunks(groups):
        for gk, tid in cache.conn.execute(
                f"SELECT group_key, id FROM trials WHERE group_key IN ({', '.join('?' * len(chunk))})", chunk):
            counts[gk].add(tid)
    for r in searches:
        have = len(counts[r["group_key"]])
        if int(r["builds"]) > have:
            at = (where or {}).get((r["group_key"], r["strategy_key"])) or f"{source}: search state"
            raise BundleError(f"{at}: search state of {r['job']!r:.80} (group {r['group_key'][:12]}) claims "
                              f"{r['builds']} builds, but its group has {have} trial(s) here and in the import",
                              "nothing was merged; the bundle is corrupt or was altered")


def merge(cache: CacheStore, trials: list[TrialRecord], signatures: dict[str, dict[str, str]],
          references: Iterable[dict[str, str]] = (), *, state: Iterable[tuple[str, str, str]] = (),
          source: str = "", remeasurements: list[dict[str, str]] | None = None,
          searches: list[dict[str, Any]] | None = None, prefer_incoming: bool = False,
          where: dict[tuple[str, str], str] | None = None) -> MergeReport:
    """Merge rows in one transaction; ``state`` rows (remote, kind, key) are recorded in the same one.
    A trial already here stands unless ``prefer_incoming``; search states are checked against the trial
    counts of their groups first (BundleError, nothing merged)."""
    report = MergeReport(source=source)
    incoming: dict[str, TrialRecord] = {}
    for t in trials:
        if t.id not in incoming or row_rank(t) < row_rank(incoming[t.id]):
            incoming[t.id] = t
    write: list[TrialRecord] = []
    if searches:
        check_searches(cache, trials, searches, source, where)
    with cache.conn:
        for sig, fields_ in sorted(signatures.items()):
            cur = cache.conn.execute("INSERT OR IGNORE INTO signatures (hash, fields, first_seen) VALUES (?, ?, ?)",
                                   [sig, json.dumps(fields_, sort_keys=True), now()])
            report.signatures += cur.rowcount
        have = existing_trials(cache, incoming)
        for tid, t in sorted(incoming.items()):
            if tid not in have:
                write.append(t)
                report.added += 1
                continue
            old = have[tid]
            if old is not None and content(old) == content(t):
                report.present += 1
            elif old is None or prefer_incoming:
                write.append(t)
                report.replaced += 1
            else:
                report.kept += 1
        if write:
            cols = list(write[0].to_row())
            cache.conn.executemany(
                f"INSERT OR REPLACE INTO trials ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [list(t.to_row().values()) for t in write])
        for ref in references:
            cur = cache.conn.execute(
                "INSERT OR IGNORE INTO [references] (key, inputs_sha256, outputs_sha256, created_at) "
                "VALUES (?, ?, ?, ?)", [ref["key"], ref["inputs_sha256"], ref["outputs_sha256"], ref["created_at"]])
            report.references += cur.rowcount
        report.remeasurements = _merge_remeasurements(cache, remeasurements or [], prefer_incoming)
        report.searches = _merge_searches(cache, searches or [])
        at = now()
        cache.conn.executemany("INSERT OR IGNORE INTO remote_state (remote, kind, key, at) VALUES (?, ?, ?, ?)",
                                  [(r, k, key, at) for r, k, key in state])
    return report


def install_blobs(store: BlobStore, staged: dict[str, Path]) -> int:
    """Move verified, staged blobs into the store (same filesystem); returns how many were new. A file
    already under a blob's name is kept only when its bytes hash to it (else the verified one replaces it)."""
    added = 0
    for sha, path in sorted(staged.items()):
        dest = store.path(sha)
        if store.has(sha):
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, dest)
        added += 1
    return added


@contextmanager
def exclusive(project: Project, what: str) -> Iterator[None]:
    """The project's apply lock: merges and gc never interleave with an apply on the same cache."""
    with project_exclusive(project, "`trt-routes apply` (or another cache command) is running on {cache}",
                           f"run `trt-routes {what}` again when it has finished"):
        yield


# -- export / import --------------------------------------------------------------------------------
@dataclass
class ExportReport:
    __pydantic_config__ = AS_DOCUMENT

    path: str
    trials: int
    signatures: int
    references: int
    blobs: int
    bytes: int
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def remeasurements_of(cache: CacheStore, trials: list[TrialRecord] | None) -> list[dict[str, str]]:
    """The re-measurement rows of the groups of ``trials`` (all of them for None; none where the cache
    has no such table)."""
    out: list[dict[str, str]] = []
    for row in _group_rows(cache, "remeasurements", REMEASUREMENT_FIELDS, trials):
        item = {k: "" if v is None else str(v) for k, v in zip(REMEASUREMENT_FIELDS, row, strict=True)}
        try:
            out.append(parse_remeasurement(item, f"re-measurement {item['key']}"))
        except BundleError:
            continue  # a row another version wrote differently stays local
    return out


def _group_rows(cache: CacheStore, table: str, fields: Sequence[str],
                trials: list[TrialRecord] | None) -> Iterator[tuple[Any, ...]]:
    """``fields`` of the rows of ``table`` in the groups of ``trials`` (all rows for None; none where the
    cache has no such table)."""
    if not has_table(cache, table):
        return
    cols = ", ".join(fields)
    if trials is None:
        yield from cache.conn.execute(f"SELECT {cols} FROM {table}")
        return
    for chunk in _chunks(sorted({t.group_key for t in trials})):
        yield from cache.conn.execute(f"SELECT {cols} FROM {table} WHERE group_key IN ({', '.join('?' * len(chunk))})",
                                    chunk)


def searches_of(cache: CacheStore, trials: list[TrialRecord] | None) -> list[dict[str, Any]]:
    """The search-state rows of the groups of ``trials`` (all of them for None; none where the cache has
    no such table). A search still running here is left out: its state is not a fact yet."""
    out: list[dict[str, Any]] = []
    for row in _group_rows(cache, "searches", SEARCH_FIELDS, trials):
        try:
            item = parse_search(_search_item(row), "search state")
        except BundleError:
            continue  # a row another version wrote differently stays local
        if item["state"] != "running":
            out.append(item)
    return out


def collect(cache: CacheStore, trials: list[TrialRecord]) -> tuple[
        list[TrialRecord], dict[str, dict[str, str]], list[dict[str, str]], list[str]]:
    """The exportable subset of ``trials`` with their signatures and references, and why others were left."""
    skipped: list[str] = []
    signatures: dict[str, dict[str, str]] = {}
    keep: list[TrialRecord] = []
    for t in trials:
        if t.signature not in signatures:
            fields_ = cache.signature_fields(t.signature)
            if fields_ is None:
                skipped.append(f"trial {t.id}: its signature {t.signature!r} has no recorded fields")
                continue
            signatures[t.signature] = fields_
        try:
            parse_trial(trial_json(t), f"trial {t.id}")
        except BundleError as exc:
            skipped.append(exc.message)
            continue
        keep.append(t)
    keys = sorted({t.reference_key for t in keep})
    refs = []
    for key in keys:
        refs += [{k: r[k] for k in ("key", "inputs_sha256", "outputs_sha256", "created_at")}
                 for r in cache.query("SELECT * FROM [references] WHERE key = ?", [key])]
    return keep, {s: signatures[s] for s in {t.signature for t in keep}}, refs, skipped


def export_bundle(project: Project, dest: Path, *, engines: bool = False, outputs: bool = False,
                  only: list[str] | None = None) -> ExportReport:
    """Write the cache's trials (of jobs matching ``only``) with provenance to a bundle at ``dest``."""
    store = project.store
    with project.open_cache() as cache:
        trials = [t for t in cache.all_trials() if not only or any(fnmatch.fnmatchcase(t.job, p) for p in only)]
        keep, signatures, refs, skipped = collect(cache, trials)
        skipped += cache.warnings
    blobs: dict[str, tuple[Path, str]] = {}
    for t in keep:
        if engines and store.has(t.engine_sha256):
            blobs[t.engine_sha256] = (store.path(t.engine_sha256), "engine")
        if outputs and store.has(t.outputs_sha256):
            blobs.setdefault(t.outputs_sha256, (store.path(t.outputs_sha256), "outputs"))
    if outputs:
        for r in refs:
            for sha in (r["inputs_sha256"], r["outputs_sha256"]):
                if store.has(sha):
                    blobs.setdefault(sha, (store.path(sha), "reference"))
    with project.open_cache() as cache:
        remeasured = remeasurements_of(cache, keep)
        searched = searches_of(cache, keep)
    write_bundle(dest, keep, signatures, refs, blobs, remeasurements=remeasured, searches=searched,
                 profiles=profiles_of(project, (t.id for t in keep)))
    return ExportReport(str(dest), len(keep), len(signatures), len(refs), len(blobs), dest.stat().st_size,
                        skipped)


def import_bundle(project: Project, path: Path, *, prefer_incoming: bool = False) -> MergeReport:
    """Validate the bundle at ``path`` completely, then merge it in one transaction (idempotent). Trials
    this cache already holds stand unless ``prefer_incoming``."""
    store = project.store
    with exclusive(project, f"cache import {path}"):
        bundle = read_bundle(path, store.root)
        try:
            with project.open_cache() as cache:
                check_searches(cache, bundle.trials, bundle.searches, str(path), bundle.where)
                blobs = install_blobs(store, bundle.blobs)
                report = merge(cache, bundle.trials, bundle.signatures, bundle.references, source=str(path),
                               remeasurements=bundle.remeasurements, searches=bundle.searches,
                               prefer_incoming=prefer_incoming, where=bundle.where)
                report.blobs = blobs
                held = {tid for tid in bundle.profiles if cache.get(tid) is not None}
            report.profiles = install_profiles(project, bundle.profiles, held)
        finally:
            bundle.discard()
    return report
