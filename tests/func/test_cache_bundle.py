"""Bundles: export/import round trip, validation of everything in a bundle (paths that would escape,
links, sizes, digests, row schema, keys, versions), atomic and idempotent merges, and a property test:
merging random trials split into segments is idempotent and independent of order."""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from _project import copy_project
from _sharing import fresh_clone, machine, trial_table
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from trt_routes import canonical
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.cli.app import app
from trt_routes.share.bundle import read_bundle, write_bundle
from trt_routes.share.merge import has_table, import_bundle, merge, row_rank
from trt_routes.share.rows import BundleError, expected_group_key, expected_trial_id, parse_trial, trial_json
from trt_routes.tune.apply import apply

runner = CliRunner()

@pytest.fixture(scope="module")
def tuned(sharing_project: Path) -> Path:
    """Machine A's project, applied once per session (read it; copy it to change it)."""
    return sharing_project


@pytest.fixture(scope="module")
def exported(tuned: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "a.tar.gz"
    result = runner.invoke(app, ["cache", "export", str(path), "--engines", "--outputs", "-m", str(tuned)])
    assert result.exit_code == 0, result.output
    return path


def test_keys_in_bundles_mirror_jobs(tuned: Path) -> None:
    project = machine(tuned)
    jobs = {j.group_key: j for j in project.jobs}
    with project.open_cache() as cache:
        trials = cache.all_trials()
    assert trials
    for t in trials:
        job = jobs[t.group_key]
        assert expected_group_key(t) == job.group_key and expected_trial_id(t) == job.trial_id(t.route)
        assert parse_trial(json.loads(json.dumps(trial_json(t))), "row") == t


def test_export_import_round_trip_builds_nothing(tuned: Path, exported: Path, tmp_path: Path) -> None:
    c = fresh_clone(tuned, tmp_path / "c")
    result = runner.invoke(app, ["cache", "import", str(exported), "-m", str(c)])
    assert result.exit_code == 0 and "10 new trial(s)" in result.output
    assert trial_table(machine(c)) == trial_table(machine(tuned))
    applied = apply(machine(c))
    assert applied.exit_code == 0 and applied.built == 0  # engines came in the bundle
    result = runner.invoke(app, ["cache", "import", str(exported), "-m", str(c)])
    assert result.exit_code == 0 and "0 new trial(s), 10 already here" in result.output  # idempotent
    with tarfile.open(exported) as tar:
        head = json.load(tar.extractfile("trt-routes-bundle.json"))  # type: ignore[arg-type]
    assert head["format"] == "trt-routes-bundle" and head["version"] == 1
    assert {"host", "created_at", "tool_version"} <= set(head)
    assert {b["kind"] for b in head["blobs"].values()} >= {"engine", "outputs", "reference"}


def test_a_bundle_without_engines_the_plan_says_each_winner_is_built_again(tuned: Path, tmp_path: Path) -> None:
    """Trials imported without their engines: plan reselects with no search, and says that the winners'
    engines are built again, as apply then does (the plan said "no builds", and apply built them)."""
    path = tmp_path / "bare.tar.gz"
    assert runner.invoke(app, ["cache", "export", str(path), "-m", str(tuned)]).exit_code == 0
    c = fresh_clone(tuned, tmp_path / "c")
    (c.parent / "tuning.lock").unlink()  # another team's project: the trials, not the lock (with it: materialize)
    assert runner.invoke(app, ["cache", "import", str(path), "-m", str(c)]).exit_code == 0
    result = runner.invoke(app, ["plan", "--json", "-m", str(c)])
    plans = json.loads(result.output)["jobs"]
    gone = [j["job"] for j in plans if any("is not in the blob store" in r for r in j["reasons"])]
    assert gone and all(j["action"] == "reselect" and not j["to_build"] for j in plans), plans
    text = runner.invoke(app, ["plan", "-m", str(c)]).output
    assert f"{len(gone)} winner engine(s) missing from the blob store" in " ".join(text.split()), text
    applied = apply(machine(c))
    # at most one build a job: the jobs' engines can be the same bytes (one rebuild serves both)
    assert applied.exit_code == 0 and 1 <= applied.built <= len(gone), (applied.built, gone)
    assert json.loads(runner.invoke(app, ["plan", "--json", "-m", str(c)]).output)["jobs"][0]["action"] == "up-to-date"


# -- hostile bundles ---------------------------------------------------------------------------------
Members = list[tuple[tarfile.TarInfo, bytes]]


def _members(path: Path) -> Members:
    out = []
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m)
            out.append((m, f.read() if f else b""))
    return out


