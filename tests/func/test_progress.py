"""Progress during apply: the ETA from measured trial times, plain lines when not a terminal
(--quiet, --verbose), and the rich bar that never splits a progress line."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from _project import make_project
from rich.console import Console
from typer.testing import CliRunner

from trt_routes.cli.app import app
from trt_routes.project import open_project
from trt_routes.report.console import RichReporter
from trt_routes.report.progress import TrialClock, clock_text
from trt_routes.tune.apply import ApplyOptions, apply

LINE = re.compile(r"^  \[(\d+)/(\d+)\] (cnn/bs\d/cpu) (\S+): ok \d+\.\d{3} ms in \d+\.\d s, eta (\d:\d\d:\d\d)$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class FakeTime:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_eta_prices_each_job_at_its_own_measured_trial_time() -> None:
    now = FakeTime()
    clock = TrialClock(now)
    clock.plan({"a": 3, "b": 2, "idle": 0})
    assert clock.remaining() is None  # nothing measured yet: no guess
    clock.job_start("a", 3)
    now.t = 2.0
    assert clock.trial_done("a") == 2.0
    now.t = 6.0
    assert clock.trial_done("a") == 4.0
    # a: 1 left at its mean 3 s; b: 2 left at the overall mean 3 s
    assert clock.remaining() == pytest.approx(9.0)
    now.t = 7.0  # the running trial counts down
    assert clock.remaining() == pytest.approx(8.0)
    now.t = 20.0  # ...but never below the work still queued behind it
    assert clock.remaining() == pytest.approx(6.0)
    clock.trial_done("a")
    clock.job_start("b", 2)
    now.t = 30.0
    clock.trial_done("b")  # b costs 10 s a trial: its own time, not the overall mean
    assert clock.remaining() == pytest.approx(10.0)
    now.t = 40.0
    clock.trial_done("b")
    assert clock.remaining() == 0.0
    assert clock_text(3725.4) == "1:02:05" and clock_text(None) == "-:--:--"


def test_eta_stops_where_a_jobs_max_minutes_stops_its_search() -> None:
    """A job planned for 30 builds of 10 s under max_minutes 1: its search stops after a minute, so the
    estimate is the minute's rest, not 290 s (the H200's torch-gpu plan said eta 0:19:25 for 4-minute jobs)."""
    now = FakeTime()
    clock = TrialClock(now)
    clock.plan({"a": 30, "b": 2}, {"a": 60.0})
    clock.job_start("a", 30)
    now.t = 10.0
    clock.trial_done("a")
    assert clock.remaining() == pytest.approx(50.0 + 2 * 10.0)
    now.t = 70.0
    clock.trial_done("a")
    assert clock.remaining() == pytest.approx(2 * 35.0)  # a's minute is spent; b at the overall mean


def test_a_job_started_beside_a_running_one_does_not_restart_the_clock() -> None:
    now = FakeTime()
    clock = TrialClock(now)
    clock.plan({"a": 2, "b": 1})
    clock.job_start("a", 2)
    now.t = 3.0
    clock.trial_done("a")
    now.t = 4.0
    clock.job_start("b", 1)  # a's second trial is still running on another worker
    now.t = 6.0
    assert clock.trial_done("a") == 3.0  # since a's previous result, not since b started


def test_plain_lines_when_not_a_terminal(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    result = CliRunner().invoke(app, ["apply", "-m", str(manifest)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "\x1b[" not in out and "ETA" not in out  # no colors, no bar
    lines = [m for m in (LINE.match(x) for x in out.splitlines()) if m]
    assert [int(m[1]) for m in lines] == list(range(1, 11)) and {m[2] for m in lines} == {"10"}
    assert [m[3] for m in lines] == ["cnn/bs1/cpu"] * 5 + ["cnn/bs4/cpu"] * 5
    assert lines[-1][5] == "0:00:00"
    assert "tuning cnn/bs1/cpu: 5 build(s)" in out and "tuning cnn/bs4/cpu: 5 build(s)" in out
    assert "Plan" in out and "Summary" in out and "losses" not in out


def test_a_search_that_may_add_builds_counts_against_its_bound(tmp_path: Path,
                                                              tiny_models: dict[str, Path]) -> None:
    """adaptive decides later steps from what it measures: the plan says so up front and the counter counts
    against the bound it gave, never a total that grows as the search adds builds."""
    manifest = make_project(tmp_path / "p", tiny_models, mode="adaptive")
    result = CliRunner().invoke(app, ["apply", "--only", "cnn/bs1/*", "-m", str(manifest)])
    assert result.exit_code == 0, result.output
    said = re.search(r"build\(s\) to run now; the searches may add more, at most (\d+) in all", result.output)
    assert said is not None, result.output
    counts = re.findall(r"^  \[(\d+) of at most (\d+)\] cnn/bs1/cpu ", result.output, re.M)
    assert counts and {int(bound) for _, bound in counts} == {int(said[1])}
    assert [int(done) for done, _ in counts] == list(range(1, len(counts) + 1))
    assert len(counts) <= int(said[1])


def test_quiet_and_verbose(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    quiet = make_project(tmp_path / "q", tiny_models)
    result = CliRunner().invoke(app, ["apply", "--quiet", "--only", "cnn/bs1/*", "-m", str(quiet)])
    assert result.exit_code == 0
    assert "Summary" in result.output and "Plan" not in result.output
    assert "[1/" not in result.output and "tuning " not in result.output
    verbose = make_project(tmp_path / "v", tiny_models)
    result = CliRunner().invoke(app, ["apply", "--verbose", "--only", "cnn/bs1/*", "-m", str(verbose)])
    assert result.exit_code == 0
    out = result.output.splitlines()
    trial_lines = [i for i, x in enumerate(out) if LINE.match(x)]
    assert len(trial_lines) == 5
    for i in trial_lines:  # each trial line is followed by its losses and build time
        assert re.match(r"^      losses logits: cos=\S+ lInf=\S+; build \d+\.\d{3} s$", out[i + 1]), out[i + 1]


def test_rich_bar_never_splits_a_progress_line(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system="standard")
    reporter = RichReporter(console)
    try:
        result = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]), reporter)
    finally:
        reporter.close()
    assert result.exit_code == 0
    raw = buf.getvalue()
    pieces = [ANSI.sub("", x).rstrip() for x in re.split(r"[\r\n]", raw)]
    # the bar was drawn (with the measured ETA column) and the trial lines came out whole above it
    assert any("━" in x and "ETA " in x and "cnn/bs1/cpu" in x for x in pieces)
    found = [m for m in (LINE.match(x) for x in pieces) if m]
    assert sorted({int(m[1]) for m in found}) == [1, 2, 3, 4, 5]
    assert not any("━" in x and "[" in x and "] cnn/" in x for x in pieces)  # no bar glued to a line


def test_the_side_by_side_rounds_show_progress_too(faulty: None, tmp_path: Path,
                                                   tiny_models: dict[str, Path]) -> None:
    """A phase that takes time and builds nothing (here the confirmation of -sleep_ms=2 against the default)
    says so as it starts, rather than leaving the screen still after '0 build(s)'."""
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-sleep_ms=[4|2]")
    result = CliRunner().invoke(app, ["apply", "--only", "cnn/bs1/*", "-m", str(manifest)])
    assert result.exit_code == 0, result.output
    assert re.search(r"^  cnn/bs1/cpu: re-measuring side by side: -sleep_ms=2 against default \(up to \d+ "
                     r"interleaved turns\)$", result.output, re.M), result.output
    # the summary's speedup is that side-by-side ratio, not the ratio of the two medians beside it: it says so
    assert "speedup: the side-by-side ratio (interleaved rounds in one worker)" in result.output
    quiet = CliRunner().invoke(app, ["apply", "--quiet", "--remeasure", "--only", "cnn/bs1/*", "-m", str(manifest)])
    assert quiet.exit_code == 0 and "re-measuring" not in quiet.output


def test_warnings_and_failures_go_to_stderr(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """Off a terminal, stdout holds the plan, progress and summary; what went wrong (a trial not cached because
    the disk refused it, a job that failed) is on stderr, where a log or a CI step looks for it."""
    import os
    import subprocess
    import sys

    from _paths import TESTS

    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-fault=[none|enospc]")
    env = {**os.environ, "TRT_ROUTES_BACKENDS": "faulty=fault_backend:FaultBackend",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "apply", "--only", "cnn/bs1/*", "-m",
                           str(manifest)], capture_output=True, text=True, env=env, timeout=300)
    assert "-fault=enospc: not cached: infrastructure" in done.stderr, done.stderr
    assert "not cached" not in done.stdout and "Summary" in done.stdout
