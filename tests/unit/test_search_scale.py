"""Plans that always answer (issue 30): no strategy materializes a huge product; ``full`` without a budget over
a huge group is refused when the manifest is read, with the route count; ``plan`` on a 200-knob group of
every mode answers (listing a bounded batch)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from trt_routes.catalog import Catalog, Knob
from trt_routes.routes import parse_expression
from trt_routes.search import Outcome, make_search
from trt_routes.search.strategies import CHUNK, FullSearch, MixedSearch

N = 60
CATALOG = Catalog(backend="test", version="1",
                  knobs=tuple(Knob(f"-k{i:02d}", ("0", "1", "2"), "0") for i in range(N)))
EXPR = parse_expression(" ".join(f"-k{i:02d}=[0|1|2]" for i in range(N)), CATALOG)


def test_full_over_a_huge_group_is_walked_lazily_in_product_order() -> None:
    search = make_search("full", EXPR, CATALOG)
    assert isinstance(search, FullSearch) and not search.static and search.size == 3 ** N
    first = search.next_batch({})
    assert len(first) == CHUNK and first[0] == "" and first[1] == f"-k{N - 1:02d}=1"  # last knob fastest
    known = {r: Outcome(ok=True, median_ms=1.0) for r in first[:10]}
    again = search.candidates(known)
    assert again[:10] == first[:10] and len(again) == CHUNK + 10
    assert search.next_batch(known) == [r for r in again if r not in known]


def test_mixed_phase_2_over_many_positive_knobs_is_bounded() -> None:
    search = make_search("mixed", EXPR, CATALOG, budget=100)
    assert isinstance(search, MixedSearch)
    phase1 = search.next_batch({})
    assert len(phase1) == 1 + 2 * N
    # every one-knob route beats the default: phase 2 is the product over all N knobs (3^60 routes)
    known = {r: Outcome(ok=True, median_ms=1.0 if r == "" else 0.9) for r in phase1}
    batch = search.next_batch(known)
    assert 0 < len(batch) <= CHUNK and not set(batch) & set(known) and search.note(known) is None
    # without a budget it would never end: left out, and said so
    unbounded = make_search("mixed", EXPR, CATALOG)
    assert unbounded.next_batch(known) == [] and "left out" in (unbounded.note(known) or "")


def _project(tmp_path: Path, strategy: dict[str, object], knobs: int = 200) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from make_trt_landscapes import make

    land = tmp_path / "trt.json"
    land.write_text(json.dumps(make(3, knobs)))
    group = " ".join(f"{k['option']}=[{'|'.join(k['values'])}]" for k in json.loads(land.read_text())["knobs"])
    (tmp_path / "tuning.yaml").write_text(
        "schema_version: 1\n"
        f"switch_groups: {{g: \"{group}\"}}\n"
        f"strategies: {{s: {json.dumps(strategy)}}}\n"
        "tolerances: {t: {checks: [{metric: cos, threshold: 1.0e-4}]}}\n"
        "defaults: {backend: replay, switch_group: g, strategy: s, tolerance: t}\n"
        f"models: {{m: {{path: {land}, shapes: {{a: {{x: [1]}}}}}}}}\n")
    return land


def test_full_without_budget_over_200_knobs_is_refused_at_validate_with_the_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from _project import cli

    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(_project(tmp_path, {"mode": "full"})))
    code, out = cli("validate", "-m", str(tmp_path / "tuning.yaml"))
    assert code != 0 and "tuning.yaml:3" in out and "mode full" in out and "e+" in out and "max_builds" in out
    assert "Traceback" not in out


def test_a_1000_knob_group_s_counts_are_written_short_and_full_without_budget_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 knobs: the product has ~400 digits, more than a float holds. ``full`` is refused with the count
    (it raised OverflowError, a traceback, before), and ``mixed``'s plan bounds its builds in a few characters."""
    from _project import cli, edit_manifest

    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(_project(tmp_path, {"mode": "full"}, knobs=1000)))
    code, out = cli("plan", "-m", str(tmp_path / "tuning.yaml"))
    assert code != 0 and "Traceback" not in out and "tuning.yaml:3" in out
    assert re.search(r"every one of \d\.\d\de\+\d{3} routes", out), out[:2000]
    edit_manifest(tmp_path / "tuning.yaml", lambda m: m["strategies"]["s"].update(mode="mixed"))
    code, out = cli("plan", "-m", str(tmp_path / "tuning.yaml"))
    assert code == 0 and re.search(r"at most \d\.\d\de\+\d{3} in all\.", out), out[-2000:]
    assert not re.search(r"\d{12}", out)  # no number spelled out in hundreds of digits


@pytest.mark.parametrize("strategy", [{"mode": "fast"}, {"mode": "mixed"}, {"mode": "adaptive"},
                                      {"mode": "full", "max_builds": 50}])
