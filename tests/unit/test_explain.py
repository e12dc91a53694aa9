"""explain: the decision in words with its margin and interval, every loser's reason, provenance and
lock history. Trials are written into a real SQLite cache of a real project, as an import would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _project import make_project
from _trials import BASIC, JOB, NCHWC, THREADS1, THREADS2, put, record
from typer.testing import CliRunner

from trt_routes.audit.explain import explain, margin
from trt_routes.cli.app import app
from trt_routes.jobs import Job
from trt_routes.lockfile import Lockfile
from trt_routes.project import Project, open_project


@pytest.fixture
def project(tmp_path: Path, tiny_models: dict[str, Path]) -> Project:
    return open_project(make_project(tmp_path / "p", tiny_models))


def the_job(project: Project) -> Job:
    return next(j for j in project.jobs if j.name == JOB)


def test_winner_margin_losers_provenance_and_history(project: Project) -> None:
    job = the_job(project)
    assert job.signature is not None
    put(project,
        record(job, "", center=2.0),
        record(job, THREADS1, center=1.0, source="trtexec:tune.jsonl", created_at="2026-01-02T04:00:00Z"),
        record(job, BASIC, center=0.5, losses={"logits": {"cos": 0.25, "lInf": 1e-6}}),
        record(job, THREADS2, "crashed", error="worker died with signal SIGSEGV"),
        record(job, NCHWC, "timeout", error="no result within the 60 s time limit"),
        fields=job.signature.fields)
    old_fields = {**job.signature.fields, "backend_version": "1.0.0"}
    put(project, record(job, "", center=3.0, group_key="oldgroup", signature="oldsig",
                        created_at="2025-12-01T00:00:00Z"), fields=old_fields)
    with project.open_cache() as cache:
        cache.add_decision(JOB, THREADS2, None, "first lock", "a" * 64)
        cache.add_decision(JOB, THREADS1, THREADS2, f"winner changed from {THREADS2}", "b" * 64)

    ex = explain(project, JOB)
    assert ex.selection is not None and ex.selection.winner == THREADS1
    assert ex.margin is not None and ex.margin.ratio == pytest.approx(2.0, rel=0.05)
    assert 1.0 < ex.margin.low < ex.margin.ratio < ex.margin.high < 2.5 and ex.margin.certain
    assert "bootstrap of 40+40 samples" in ex.margin.method
    assert ex.decision[0].startswith(f"{THREADS1} chosen")
    assert any(line.startswith("Margin over the default: 2.0") and "95% CI" in line for line in ex.decision)
    reasons = {t.route: ex.verdict(t.route) for t in ex.trials}
    assert reasons[BASIC] == "failed accuracy gate: logits: cos 0.25 >= 0.0001"
    assert reasons[THREADS2] == "crashed: worker died with signal SIGSEGV"
    assert reasons[NCHWC] == "timed out: no result within the 60 s time limit"
    assert reasons[""].startswith("slower: ") and "vs winner" in reasons[""]
    prov = ex.provenance
    assert prov["signature_hash"] == job.signature.hash and prov["signature"]["backend"] == "onnxruntime"
    assert prov["sources"] == {"local": 4, "trtexec:tune.jsonl": 1} and prov["hosts"] == {"box-a": 5}
    assert prov["measured"] == {"first": "2026-01-02T03:04:05Z", "last": "2026-01-02T04:00:00Z"}
    assert prov["winner_trial"]["source"] == "trtexec:tune.jsonl"
    (older,) = ex.older
    assert older["trials"] == 1 and any("backend_version 1.0.0 -> " in c for c in older["changed"])
    assert [d["route"] for d in ex.decisions] == [THREADS2, THREADS1]

    data = ex.to_json()
    json.dumps(data)
    assert data["margin"]["ratio"] == pytest.approx(2.0, rel=0.05) and len(data["margin"]["ci"]) == 2

    result = CliRunner().invoke(app, ["explain", JOB, "-m", str(project.loaded.path)])
    out = result.output
    assert result.exit_code == 0, out
    for text in ("Decision", "Margin over the default: 2.0", "Rule: eligible", "Tolerance 't': cos < 0.0001",
                 "failed accuracy", "SIGSEGV", "timed out",
                 "imported from trtexec:tune.jsonl (1)", "measured here (4)", "no longer apply: stale: "
                 "backend_version 1.0.0 ->", "no lock entry yet",
                 f"(winner changed from {THREADS2}; engine bbbbbbbbbbbb)", "History"):
        assert text in out, text


def test_why_the_default_stayed(project: Project) -> None:
    job = the_job(project)
    put(project,
        record(job, "", center=1.0),
        record(job, THREADS1, center=1.3),
        record(job, BASIC, center=0.6, losses={"logits": {"cos": 1e-9, "lInf": 0.5}}),
        record(job, THREADS2, "build-error", error="bad route"))
    ex = explain(project, JOB)
    assert ex.selection is not None and ex.selection.winner == ""
    assert ex.margin is None
    text = "\n".join(ex.decision)
    assert ex.decision[0].startswith("default route kept")
    assert f"the fastest eligible challenger in the search, {THREADS1}, is 0.7" in text
    assert "as fast as the default" in text
    assert "2 route(s) faster than the default or without a timing were not eligible" in text
    assert f"{BASIC} (failed accuracy gate: logits: lInf 0.5 >= 0.01)" in text
    assert f"{THREADS2} (build error: bad route)" in text


def test_margin_without_samples_uses_the_stored_intervals(project: Project) -> None:
    job = the_job(project)
    default = record(job, "", center=2.0, keep_samples=False)
    other = record(job, THREADS1, center=1.0, keep_samples=False)
    mg = margin(default, other)
    assert mg is not None and mg.method == "bounds from the stored intervals"
    assert mg.low == pytest.approx(default.ci_low / other.ci_high)  # type: ignore[operator]
    assert mg.high == pytest.approx(default.ci_high / other.ci_low)  # type: ignore[operator]
    assert margin(default, record(job, THREADS2, "crashed")) is None


def test_a_gain_within_noise_is_called_so_and_a_stale_lock_is_named(project: Project) -> None:
    job = the_job(project)
    put(project, record(job, "", center=1.0, spread=0.1), record(job, THREADS1, center=0.99, spread=0.1))
    lock = project.read_lock()
    lock.jobs[JOB] = {"route": THREADS2, "engine": {"path": "engines/x.onnx", "sha256": "c" * 64}}
    lock.write()
    assert Lockfile.read(project.lock_path).jobs[JOB]["route"] == THREADS2
    ex = explain(project, JOB)
    assert ex.margin is not None and not ex.margin.certain
    assert "The interval includes 1.0x: this gain is within the measured noise." in ex.decision
    assert any(line.startswith(f"The lock holds {THREADS2}, but the trials now select {THREADS1}")
               for line in ex.decision)


def test_explain_without_trials_points_at_older_groups(project: Project) -> None:
    job = the_job(project)
    assert job.signature is not None
    put(project, record(job, "", center=1.0, group_key="g0", signature="s0"),
        fields={**job.signature.fields, "cpu_count": "64"})
    ex = explain(project, JOB)
    assert ex.selection is None and ex.other_groups == 1
    assert any(c.startswith("stale: cpu_count 64 -> ") for c in ex.older[0]["changed"])
    result = CliRunner().invoke(app, ["explain", JOB, "-m", str(project.loaded.path)])
    assert result.exit_code == 0 and "1 older group(s) of trials exist" in result.output
    assert "stale: cpu_count 64 ->" in result.output


def test_explain_renders_the_decision_apply_stored_and_says_when_the_trials_changed_since(
        tuned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Decisions are values (issue 34.3): apply stores each job's decision; explain renders it without deriving
    one from the trials (the derivation is made to fail here), until the trials change: then it shows what they
    select now and says so. A cache without a stored decision (pulled trials, an older cache) is derived."""
    import shutil

    from trt_routes.plan import decision as decisions

    shutil.copytree(tuned.parent, tmp_path / "p")
    project = open_project(tmp_path / "p" / "tuning.yaml")
    job = the_job(project)
    lock = Lockfile.read(tmp_path / "p" / "tuning.lock").jobs[job.name]

    def no_derivation(*args: object) -> None:
        raise AssertionError("explain derived a decision apply had stored")

    with monkeypatch.context() as m:
        m.setattr(decisions, "derive", no_derivation)
        ex = explain(project, job.name)
    assert ex.decided["by"] == "apply" and ex.decided["at"]
    assert ex.selection is not None and ex.selection.winner == lock.route
    assert ex.to_json()["decided"] == ex.decided and not any(line.startswith("Note:") for line in ex.decision)
    stored = ex.selection

    assert job.signature is not None  # a route measured again since (a teammate's push, --retry-failed)
    loser = next(v.route for v in stored.verdicts if v.route not in ("", stored.winner))
    put(project, record(job, loser, center=1e6, created_at="2026-12-04T00:00:00Z"), fields=job.signature.fields)
    ex = explain(project, job.name)
    assert ex.decided["by"] == "trials" and "changed since apply decided" in ex.decided["note"]
    assert any("changed since apply decided" in line for line in ex.decision)
    assert ex.selection is not None and ex.selection.verdict(loser) != stored.verdict(loser)

    with project.open_cache() as cache, cache.conn:  # none stored (a cache from before decision records)
        cache.conn.execute("DELETE FROM decision_records")
    ex = explain(project, job.name)
    assert ex.decided == {"by": "trials", "at": None} and ex.selection is not None


def test_nearest_lines_need_a_winner_of_two_changes_or_more() -> None:
    from trt_routes.audit.explain import nearest_lines
    from trt_routes.cache.store import TrialRecord

    def trial(route: str, ms: float) -> TrialRecord:
        return TrialRecord(id=route or "d", group_key="g", job="j", route=route, signature="s", model_digest="m",
                           shape_key="x", settings_key="y", protocol_key="p", reference_key="r", backend="b",
                           status="ok", median_ms=ms)

    one = {t.route: t for t in (trial("", 2.0), trial("-a=1", 1.0), trial("-b=1", 1.5))}
    assert nearest_lines(one, "-a=1") == [] and nearest_lines(one, "") == [] and nearest_lines(one, None) == []
    many = {t.route: t for t in (trial("", 2.0), *(trial(f"-a=1 -b=1 -c{i}=1", 1.0 + i / 100) for i in range(9)))}
    lines = nearest_lines(many, "-a=1 -b=1 -c0=1", shown=3)
    assert len(lines) == 4 and "5 more in the trials" in lines[0]
    assert lines[1] == "  without -c0=1, with -c8=1: 1.080x the winner's time"  # costliest of the nearest first
