"""At 80 columns (and narrower) tables wrap at spaces: a job name is never split, and a route's knob is split only
when it is longer than the table can give a column (``TOKEN_WIDTH``)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from trt_routes import api
from trt_routes.audit.explain import explain
from trt_routes.audit.status import status
from trt_routes.project import open_project
from trt_routes.report.console import render_explain, render_plan, render_status
from trt_routes.tune.apply import apply


def _text(render: object, *args: object, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    render(*args, console)  # type: ignore[operator]
    return console.file.getvalue()  # type: ignore[attr-defined]


def _cells(text: str) -> set[str]:
    return {word for line in text.splitlines() for cell in line.split("│") for word in cell.split()}


def test_job_names_and_knobs_stay_whole_in_a_narrow_terminal(tuned: Path, tmp_path: Path) -> None:
    from _project import copy_project

    manifest = copy_project(tuned, tmp_path / "p")
    project = open_project(manifest)
    result = apply(project)
    assert result.exit_code == 0
    for width in (80, 64):
        rows = status(open_project(manifest))
        words = _cells(_text(render_status, rows, width=width)) | _cells(
            _text(render_plan, api.plan(open_project(manifest)), width=width))
        for row in rows:
            assert row.job in words, (row.job, width)
            assert all(knob in words for knob in (row.route or "").split()), (row.route, width)
        job = rows[0].job
        ex = explain(open_project(manifest), job)
        words = _cells(_text(render_explain, ex, width=width))
        assert all(knob in words for t in ex.trials for knob in t.route.split()), width
