"""Settled plans (trt_routes.plan.settled): a no-op plan takes what apply derived for the same inputs, and any
change to those inputs (a trial, a re-measurement or the search state of the job's group, written by
anyone; the lock entry; the manifest; trt-routes' code) makes the plan derive everything again. Each case
compares the plan with the one derived in full (``TRT_ROUTES_SETTLED=off``): they must be the same."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from _project import cli, copy_project, edit_manifest, make_project
from rich.console import Console

from trt_routes.plan import settled as settled_module
from trt_routes.plan.diff import JobPlan, Plan
from trt_routes.project import open_project
from trt_routes.report.console import FOLD_UP_TO_DATE, folded, render_plan, summary_table
from trt_routes.tune.apply import apply, compute_plan
from trt_routes.tune.outcome import ApplyResult, JobOutcome

GROUP = "-graph_optimization_level=[basic|all] -intra_op_num_threads=[1|2] -disable:NchwcTransformer=[off|on]"


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]) -> Path:
    """An adaptive project (side-by-side confirmation on) of two models, three jobs, applied once."""
    manifest = make_project(tmp_path_factory.mktemp("settled"), tiny_models, group=GROUP, mode="adaptive",
                            both_models=True)
    result = apply(open_project(manifest))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    return manifest


def _plan(manifest: Path, monkeypatch: pytest.MonkeyPatch, *, full: bool) -> Plan:
    with monkeypatch.context() as m:
        if full:
            m.setenv(settled_module.OFF_VAR, "off")
        project = open_project(manifest)
        lock = project.read_lock()
        with project.read_cache() as cache:
            return compute_plan(project, cache, lock)


def _both(manifest: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Plan, Plan]:
    """(the plan as a user gets it, the plan derived in full); asserts they say the same."""
    fast, full = _plan(manifest, monkeypatch, full=False), _plan(manifest, monkeypatch, full=True)
    assert fast.to_json() == full.to_json()
    assert not any(jp.from_settled for jp in full.jobs)
    return fast, full


def _db(manifest: Path) -> sqlite3.Connection:
    return sqlite3.connect(open_project(manifest).cache_path)


def _settled_rows(manifest: Path) -> int:
    with _db(manifest) as conn:
        return int(conn.execute("SELECT count(*) FROM settled").fetchone()[0])


def _copy(adaptive: Path, tmp_path: Path) -> Path:
    return copy_project(adaptive, tmp_path / "p")


def test_apply_settles_every_job_and_a_noop_plan_takes_them(adaptive: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _copy(adaptive, tmp_path)
    jobs = open_project(manifest).jobs
    assert _settled_rows(manifest) == len(jobs) == 3
    fast, _ = _both(manifest, monkeypatch)
    assert [jp.action for jp in fast.jobs] == ["up-to-date"] * 3
    assert all(jp.from_settled for jp in fast.jobs)
    # a no-op apply stores nothing again and changes nothing
    with _db(manifest) as conn:
        before = conn.execute("SELECT fingerprint, at FROM settled ORDER BY fingerprint").fetchall()
    code, out = cli("apply", "-m", str(manifest))
    assert code == 0 and "nothing was built" in out, out
    with _db(manifest) as conn:
        assert conn.execute("SELECT fingerprint, at FROM settled ORDER BY fingerprint").fetchall() == before


def _winner(manifest: Path) -> tuple[str, str]:
    """(job name, trial id) of the first job's locked trial."""
    lock = open_project(manifest).read_lock()
    name = sorted(lock.jobs)[0]
    trial = lock.jobs[name].trial
    assert trial
    return name, trial


