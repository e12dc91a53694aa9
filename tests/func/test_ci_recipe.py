"""recipes/ci/tuning.yml is a valid GitHub Actions workflow whose every `trt-routes ...` line is a real
command with real flags: plan --check on pull requests, apply + cache push per GPU target, apply --frozen
at deploy."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from typing import Any

import pytest
import yaml
from _paths import REPO
from typer.testing import CliRunner

from trt_routes.cli.app import app

WORKFLOW = REPO / "recipes" / "ci" / "tuning.yml"
runner = CliRunner()


def workflow() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    if True in data:  # YAML 1.1 reads the bare key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def commands(job: dict[str, Any]) -> list[list[str]]:
    """Every trt-routes invocation in a job's `run:` scripts, as argv after `trt-routes`, with GitHub
    expressions replaced by a sample value (a target name)."""
    out: list[list[str]] = []
    for step in job["steps"]:
        script = re.sub(r"\$\{\{[^}]*\}\}", "h100", step.get("run", ""))
        for line in script.replace("\\\n", " ").splitlines():
            words = shlex.split(line.strip(), comments=True)
            if words[:1] != ["trt-routes"]:
                continue
            argv = []
            for word in words[1:]:
                if word in ("||", "&&", "|", ";", ">", "2>&1"):
                    break
                argv.append(word)
            out.append(argv)
    return out


def all_commands() -> list[list[str]]:
    return [argv for job in workflow()["jobs"].values() for argv in commands(job)]


def test_workflow_is_valid_against_githubs_schema() -> None:
    pytest.importorskip("check_jsonschema")
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(WORKFLOW)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_structure_jobs_triggers_and_matrices() -> None:
    data = workflow()
    assert set(data["on"]) == {"pull_request", "release", "workflow_dispatch"}
    jobs = data["jobs"]
    assert set(jobs) == {"lock-check", "plan", "tune", "deploy"}
    for name, job in jobs.items():
        assert job["runs-on"] and job["steps"], name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), (name, step)
        for need in job.get("needs", []):
            assert need in jobs
    targets = {name: jobs[name]["strategy"]["matrix"]["target"] for name in ("plan", "tune", "deploy")}
    assert len({tuple(t) for t in targets.values()}) == 1 and targets["plan"], targets
    for name in ("plan", "tune", "deploy"):
        assert jobs[name]["runs-on"] == ["self-hosted", "gpu", "${{ matrix.target }}"]
    assert "pull_request" in jobs["lock-check"]["if"] and "pull_request" in jobs["plan"]["if"]
    assert "release" in jobs["deploy"]["if"]
    assert jobs["tune"]["permissions"] == {"contents": "write"} and data["permissions"] == {"contents": "read"}


def test_each_job_runs_the_commands_of_its_stage() -> None:
    jobs = workflow()["jobs"]
    only = ["--only", "*/*/h100"]
    assert ["lock", "check"] in commands(jobs["lock-check"])
    plan = commands(jobs["plan"])
    assert any(argv[:2] == ["plan", "--check"] and argv[2:4] == only for argv in plan)
    tune = commands(jobs["tune"])
    assert ["apply", "--only", "$ONLY"] in tune and ["cache", "push", "$CACHE_URL"] in tune
    assert tune.index(["apply", "--only", "$ONLY"]) < tune.index(["cache", "push", "$CACHE_URL"])
    assert jobs["tune"]["env"]["ONLY"] == "*/*/${{ matrix.target }}"
    assert ["apply", "--frozen", *only] in commands(jobs["deploy"])


def _known_groups() -> set[str]:
    import typer.main

    return set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("argv", all_commands(), ids=lambda a: " ".join(a))
def test_every_command_line_parses_with_the_real_cli(argv: list[str]) -> None:
    """`--help` after the arguments: click rejects an unknown command or flag (exit 2) before the eager
    help option prints and exits 0."""
    assert argv[0] in _known_groups(), f"no `trt-routes {argv[0]}` command"
    result = runner.invoke(app, [*argv, "--help"])
    assert result.exit_code == 0, f"trt-routes {' '.join(argv)}: {result.output}"
    assert "Usage:" in result.output


def test_a_wrong_flag_would_be_caught() -> None:
    result = runner.invoke(app, ["apply", "--frozn", "--help"])
    assert result.exit_code == 2 and "No such option" in result.output
