"""The HTML report: self-contained (no URL at all), every job in the summary, per job a scatter with
the threshold line and the winner marked, knob effects; and it renders in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _project import edit_manifest, make_project
from _trials import BASIC, JOB, NCHWC, THREADS1, THREADS2, put, record
from typer.testing import CliRunner

from trt_routes.cache.store import TrialRecord
from trt_routes.cli.app import app
from trt_routes.project import Project, open_project
from trt_routes.report.html import build_report, effects, write_report
from trt_routes.tune.apply import apply

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def section(html: str, job: str) -> str:
    anchor = "job-" + re.sub(r"[^A-Za-z0-9_-]+", "-", job).strip("-")
    start = html.index(f'id="{anchor}"')
    return html[start: html.index("</section>", start)]


@pytest.fixture
def project(tmp_path: Path, tiny_models: dict[str, Path]) -> Project:
    project = open_project(make_project(tmp_path / "p", tiny_models))
    job = next(j for j in project.jobs if j.name == JOB)
    put(project,
        record(job, "", center=2.0),
        record(job, THREADS1, center=1.0),
        record(job, BASIC, center=0.5, losses={"logits": {"cos": 0.25, "lInf": 1e-6}}),
        record(job, THREADS2, "crashed", error="worker died with signal SIGSEGV"),
        record(job, NCHWC, center=3.0))
    lock = project.read_lock()
    lock.jobs[JOB] = {"route": THREADS1, "engine": {"path": "engines/cnn/bs1/cpu.onnx", "sha256": "0" * 64},
                      "timing": {"default_ms": 2.0, "chosen_ms": 1.0, "speedup": 2.0}}
    lock.write()
    return project


def test_report_content_marks_the_winner_threshold_and_effects(project: Project) -> None:
    html = build_report(project)
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    # summary: both jobs, the tuned one with its speedup bar and interval whisker, the other not tuned
    overview = html[html.index('class="overview"'): html.index("</section>")]
    assert "cnn/bs1/cpu" in overview and "cnn/bs4/cpu" in overview
    assert 'class="bar tuned"' in overview and overview.count('class="whisker"') == 3
    assert "2.00x" in overview and "not tuned" in overview
    one = section(html, JOB)
    assert one.count('class="threshold"') == 1 and ">threshold<" in one
    winners = re.findall(r'<g class="point winner[^"]*" data-route="([^"]+)"', one)
    assert winners == [THREADS1] and f"winner: {THREADS1}" in one
    assert re.search(rf'<g class="point failed" data-route="{re.escape(BASIC)}"', one)
    assert re.search(r'<g class="point eligible default" data-route="default"', one)
    assert one.count('<g class="point ') == 4  # the crashed route has no timing: listed, not plotted
    assert "Not plotted (no timing)" in one and THREADS2 in one and "SIGSEGV" in one
    assert '<tr class="winner" data-route="-intra_op_num_threads=1">' in one
    # knob effects: one-knob routes against the default route
    shown = dict(re.findall(r'data-knob="([^"]+)".*?class="value [a-z]+">([^<]+)<', one))
    assert shown[THREADS1] == "-50.0%" and shown[NCHWC].startswith("+5")
    assert re.fullmatch(r"-7\d\.\d% · 1 failed gate", shown[BASIC])
    assert re.search(rf'data-knob="{THREADS2}"[^>]*>.*?1 crashed', one)
    assert "Margin over the default: 2.0" in one
    assert "no trials under the current signature" in section(html, "cnn/bs4/cpu")
    # self-contained: nothing to fetch, no URL of any kind
    assert not re.search(r"https?:|//[\w.-]+\.[a-z]{2,}|url\(|@import|\ssrc=", html, re.IGNORECASE)
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', html))


def test_effects_pair_each_value_with_the_route_without_it() -> None:
    def t(route: str, median: float | None, status: str = "ok") -> TrialRecord:
        return TrialRecord(id=route, group_key="g", job="j", route=route, signature="s", model_digest="m",
                           shape_key="", settings_key="", protocol_key="", reference_key="", backend="b",
                           status=status, median_ms=median)

    trials = {r: t(r, m) for r, m in [("", 1.0), ("-a=1", 0.8), ("-b=1", 2.0), ("-a=1 -b=1", 1.0)]}
    trials["-c=1"] = t("-c=1", None, "timeout")
    by = {e.label: e for e in effects(trials, set(trials) - {"-a=1 -b=1"})}
    assert by["-a=1"].change == pytest.approx(-0.35) and by["-a=1"].n == 2  # median of -20% and -50%
    assert by["-b=1"].change == pytest.approx(0.625) and by["-b=1"].note == "1 failed gate"
    assert by["-c=1"].change is None and by["-c=1"].note == "1 timeout"


def test_cli_writes_the_report_and_needs_html(project: Project, tmp_path: Path) -> None:
    out = tmp_path / "r" / "report.html"
    out.parent.mkdir()
    result = CliRunner().invoke(app, ["report", "--html", str(out), "-m", str(project.loaded.path)])
    assert result.exit_code == 0 and f"wrote {out} (2 job(s), 1 with trials)" in result.output
    assert "cnn/bs1/cpu" in out.read_text()
    result = CliRunner().invoke(app, ["report", "-m", str(project.loaded.path)])
    assert result.exit_code == 2 and "--html" in result.output


@pytest.mark.skipif(BROWSER is None, reason="no chromium installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    project = open_project(make_project(tmp_path / "p", tiny_models))
    assert apply(project).exit_code == 0
    path = tmp_path / "report.html"
    report = write_report(open_project(project.loaded.path), path)
    points = sum(len(j.points) for j in report.jobs)
    assert points == 10
    proc = subprocess.run(
        [str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'ud'}",
         "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body is not None, proc.stderr[-2000:]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(0)))
    # the page's own script ran after layout and found every plot drawn: 1 summary + 2 per job, and a layer chart
    # per job whose finalists apply profiled
    plots = str(1 + 2 * len(report.jobs) + sum(1 for j in report.jobs if j.layers))
    assert sum(1 for j in report.jobs if j.layers) >= 1
    assert attrs["data-plots"] == plots and attrs["data-plots-drawn"] == plots and attrs["data-rendered"] == "ok"
    assert int(attrs["data-marks"]) >= points + 2 + 2


@pytest.mark.skipif(BROWSER is None, reason="no chromium installed (apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 1440, 1920])
def test_no_table_spills_past_its_card(width: int, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """The summary table (long routes, long decisions) stays inside its card at common window widths."""
    group = ("-graph_optimization_level=[basic|all] -intra_op_num_threads=[1|2] -disable:NchwcTransformer=[off|on] "
             "-allow_spinning=[0|1] -disable_prepacking=[0|1]")
    project = open_project(make_project(tmp_path / "p", tiny_models, group=group, mode="full"))
    assert apply(project).exit_code == 0
    path = tmp_path / "report.html"
    write_report(open_project(project.loaded.path), path)
    proc = subprocess.run(
        [str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'ud'}",
         f"--window-size={width},900", "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body is not None, proc.stderr[-2000:]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(0)))
    assert attrs["data-rendered"] == "ok"
    assert attrs["data-spills"] == "0", f"{attrs['data-spills']} table(s) spill past their card at {width} px"


def test_jobs_that_cannot_run_here_are_listed_with_the_reason(project: Project) -> None:
    edit_manifest(project.loaded.path, lambda d: d.update(targets={"cpu": {"kind": "cpu"},
                                                                   "h200": {"kind": "gpu", "name": "*H200*"}},
                                                          defaults={**d["defaults"], "targets": ["cpu", "h200"]}))
    html = build_report(open_project(project.loaded.path))
    blocked = section(html, "cnn/bs1/h200")
    assert 'class="badge none">blocked<' in blocked and "tunes CPU targets" in blocked
    assert "blocked here" in html[html.index('class="overview"'):]
    assert re.findall(r'<g class="point winner[^"]*" data-route="([^"]+)"', section(html, JOB)) == [THREADS1]


def test_each_job_shows_the_locks_side_by_side_confirmation(project: Project) -> None:
    lock = project.read_lock()
    result = {"route": THREADS1, "ratio": 0.4987, "ci": [0.4821, 0.5133], "rounds": 15, "passed": True,
              "reason": "confirmed"}
    lost = {"route": NCHWC, "ratio": 1.012, "ci": [0.97, 1.06], "rounds": 15, "passed": False, "reason": "no"}
    lock.jobs[JOB]["selection"] = {"key": "0" * 16, "confirmation": {
        "margin": 0.02, "confidence": 0.95, "rounds": 15, "iterations": 10, "slot_ms": 20,
        "vs_default": {"baseline": "", "results": [result, lost], "winner": THREADS1}, "vs_locked": None}}
    lock.jobs["cnn/bs4/cpu"] = {"route": "", "selection": {"key": "0" * 16, "confirmation": {
        "note": "no confirmation: the default route is not eligible, so nothing to compare with"}}}
    lock.write()
    html = build_report(open_project(project.loaded.path))
    one = section(html, JOB)
    start = one.index('class="confirmation"')
    block = one[start: one.index("</div>", start)]
    assert "Side-by-side confirmation (tuning.lock)" in block and "less than 0.98x" in block and "95%" in block
    rows = re.findall(r'<tr class="(ok|failed)" data-route="([^"]+)">(.*?)</tr>', block)
    assert [(cls, route) for cls, route, _ in rows] == [("ok", THREADS1), ("failed", NCHWC)]
    assert "<td class=num>0.499x</td><td class=num>0.482x-0.513x</td>" in rows[0][2] and "confirmed" in rows[0][2]
    assert "1.01x" in rows[1][2] and "0.97x-1.06x" in rows[1][2] and "not confirmed" in rows[1][2]
    # a job without trials here still shows what its lock says
    assert "the default route is not eligible" in section(html, "cnn/bs4/cpu")


@pytest.mark.skipif(BROWSER is None, reason="no chromium installed (apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 1440, 1920])
def test_the_layer_chart_draws_inside_its_card(width: int, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """Once explain --layers took a job's profiles, the report shows where the gain comes from, layer by layer:
    drawn by the browser like every plot, nothing spilling past its card, at three window widths."""
    from trt_routes.audit.layers import layers

    project = open_project(make_project(tmp_path / "p", tiny_models))
    assert apply(project).exit_code == 0
    rep = layers(open_project(project.loaded.path), "cnn/bs1/cpu")
    path = tmp_path / "report.html"
    report = write_report(open_project(project.loaded.path), path)
    (job,) = [j for j in report.jobs if j.job.name == "cnn/bs1/cpu"]
    assert job.layers and job.layers_of == rep.winner_route
    assert section(path.read_text(), "cnn/bs1/cpu").count('class="plot effects layers"') == 1
    proc = subprocess.run(
        [str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'ud'}",
         f"--window-size={width},900", "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body is not None, proc.stderr[-2000:]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(0)))
    plots = str(1 + 2 * len(report.jobs) + sum(1 for j in report.jobs if j.layers))
    assert attrs["data-rendered"] == "ok" and attrs["data-plots"] == plots and attrs["data-plots-drawn"] == plots
    assert attrs["data-spills"] == "0"
