"""plan's lazily decoded trials (issue 20, the no-op plan of a dynamic search): the same trials and outcomes
as decoding the whole group, rows decoded only when read, a corrupt row reads as missing with a warning."""

from __future__ import annotations

from pathlib import Path

from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.manifest.schema import Check, Tolerance
from trt_routes.plan.diff import GroupTrials, LazyOutcomes, outcomes

TOL = Tolerance(checks=[Check(metric="cos", threshold=1e-4)])


def rec(i: int, group: str = "g", cos: float = 0.0) -> TrialRecord:
    return TrialRecord(id=f"t{group}{i}", group_key=group, job="m/s/cpu", route=f"-k={i}" if i else "",
                       signature="s", model_digest="m", shape_key="x", settings_key="y", protocol_key="p",
                       reference_key="r", backend="onnxruntime", status="ok", median_ms=1.0 + i, ci_low=0.9 + i,
                       ci_high=1.1 + i, samples=[1.0, 2.0], losses={"y": {"cos": cos}})


def test_group_trials_match_the_decoded_group_and_decode_only_what_is_read(tmp_path: Path) -> None:
    with CacheStore(tmp_path / "c.sqlite") as cache:
        cache.add_trials([rec(i, cos=1.0 if i == 2 else 0.0) for i in range(5)] + [rec(1, group="other")], {})
        lazy = GroupTrials(cache, "g")
        assert lazy.routes == {"", "-k=1", "-k=2", "-k=3", "-k=4"} and not lazy.decoded
        assert "-k=3" in lazy and "-k=9" not in lazy and set(lazy.decoded) == {"-k=3"}
        assert lazy.get("-k=9") is None
        full = cache.group("g", light=True)
        assert dict(lazy) == full  # every trial as the eager, light decoding gives it
        known = LazyOutcomes(GroupTrials(cache, "g"), TOL)
        assert known.get("-k=2") == outcomes(full, TOL)["-k=2"] and not known["-k=2"].ok  # the gate applies
        assert dict(known) == outcomes(full, TOL) and len(known) == 5


def test_a_corrupt_row_reads_as_missing_with_a_warning(tmp_path: Path) -> None:
    with CacheStore(tmp_path / "c.sqlite") as cache:
        cache.add_trials([rec(0), rec(1)], {})
        with cache.conn:
            cache.conn.execute("UPDATE trials SET losses = '{not json' WHERE route = '-k=1'")
        lazy = GroupTrials(cache, "g")
        assert "-k=1" not in lazy and list(lazy) == [""]
        assert any("corrupt trial row" in w for w in cache.warnings)


def test_a_row_deleted_after_the_listing_reads_as_missing_even_if_its_rowid_is_reused(tmp_path: Path) -> None:
    """Rows are fetched by rowid when read: one deleted since the group was listed is gone, and a rowid that
    SQLite gave to another trial since (it reuses the largest one) is not read as this route's."""
    with CacheStore(tmp_path / "c.sqlite") as cache:
        cache.add_trials([rec(0), rec(1)], {})
        lazy = GroupTrials(cache, "g")
        with cache.conn:
            cache.conn.execute("DELETE FROM trials WHERE route = '-k=1'")
        cache.add_trials([rec(7, group="other")], {})  # takes the freed largest rowid
        assert cache.conn.execute("SELECT group_key FROM trials WHERE rowid = ?", [lazy.rowids["-k=1"]]).fetchone() \
            == ("other",)
        assert "-k=1" not in lazy and lazy.get("-k=1") is None and "" in lazy