def _write(path: Path, members: Members) -> Path:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for info, data in members:
            info = tarfile.TarInfo(info.name) if info.isreg() else info
            info.size = len(data) if data is not None and not info.issym() and not info.islnk() else 0
            tar.addfile(info, io.BytesIO(data) if info.size else None)
    path.write_bytes(buf.getvalue())
    return path


def _rehash(members: Members, name: str, data: bytes) -> Members:
    """Replace member ``name`` and fix the manifest, so only the content itself is wrong."""
    out = [(i, data if i.name == name else d) for i, d in members]
    head = json.loads(out[0][1])
    head["members"][name].update(sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                                 rows=len(data.splitlines()))
    return [(out[0][0], json.dumps(head).encode()), *out[1:]]


def _manifest(members: Members, fn: Callable[[dict], None]) -> Members:
    head = json.loads(members[0][1])
    fn(head)
    return [(members[0][0], json.dumps(head).encode()), *members[1:]]


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, b""


def _first_blob(members: Members) -> str:
    return next(i.name for i, _ in members if i.name.startswith("blobs/"))


def _trials(members: Members) -> bytes:
    return next(d for i, d in members if i.name == "trials.jsonl")


def _edit_row(members: Members, fn: Callable[[dict], None], line: int = 3) -> Members:
    rows = _trials(members).splitlines()
    row = json.loads(rows[line - 1])
    fn(row)
    rows[line - 1] = json.dumps(row).encode()
    return _rehash(members, "trials.jsonl", b"\n".join(rows) + b"\n")