def test_plan_on_a_200_knob_group_answers_in_every_mode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategy: dict[str, object]) -> None:
    from _project import cli

    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(_project(tmp_path, strategy)))
    code, out = cli("plan", "--json", "-m", str(tmp_path / "tuning.yaml"))
    assert "Traceback" not in out
    doc = json.loads(out)
    assert doc and code in (0, 2), out[:2000]


def test_values_that_failed_for_a_related_job_are_screened_last_and_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shape a tuned under a budget leaves failed trials in the cache; shape b's search (same model) reads them:
    the values that failed there and never in a successful trial go after every other value, and plan and
    explain say so. The failed values are frozen with the search, so plan and apply agree."""
    from _project import cli, edit_manifest

    from trt_routes.project import open_project
    from trt_routes.routes import route_dict
    from trt_routes.search.job import job_search
    from trt_routes.search.priors import failed_values
    from trt_routes.tune.apply import apply

    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(_project(tmp_path, {"mode": "adaptive", "max_builds": 24})))
    manifest = tmp_path / "tuning.yaml"
    assert apply(open_project(manifest)).exit_code == 0
    project = open_project(manifest)
    with project.open_cache() as cache:
        trials = cache.trials_for_job("m/a/cpu")
    failed = failed_values(trials)
    assert failed  # 3% crashing and 3% gate-failing values: some groups failed
    # a route whose outputs are NaN was built and runs: it is timed, and its values count as failed unless a
    # successful trial holds them
    gate = [t for t in trials if t.status == "accuracy-failed"]
    assert gate and all(t.median_ms is not None and t.ci_low is not None for t in gate)
    cleared = {f"{o}={v}" for t in trials if t.status == "ok" for o, v in route_dict(t.route).items()}
    assert {f"{o}={v}" for t in gate for o, v in route_dict(t.route).items()} - cleared <= set(failed)
    edit_manifest(manifest, lambda d: d["models"]["m"].update(shapes={"a": {"x": [1]}, "b": {"x": [2]}}))
    code, out = cli("plan", "-m", str(manifest))
    assert code in (0, 2) and f"{len(failed)} value(s) that failed for related jobs screened last" in out, out
    project = open_project(manifest)
    job = next(j for j in project.jobs if j.name == "m/b/cpu")
    with project.open_cache() as cache:
        search = job_search(job, cache, set())
    assert set(search.avoid) == set(failed)
    from trt_routes.search import Outcome

    known = {r: Outcome(True, 1.0, 0.99, 1.01) for r in search.next_batch({})}
    holds = [any(f"{o}={v}" in failed for o, v in route_dict(r).items()) for r in search.inner.next_batch(known)]
    assert False in holds and True in holds and holds == sorted(holds)  # every route without a failed value first


def test_failed_values_travel_with_the_search_state_in_a_bundle(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A search that screens failed values last records them with its state; a bundle carries that state and
    the importing cache reads the same values back (its plan then proposes the same routes)."""
    from _project import edit_manifest

    from trt_routes.cache import side_tables
    from trt_routes.project import open_project
    from trt_routes.share.merge import export_bundle, import_bundle
    from trt_routes.tune.apply import apply

    land = _project(tmp_path, {"mode": "adaptive", "max_builds": 24})
    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(land))
    manifest = tmp_path / "tuning.yaml"
    assert apply(open_project(manifest)).exit_code == 0
    edit_manifest(manifest, lambda d: d["models"]["m"].update(shapes={"a": {"x": [1]}, "b": {"x": [2]}}))
    assert apply(open_project(manifest)).exit_code == 0
    with open_project(manifest).open_cache() as cache:
        rows = [r for r in cache.query("SELECT group_key, strategy_key FROM searches")]
        states = [side_tables.search_state(cache, r["group_key"], r["strategy_key"]) for r in rows]
    avoided = [s for s in states if s and s["avoid"]]
    assert avoided  # shape b's search screened shape a's failed values last
    export_bundle(open_project(manifest), tmp_path / "b.tar.gz")
    other = tmp_path / "other"
    other.mkdir()
    (other / "tuning.yaml").write_text(manifest.read_text())
    report = import_bundle(open_project(other / "tuning.yaml"), tmp_path / "b.tar.gz")
    assert report.searches >= 1
    with open_project(other / "tuning.yaml").open_cache() as cache:
        got = side_tables.search_state(cache, avoided[0]["group_key"], avoided[0]["strategy_key"])
    assert got is not None and got["avoid"] == avoided[0]["avoid"] and got["warm"] == avoided[0]["warm"]


