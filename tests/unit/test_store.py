"""The trial cache (real SQLite), the lockfile and the canonical serializer."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trt_routes import canonical
from trt_routes.cache.schema import SCHEMA_VERSION
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.errors import CacheError, LockfileError
from trt_routes.evidence import TrialStatus
from trt_routes.lockfile import Lockfile
from trt_routes.signature import Signature


def rec(i: int, group: str = "g") -> TrialRecord:
    return TrialRecord(id=f"t{i}", group_key=group, job="m/s/cpu", route=f"-k={i}" if i else "",
                       signature="s", model_digest="m", shape_key="x", settings_key="y", protocol_key="p",
                       reference_key="r", backend="onnxruntime", status=TrialStatus.OK, median_ms=1.0 + i,
                       samples=[1.0, 2.0], losses={"y": {"cos": 0.0}})


def test_trials_round_trip_and_group_by_key(tmp_path: Path) -> None:
    with CacheStore(tmp_path / "c.sqlite") as cache:
        for i in range(3):
            cache.add_trial(rec(i), {"cpu": "x"})
        cache.add_trial(rec(9, group="other"))
        group = cache.group("g")
        assert sorted(group) == ["", "-k=1", "-k=2"]
        assert group["-k=1"] == rec(1).__class__(**{**rec(1).__dict__, "created_at": group["-k=1"].created_at,
                                                     "host": group["-k=1"].host})
        assert cache.group("g", light=True)["-k=2"].samples == []  # light rows leave samples out
        assert cache.signature_fields("s") == {"cpu": "x"}
        assert cache.integrity_check() == "ok"
        assert cache.add_trials([rec(1), rec(5)], {}) == 1  # existing ids kept: trials are immutable


def test_the_migrations_make_the_schema_sqlite_utils_made(tmp_path: Path) -> None:
    """The migrations are SQL (trt-routes no longer depends on sqlite-utils); the tables, indexes and
    triggers they make are, statement for statement, those of a cache that sqlite-utils' ``Table.create`` made
    (``tests/fixtures/cache-schema-4.json``, written by that code), so both kinds of cache read and migrate
    alike."""
    import json

    golden = json.loads((Path(__file__).parents[1] / "fixtures" / "cache-schema-4.json").read_text())
    CacheStore(tmp_path / "c.sqlite").close()
    with sqlite3.connect(tmp_path / "c.sqlite") as conn:
        made = [list(r) for r in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid")]
        assert made[:len(golden["sqlite_master"])] == golden["sqlite_master"]
        # schema 5 (decision records) came after sqlite-utils left: one table more
        assert [name for _, name, _, _ in made[len(golden["sqlite_master"]):]] == [
            "decision_records", "sqlite_autoindex_decision_records_1"]
        assert golden["user_version"] == 4 and conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_newer_cache_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    CacheStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(CacheError, match="newer than this trt-routes understands"):
        CacheStore(path)


def test_an_older_cache_gains_change_counters_that_every_writer_bumps(tmp_path: Path) -> None:
    """Schema 4 (plan.settled): a cache of schema 3 with trials in it is migrated in place; from then on the
    triggers count each insert, update and delete of a group's trials, re-measurements and search state,
    made through trt-routes or past it."""
    from trt_routes.cache.schema import MIGRATIONS

    path = tmp_path / "c.sqlite"
    db = sqlite3.connect(path)
    for step in MIGRATIONS[:3]:
        step(db)
    db.execute("PRAGMA user_version = 3")
    row = rec(1).to_row()
    db.execute(f"INSERT INTO trials ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    db.commit()
    db.close()
    with CacheStore(path) as cache:
        assert cache.group_versions(["g", "other"]) == {"g": 0, "other": 0}  # counting starts now
        cache.add_trial(rec(2))
        assert cache.group_versions(["g"]) == {"g": 1}
        conn = cache.conn
        with conn:
            conn.execute("UPDATE trials SET median_ms = 9 WHERE id = 't1'")
            conn.execute("UPDATE trials SET group_key = 'other' WHERE id = 't2'")  # counts for both groups
            conn.execute("INSERT INTO remeasurements (key, group_key, baseline, challengers, data) "
                         "VALUES ('k', 'g', '', '[]', '{}')")
            conn.execute("INSERT INTO searches (group_key, strategy_key, state) VALUES ('g', 's', 'done')")
            conn.execute("UPDATE searches SET builds = 3 WHERE group_key = 'g'")
            conn.execute("DELETE FROM remeasurements WHERE key = 'k'")
        assert cache.group_versions(["g", "other"]) == {"g": 9, "other": 1}  # an update counts old and new rows
        cache.delete_trials(["t2"])
        assert cache.group_versions(["other"]) == {"other": 2}
        cache.put_settled([("fp1", "m/s/cpu", {"reused": 1, "candidates": [""]})])
        cache.put_settled([("fp2", "m/s/cpu", {"reused": 2, "candidates": []})])  # a job keeps its newest
        assert cache.settled(["fp1", "fp2", "fp3"]) == {"fp2": {"reused": 2, "candidates": []}}
        conn.execute("UPDATE settled SET data = 'not json' WHERE fingerprint = 'fp2'")
        assert cache.settled(["fp2"]) == {}  # a row that does not decode is a miss


def test_a_migration_that_fails_midway_leaves_the_file_as_it_was(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """All steps or none (a full disk while the triggers are created left "table trials already exists")."""
    from trt_routes.cache import schema

    path = tmp_path / "c.sqlite"

    def broken(db: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS[:-1], broken])
    with pytest.raises(CacheError, match=r"no space left|full"):
        CacheStore(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    monkeypatch.undo()
    with CacheStore(path) as cache:  # space again: it migrates from scratch
        cache.add_trial(rec(1))
        assert cache.group_versions(["g"]) == {"g": 1}


def test_two_processes_creating_one_cache_at_once_both_open_it(tmp_path: Path) -> None:
    """The second waits for the first one's schema transaction, then finds the schema made (it read the version
    before waiting: it must read it again, or it would create every table a second time)."""
    import threading

    from trt_routes.cache.schema import MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "c.sqlite"
    first = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    first.execute("PRAGMA journal_mode = wal")
    first.execute("BEGIN IMMEDIATE")  # the other process, midway through creating the schema
    for step in MIGRATIONS:
        step(first)
    first.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    timer = threading.Timer(0.5, lambda: first.execute("COMMIT"))
    timer.start()
    try:
        with CacheStore(path) as cache:  # reads version 0, waits on the lock, then finds the schema made
            cache.add_trial(rec(1))
            assert cache.group_versions(["g"]) == {"g": 1}
    finally:
        timer.join()
        first.close()


def test_garbage_cache_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(CacheError, match="cannot open the trial cache") as info:
        CacheStore(path)
    assert info.value.hint and "move the file away" in info.value.hint


def test_corrupt_row_is_skipped_with_a_warning(tmp_path: Path) -> None:
    with CacheStore(tmp_path / "c.sqlite") as cache:
        cache.add_trial(rec(1))
        cache.add_trial(rec(2))
        cache.conn.execute("UPDATE trials SET losses = '{broken' WHERE id = 't1'")
        assert list(cache.group("g")) == ["-k=2"]
        assert cache.warnings and "t1" in cache.warnings[0]
        # a status this version does not know is a corrupt row too; the known ones read back as TrialStatus
        cache.conn.execute("UPDATE trials SET status = 'great' WHERE id = 't2'")
        assert cache.group("g") == {} and "'great' is not a valid TrialStatus" in cache.warnings[-1]
        cache.add_trial(rec(3))
        assert cache.group("g")["-k=3"].status is TrialStatus.OK


def test_lockfile_is_deterministic_and_written_only_on_change(tmp_path: Path) -> None:
    path = tmp_path / "tuning.lock"
    lock = Lockfile(path, jobs={"b/x/cpu": {"route": "", "timing": {"ms": 1.23456789}},
                                "a/x/cpu": {"route": "-k=1", "shape": [1, 3]}})
    assert lock.write() is True
    text = path.read_text()
    assert text.startswith("# tuning.lock: generated by `trt-routes apply`")
    assert text.index("a/x/cpu") < text.index("b/x/cpu") and "ms: 1.23457" in text and "[1, 3]" in text
    again = Lockfile.read(path)
    assert again.jobs["a/x/cpu"]["route"] == "-k=1"
    assert again.write() is False
    assert Lockfile(path, jobs=dict(reversed(list(lock.jobs.items())))).render() == text


@pytest.mark.parametrize(("content", "match"), [
    ("lock_version: 99\njobs: {}\n", "newer than this trt-routes"),
    ("{ not yaml", "not a valid lockfile"),
    ("jobs: {}\n", "no lock_version"),
])
def test_bad_lockfiles_are_clear_errors(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "tuning.lock"
    path.write_text(content)
    with pytest.raises(LockfileError, match=match):
        Lockfile.read(path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_one_serializer_gives_one_key_for_reordered_input(data: dict) -> None:  # type: ignore[type-arg]
    reordered = dict(reversed(list(data.items())))
    assert canonical.digest(data) == canonical.digest(reordered)
    assert canonical.dumps(canonical.normalize(data)) == canonical.dumps(data)


def test_numbers_are_normalized() -> None:
    assert canonical.dumps({"a": 1.0, "b": 0.1 + 0.2}) == '{"a":1,"b":0.3}'
    assert canonical.normalize(float("nan")) == "NaN"


def test_signature_diff_names_each_field() -> None:
    sig = Signature({"backend_version": "1.32.0", "cpu_model": "X", "driver": "580.159"})
    assert sig.diff({"backend_version": "1.31.0", "cpu_model": "X", "driver": "580.95"}) == [
        "backend_version 1.31.0 -> 1.32.0", "driver 580.95 -> 580.159"]
    assert sig.hash == Signature(dict(reversed(list(sig.fields.items())))).hash


def test_atomic_writes_get_ordinary_file_permissions(tmp_path: Path) -> None:
    import os

    from trt_routes.files.artifacts import atomic_write_text

    mask = os.umask(0o022)
    os.umask(mask)
    atomic_write_text(tmp_path / "tuning.lock", "x")
    assert (tmp_path / "tuning.lock").stat().st_mode & 0o777 == 0o666 & ~mask