def _insert_faster_copy(conn: sqlite3.Connection, trial: str) -> None:
    """A trial of a route the search never built, twice as fast as the winner (a teammate's pull, say)."""
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("SELECT * FROM trials WHERE id = ?", [trial]).fetchone())
    row.update(id=trial + "-pulled", route="-graph_optimization_level=basic -intra_op_num_threads=2",
               median_ms=row["median_ms"] / 2, ci_low=row["median_ms"] / 2.1, ci_high=row["median_ms"] / 1.9)
    conn.execute(f"INSERT INTO trials ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def _group_of(conn: sqlite3.Connection, trial: str) -> str:
    return str(conn.execute("SELECT group_key FROM trials WHERE id = ?", [trial]).fetchone()[0])


MUTATIONS: dict[str, Callable[[sqlite3.Connection, str], Any]] = {
    "a trial added": _insert_faster_copy,
    "the winner's trial deleted": lambda c, t: c.execute("DELETE FROM trials WHERE id = ?", [t]),
    "the winner's median changed in place": lambda c, t: c.execute(
        "UPDATE trials SET median_ms = median_ms * 10 WHERE id = ?", [t]),
    "a re-measurement added": lambda c, t: c.execute(  # a pull's, say (whether this apply confirmed varies)
        "INSERT INTO remeasurements (key, group_key, job, baseline, challengers, data) VALUES (?, ?, ?, '', '[]', "
        "'{}')", ["pulled-" + t, _group_of(c, t), "another/job/cpu"]),
    "the search state changed": lambda c, t: c.execute(
        "UPDATE searches SET builds = builds + 100 WHERE group_key = ?", [_group_of(c, t)]),
}


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_any_change_to_the_group_written_by_anyone_unsettles_its_job(
        what: str, adaptive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The changes are made with the sqlite3 module, not through trt-routes: the schema's triggers count them."""
    manifest = _copy(adaptive, tmp_path)
    name, trial = _winner(manifest)
    with _db(manifest) as conn:
        changed = MUTATIONS[what](conn, trial)
        assert changed is None or changed.rowcount > 0, f"{what}: nothing to change in this project"
    fast, _ = _both(manifest, monkeypatch)
    by_name = {jp.job.name: jp for jp in fast.jobs}
    assert not by_name[name].from_settled
    assert all(jp.from_settled for jp in fast.jobs if jp.job.name != name)  # other groups stay settled


def test_a_candidate_made_faster_in_place_is_seen(adaptive: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Another of the job's candidate routes, rewritten to twice the winner's speed past trt-routes: the plan
    no longer says up to date (the search or the selection must look again)."""
    manifest = _copy(adaptive, tmp_path)
    name, trial = _winner(manifest)
    before, _ = _both(manifest, monkeypatch)
    jp = next(jp for jp in before.jobs if jp.job.name == name)
    with _db(manifest) as conn:
        group, route, median = conn.execute("SELECT group_key, route, median_ms FROM trials WHERE id = ?",
                                            [trial]).fetchone()
        other = next(r for r in jp.candidates if r != route)
        changed = conn.execute("UPDATE trials SET median_ms = ?, ci_low = ?, ci_high = ? WHERE group_key = ? "
                               "AND route = ? AND status = 'ok'", [median / 2, median / 2.1, median / 1.9, group,
                                                                   other])
        assert changed.rowcount == 1, other
    after, _ = _both(manifest, monkeypatch)
    jp = next(jp for jp in after.jobs if jp.job.name == name)
    assert jp.action in ("reselect", "tune") and not jp.from_settled, jp.reasons


def test_an_edited_lock_entry_manifest_or_code_unsettles(adaptive: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _copy(adaptive, tmp_path)
    lock_path = manifest.parent / "tuning.lock"
    name, _ = _winner(manifest)
    data = yaml.safe_load(lock_path.read_text())
    # a route other than the locked one, whichever route this apply's noise picked
    locked = data["jobs"][name]["route"]
    data["jobs"][name]["route"] = next(r for r in ("-intra_op_num_threads=1", "-graph_optimization_level=basic")
                                       if r != locked)
    lock_path.write_text(yaml.safe_dump(data, sort_keys=False))
    fast, _ = _both(manifest, monkeypatch)
    assert {jp.job.name for jp in fast.jobs if not jp.from_settled} == {name}
    assert next(jp for jp in fast.jobs if jp.job.name == name).action == "reselect"

    shutil.copy(adaptive.parent / "tuning.lock", lock_path)
    edit_manifest(manifest, lambda d: d["strategies"]["s"].__setitem__("min_gain", 0.2))
    fast, _ = _both(manifest, monkeypatch)
    assert not any(jp.from_settled for jp in fast.jobs)

    shutil.copy(adaptive, manifest)
    assert all(jp.from_settled for jp in _both(manifest, monkeypatch)[0].jobs)
    monkeypatch.setattr(settled_module, "code_identity", lambda: "another trt-routes")
    assert not any(jp.from_settled for jp in _both(manifest, monkeypatch)[0].jobs)


def test_a_settled_job_still_has_its_engine_checked(adaptive: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _copy(adaptive, tmp_path)
    lock = open_project(manifest).read_lock()
    name = sorted(lock.jobs)[0]
    engine = lock.jobs[name].engine
    assert engine is not None and engine.path
    (manifest.parent / engine.path).unlink()
    fast, _ = _both(manifest, monkeypatch)
    jp = next(jp for jp in fast.jobs if jp.job.name == name)
    assert jp.from_settled and jp.action == "materialize"
    code, out = cli("apply", "-m", str(manifest))
    assert code == 0, out
    assert (manifest.parent / engine.path).is_file()


def test_the_cli_plan_is_the_same_either_way(adaptive: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _copy(adaptive, tmp_path)
    code, fast = cli("plan", "--json", "-m", str(manifest))
    monkeypatch.setenv(settled_module.OFF_VAR, "off")
    code_full, full = cli("plan", "--json", "-m", str(manifest))
    assert code == code_full == 0
    assert json.loads(fast) == json.loads(full)


def test_recover_and_an_off_switch_store_nothing(adaptive: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`cache recover` salvages facts, not what was derived from them; with the shortcut off apply stores none."""
    manifest = _copy(adaptive, tmp_path)
    code, out = cli("cache", "recover", "-m", str(manifest))
    assert code == 0, out
    assert _settled_rows(manifest) == 0
    with _db(manifest) as conn:
        assert conn.execute("SELECT count(*) FROM group_state").fetchone()[0] > 0  # counted as rows came in
    assert not any(jp.from_settled for jp in _both(manifest, monkeypatch)[0].jobs)
    monkeypatch.setenv(settled_module.OFF_VAR, "off")
    assert cli("apply", "-m", str(manifest))[0] == 0
    assert _settled_rows(manifest) == 0


@pytest.mark.parametrize("fresh", [FOLD_UP_TO_DATE, FOLD_UP_TO_DATE + 1])
def test_plan_and_summary_tables_fold_many_up_to_date_jobs_into_one_row(fresh: int, adaptive: Path) -> None:
    """Up to FOLD_UP_TO_DATE up-to-date jobs get a row each; more are one row. Jobs with work always get theirs."""
    job = open_project(adaptive).jobs[0]
    jobs = [dataclasses.replace(job, name=f"m/s{i}/cpu") for i in range(fresh + 1)]
    plan = Plan([JobPlan(j, "up-to-date", ("up to date",), reused=2) for j in jobs[:-1]]
                + [JobPlan(jobs[-1], "tune", ("new job: never tuned",), ("-a=1",))])
    out = io.StringIO()
    render_plan(plan, Console(file=out, width=200))
    text = out.getvalue()
    folds = fresh > FOLD_UP_TO_DATE
    assert jobs[-1].name in text and ("m/s0/cpu" in text) is not folds
    assert (folded(fresh) in text) is folds
    result = ApplyResult(plan=plan, outcomes=[JobOutcome(job=j, action="up-to-date") for j in jobs[:-1]]
                         + [JobOutcome(job=jobs[-1], action="tune", error="boom")])
    table = summary_table(result)
    assert table.row_count == (2 if folds else fresh + 1)