def test_a_wrong_landscape_file_is_the_manifest_s_error_with_its_line_not_a_missing_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A landscape that is there but wrong (a bad field, no profile for a shape, another file than the one
    ``$TRT_ROUTES_LANDSCAPE`` names) fails validate at the model's ``path`` line (exit 2); before, the job read as
    "cannot run here" (validate ok, apply exit 3 with an install hint), and a missing profile passed validate and
    spent apply's whole budget on build errors. Unset, the backend cannot run here, as before."""
    from _project import cli, edit_manifest

    land = _project(tmp_path, {"mode": "adaptive", "max_builds": 8}, knobs=30)
    manifest = tmp_path / "tuning.yaml"
    data = json.loads(land.read_text())
    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(land))
    assert cli("validate", "-m", str(manifest))[0] == 0

    bad = tmp_path / "bad.json"  # a file of its own: a process reads each landscape once
    bad.write_text(json.dumps({**data, "profiles": {"a": {**data["profiles"]["a"], "base_ms": -2.0}}}))
    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(bad))
    edit_manifest(manifest, lambda m: m["models"]["m"].update(path=str(bad)))
    code, out = cli("validate", "-m", str(manifest))
    assert code == 2 and re.search(r"tuning.yaml:\d+:\d+", out), out
    assert "profiles.a.base_ms" in out and "install" not in out, out

    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(land))
    edit_manifest(manifest, lambda m: m["models"]["m"].update(path=str(land)))
    edit_manifest(manifest, lambda m: m["models"]["m"]["shapes"].update(c={"x": [2]}))
    code, out = cli("validate", "-m", str(manifest))
    assert code == 2 and "no profile named 'c'" in out and "Traceback" not in out, out

    edit_manifest(manifest, lambda m: m["models"]["m"]["shapes"].pop("c"))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**data, "profiles": {"a": {**data["profiles"]["a"], "base_ms": 3.0}}}))
    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(other))
    code, out = cli("validate", "-m", str(manifest))
    assert code == 2 and "is not the landscape TRT_ROUTES_LANDSCAPE names" in out, out

    monkeypatch.delenv("TRT_ROUTES_LANDSCAPE")
    code, out = cli("plan", "-m", str(manifest))
    assert code == 0 and "blocked" in out and "TRT_ROUTES_LANDSCAPE" in out, out
    assert "Nothing to do here." in out and "every other job" not in out  # there is no other job


def test_a_search_taking_priors_starts_after_the_related_job_this_apply_decides_and_plan_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shapes a and b of one model tuned in one apply on two workers: b's search takes a's winner as a prior,
    whichever worker is free first. Before, b started beside a (a free worker), cold, while plan had said
    nothing of a; on one worker it ran after a and was warm: the priors depended on the scheduling."""
    from _project import cli, edit_manifest

    from trt_routes.cache import side_tables
    from trt_routes.project import open_project
    from trt_routes.search.job import strategy_key
    from trt_routes.tune.apply import apply

    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(_project(tmp_path, {"mode": "adaptive", "max_builds": 24})))
    manifest = tmp_path / "tuning.yaml"
    edit_manifest(manifest, lambda m: (m["models"]["m"]["shapes"].update(b={"x": [2]}),
                                       m.update(execution={"workers": 2})))
    code, out = cli("plan", "--json", "-m", str(manifest))
    assert code == 0, out
    reasons = {j["job"]: " ".join(j["reasons"]) for j in json.loads(out)["jobs"]}
    assert "starts after m/a/cpu, decided earlier in this apply" in reasons["m/b/cpu"], reasons
    assert "starts after" not in reasons["m/a/cpu"]

    assert apply(open_project(manifest)).exit_code == 0
    project = open_project(manifest)
    won = project.read_lock().jobs["m/a/cpu"].route
    assert won  # not the default route: there is a prior to take
    job_b = next(j for j in project.jobs if j.name == "m/b/cpu")
    with project.open_cache() as cache:
        row = side_tables.search_state(cache, job_b.group_key, strategy_key(job_b))
    assert row is not None and won in row["warm"], (won, row)


def test_mixed_without_a_budget_leaves_out_a_phase_2_that_would_never_end_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """60 knobs: noise makes dozens of one-knob routes beat the default, so phase 2's product is past a billion
    routes. Without a budget apply walked it for ever (1,487 builds in 60 s on 200 knobs, and counting); now it
    ends after the scan, and explain says why. With ``max_builds`` phase 2 is walked, in trtexec's order, up to
    the budget."""
    from _project import cli, edit_manifest

    from trt_routes.project import open_project
    from trt_routes.tune.apply import apply

    land = _project(tmp_path, {"mode": "mixed"}, knobs=60)
    monkeypatch.setenv("TRT_ROUTES_LANDSCAPE", str(land))
    manifest = tmp_path / "tuning.yaml"
    scan = 1 + sum(len(k["values"]) - 1 for k in json.loads(land.read_text())["knobs"])  # default + one-knob
    result = apply(open_project(manifest))
    assert result.exit_code == 0 and result.built == scan, (result.built, scan)
    code, out = cli("explain", "m/a/cpu", "-m", str(manifest))
    assert code == 0 and "Phase 2 of mode mixed was left out" in " ".join(out.split()), out
    assert cli("plan", "--check", "-m", str(manifest))[0] == 0

    edit_manifest(manifest, lambda m: m["strategies"]["s"].update(max_builds=scan + 40))
    result = apply(open_project(manifest))
    assert result.exit_code == 0 and result.built == 40, result.built  # phase 2, cut at the budget