HOSTILE: dict[str, tuple[Callable[[Members], Members], str]] = {
    "parent path": (lambda m: [*m, (tarfile.TarInfo("../escaped"), b"x")], "unexpected member '../escaped'"),
    "absolute path": (lambda m: [*m, (tarfile.TarInfo("/tmp/trt-routes-escaped"), b"x")],
                      "unexpected member '/tmp/trt-routes-escaped'"),
    "blob path escape": (lambda m: [*m, (tarfile.TarInfo("blobs/../../escaped"), b"x")], "unexpected member"),
    "symlink blob": (lambda m: [(i, d) for i, d in m if i.name != _first_blob(m)] + [
        _link(_first_blob(m), "/etc/passwd")], "not a regular file"),
    "hard link": (lambda m: [*m, _link("blobs/" + "0" * 64, "/etc/passwd", tarfile.LNKTYPE)], "not a regular file"),
    "directory": (lambda m: [*m, _link("blobs", "", tarfile.DIRTYPE)], "not a regular file"),
    "tampered table": (lambda m: [(i, d.replace(b'"ok"', b'"OK"', 1) if i.name == "trials.jsonl" else d)
                                  for i, d in m], "does not match its sha256"),
    "tampered blob": (lambda m: [(i, (b"\0" + d[1:]) if i.name.startswith("blobs/") else d) for i, d in m],
                      "corrupt or tampered"),
    "size lie": (lambda m: _manifest(m, lambda h: h["members"]["trials.jsonl"].update(size=1)), "size differs"),
    "row count lie": (lambda m: _manifest(m, lambda h: h["members"]["trials.jsonl"].update(rows=99)),
                      "has 10 rows, the manifest says 99"),
    "undeclared blob": (lambda m: _manifest(m, lambda h: h["blobs"].clear()), "undeclared"),
    "missing blob": (lambda m: [(i, d) for i, d in m if i.name != _first_blob(m)], "lacks member"),
    "unknown field": (lambda m: _edit_row(m, lambda r: r.update(sneaky=1)), "unknown trial field(s) sneaky"),
    "bad type": (lambda m: _edit_row(m, lambda r: r.update(median_ms="fast")), "'median_ms' must be"),
    "bad status": (lambda m: _edit_row(m, lambda r: r.update(status="great")),
                   "'status' must be one of ok, crashed, timeout, build-error, accuracy-failed, got 'great'"),
    "forged signature": (lambda m: _edit_row(m, lambda r: r.update(signature="0" * 16)), "group key does not match"),
    "forged route": (lambda m: _edit_row(m, lambda r: r.update(route="-x=1")), "id does not match"),
    "newer version": (lambda m: [(m[0][0], m[0][1].replace(b'"version": 1', b'"version": 7')), *m[1:]],
                      "newer than this trt-routes"),
    "no manifest first": (lambda m: list(reversed(m)), "first member"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_bundles_are_refused_whole(case: str, tuned: Path, exported: Path, tmp_path: Path) -> None:
    mutate, message = HOSTILE[case]
    bad = _write(tmp_path / "bad.tar.gz", mutate(_members(exported)))
    c = fresh_clone(tuned, tmp_path / "c")
    with pytest.raises(BundleError, match=re.escape(message)):
        import_bundle(machine(c), bad)
    assert trial_table(machine(c)) == []  # nothing half-merged
    store = tmp_path / "c" / "caches" / "engines"
    assert not list(store.glob(".incoming-*")) and not list(store.glob("??/*"))  # staging cleaned, no blob
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/trt-routes-escaped").exists()
    result = runner.invoke(app, ["cache", "import", str(bad), "-m", str(c)])
    assert result.exit_code == 2 and "error:" in result.output and "Traceback" not in result.output


def test_not_a_bundle(tmp_path: Path, tuned: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(gzip.compress(b"not a tar at all" * 100))
    with pytest.raises(BundleError, match=r"not a readable trt-routes bundle|not a trt-routes bundle"):
        read_bundle(junk, tmp_path)


# -- the merge rule ----------------------------------------------------------------------------------
SIGS = [{"cpu_model": m, "backend": "onnxruntime"} for m in ("A", "B")]


def _trial(sig: int, route: str, when: int, host: str, median: float, status: str) -> TrialRecord:
    t = TrialRecord(id="", group_key="", job="m/s/cpu", route=route, signature=canonical.digest(SIGS[sig], 16),
                    model_digest="m" * 64, shape_key="s" * 16, settings_key="e" * 16, protocol_key="p" * 16,
                    reference_key="r" * 16, backend="onnxruntime", status=status,
                    median_ms=median if status == "ok" else None, samples=[median, median * 1.01],
                    engine_sha256="e" * 64 if status == "ok" else "", error="" if status == "ok" else "boom",
                    losses={"y": {"cos": median / 1e6, "lInf": float("nan")}}, created_at=f"2025-01-0{when}T00:00:00Z",
                    host=host)
    t.group_key = expected_group_key(t)
    t.id = expected_trial_id(t)
    return t


trials_st = st.lists(st.builds(_trial, st.integers(0, 1), st.sampled_from(["", "-a=1", "-b=2", "-a=1 -b=2"]),
                               st.integers(1, 3), st.sampled_from(["h1", "h2"]),
                               st.floats(0.01, 100, allow_nan=False), st.sampled_from(["ok", "crashed"])),
                     max_size=16)


def _earliest(trials: list[TrialRecord]) -> dict[str, TrialRecord]:
    best: dict[str, TrialRecord] = {}
    for t in trials:
        if t.id not in best or row_rank(t) < row_rank(best[t.id]):
            best[t.id] = t
    return best


def _segment_bundle(trials: list[TrialRecord], folder: Path, n: int) -> Path:
    """A segment as a machine pushes it: one row per id (its cache's), written and read as a bundle."""
    path = folder / f"seg{n}.tar.gz"
    write_bundle(path, list(_earliest(trials).values()), {canonical.digest(s, 16): s for s in SIGS},
                 kind="segment")
    return path


@settings(max_examples=25, deadline=None)
@given(trials=trials_st, cuts=st.lists(st.integers(0, 16), max_size=3), order=st.randoms(use_true_random=False))
def test_merge_is_idempotent_and_never_replaces_a_local_row(trials: list[TrialRecord], cuts: list[int],
                                                           order: object) -> None:
    """Per id, the first row to arrive stands (a later import never replaces it); merging again changes
    nothing; and the rows of any order hold the same ids."""
    bounds = sorted({0, len(trials), *(min(c, len(trials)) for c in cuts)})
    segments = [trials[a:b] for a, b in itertools.pairwise(bounds)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = [_segment_bundle(s, root, i) for i, s in enumerate(segments)]
        shuffled = list(paths)
        order.shuffle(shuffled)  # type: ignore[attr-defined]
        tables = {}
        for name, sequence in (("forward", paths), ("shuffled", shuffled), ("twice", [*shuffled, *paths])):
            with CacheStore(root / f"{name}.sqlite") as cache:
                first: dict[str, TrialRecord] = {}
                for p in sequence:
                    b = read_bundle(p)
                    for t in b.trials:
                        first.setdefault(t.id, t)
                    merge(cache, b.trials, b.signatures, b.references)
                tables[name] = [tuple(r) for r in cache.conn.execute("SELECT * FROM trials ORDER BY id")]
                for tid, t in first.items():  # the rule: the row that arrived first stands
                    got = cache.get(tid)
                    assert got is not None and (got.created_at, got.host) == (t.created_at, t.host)
                    assert got.samples == t.samples  # floats survive the bundle exactly
        assert tables["shuffled"] == tables["twice"]  # idempotent
        assert {r[0] for r in tables["forward"]} == {r[0] for r in tables["shuffled"]} == set(_earliest(trials))


def test_local_trials_and_conflicts(tmp_path: Path) -> None:
    early, late = _trial(0, "-a=1", 1, "h1", 1.0, "ok"), _trial(0, "-a=1", 2, "h2", 2.0, "ok")
    sig = {canonical.digest(SIGS[0], 16): SIGS[0]}
    with CacheStore(tmp_path / "c.sqlite") as cache:
        cache.add_trial(late, SIGS[0])
        report = merge(cache, [early], sig)  # an earlier-dated incoming row does not replace ours
        assert report.kept == 1 and report.replaced == 0
        assert cache.get(early.id).median_ms == 2.0  # type: ignore[union-attr]
        assert "conflicting (1 kept ours)" in report.text()
        report = merge(cache, [early], sig, prefer_incoming=True)  # unless asked for
        assert report.replaced == 1 and cache.get(early.id).median_ms == 1.0  # type: ignore[union-attr]


def test_export_only_pattern_and_json(tuned: Path, tmp_path: Path) -> None:
    out = tmp_path / "bs1.tar.gz"
    result = runner.invoke(app, ["cache", "export", str(out), "--only", "cnn/bs1/*", "--json", "-m", str(tuned)])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["trials"] == 5 and data["blobs"] == 0
    bundle = read_bundle(out)
    assert {t.job for t in bundle.trials} == {"cnn/bs1/cpu"}


def test_remeasurements_travel_with_their_trials(tuned: Path, tmp_path: Path) -> None:
    """Side-by-side re-measurements are facts like trials: exported with their groups, merged by key."""
    a = tmp_path / "a"
    shutil.copytree(tuned.parent, a)
    with machine(a / "tuning.yaml").open_cache() as cache:
        assert has_table(cache, "remeasurements") and has_table(cache, "searches")
        searches = [tuple(r) for r in cache.conn.execute("SELECT * FROM searches ORDER BY group_key")]
        t = cache.all_trials()[0]
        row = {"key": "test-" + t.group_key, "group_key": t.group_key, "job": t.job, "baseline": "",
               "challengers": json.dumps([t.route]), "data": json.dumps({"baseline": "", "challengers": [t.route],
                                                                  "slots": [["", 1.0], [t.route, 0.9]]}),
               "created_at": "2025-01-01T00:00:00Z", "host": "h", "tool_version": "0"}
        with cache.conn:
            cache.conn.execute(f"INSERT OR REPLACE INTO remeasurements ({', '.join(row)}) "
                               f"VALUES ({', '.join('?' * len(row))})", list(row.values()))
    out = tmp_path / "r.tar.gz"
    assert runner.invoke(app, ["cache", "export", str(out), "-m", str(a / "tuning.yaml")]).exit_code == 0
    assert row in read_bundle(out).remeasurements
    c = fresh_clone(a / "tuning.yaml", tmp_path / "c")
    assert import_bundle(machine(c), out).remeasurements >= 1
    assert import_bundle(machine(c), out).remeasurements == 0  # idempotent
    with machine(c).open_cache() as cache:
        got = cache.conn.execute("SELECT data FROM remeasurements WHERE key = ?", [row["key"]]).fetchone()
    assert got is not None and json.loads(got[0])["challengers"] == [t.route]
    # so do the states of the searches (warm starts, budget spent): a machine that imports plans the same search
    assert searches and all(s[4] != "running" for s in searches)
    with machine(c).open_cache() as cache:
        assert [tuple(r) for r in cache.conn.execute("SELECT * FROM searches ORDER BY group_key")] == searches
    assert import_bundle(machine(c), out).searches == 0  # idempotent
    bad = _write(tmp_path / "bad-search.tar.gz", _rehash(_members(out), "searches.jsonl", b'{"group_key": 1}\n'))
    with pytest.raises(BundleError, match="search row"):
        read_bundle(bad)
    bad = _write(tmp_path / "bad.tar.gz", _rehash(_members(out), "remeasurements.jsonl", b'{"key": 1}\n'))
    with pytest.raises(BundleError, match="re-measurement row"):
        read_bundle(bad)


def test_imported_free_text_is_sanitized_and_local_trials_stand(tuned: Path, exported: Path, tmp_path: Path) -> None:
    """A bundle whose rows carry escape sequences in their error and log is imported with them stripped;
    rows that claim a local trial's id (the default route 'crashed', dated 1999) leave it and the lock
    alone."""
    from trt_routes.text import sanitize

    c = copy_project(tuned, tmp_path / "c")
    lock_before = (tmp_path / "c" / "tuning.lock").read_bytes()
    local = {t.id: t for t in machine(c).open_cache().all_trials()}
    default = next(t for t in local.values() if t.route == "")

    rows = [json.loads(line) for line in _trials(_members(exported)).splitlines()]
    for row in rows:
        if row["id"] == default.id:
            row.update(status="crashed", error="\x1b[2J\x1b]0;owned\x07boom\x9b1m", median_ms=None, ci_low=None,
                       ci_high=None, mean_ms=None, samples=[], created_at="1999-01-01T00:00:00Z",
                       log="ok\x1b[31m red\x1b[0m")
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    bad = _write(tmp_path / "forged.tar.gz", _rehash(_members(exported), "trials.jsonl", data))
    report = import_bundle(machine(c), bad)
    assert report.kept == 1 and report.replaced == 0 and report.added == 0
    with machine(c).open_cache() as cache:
        assert cache.get(default.id) == default  # ours stands
    assert (tmp_path / "c" / "tuning.lock").read_bytes() == lock_before
    fresh = fresh_clone(tuned, tmp_path / "f")
    import_bundle(machine(fresh), bad)
    with machine(fresh).open_cache() as cache:
        got = cache.get(default.id)
    assert got is not None and got.error == "boom" and got.log == "ok red" and "\x1b" not in got.error
    assert sanitize("a\x1b[1mb\x07c\u202ed") == "abcd"
