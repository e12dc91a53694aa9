"""The --json contract: every command that reads or decides prints ONE strict JSON object whose ``format``
names its schema (``trt-routes schema --format NAME``), and real outputs validate against those schemas;
failures under --json are ``trt-routes/error@1`` documents on stdout with the same exit code."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _project import copy_project, make_project
from typer.testing import CliRunner

from trt_routes.cli.app import app
from trt_routes.project import open_project
from trt_routes.report.formats import DESCRIPTIONS


def _no_constants(name: str) -> float:
    raise AssertionError(f"not strict JSON: bare {name}")


def run_json(*args: str, code: int = 0, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the CLI in process; stdout must be exactly one strict JSON object, valid against the schema its
    ``format`` names (printed by `trt-routes schema --format`)."""
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == code, (args, result.exit_code, result.output)
    doc = json.loads(result.stdout, parse_constant=_no_constants)
    assert isinstance(doc, dict), doc
    name = doc["format"].removeprefix("trt-routes/").removesuffix("@1")
    printed = CliRunner().invoke(app, ["schema", "--format", name])
    assert printed.exit_code == 0, printed.output
    schema = json.loads(printed.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)
    return doc


@pytest.fixture
def a(tuned: Path, tmp_path: Path) -> Path:
    return copy_project(tuned, tmp_path / "a")


def test_every_reading_command_prints_one_valid_document(a: Path, tmp_path: Path) -> None:
    m = ["-m", str(a)]
    seen = set()

    def check(fmt: str, *args: str, code: int = 0) -> dict[str, Any]:
        doc = run_json(*args, "--json", *m, code=code)
        assert doc["format"] == f"trt-routes/{fmt}@1"
        seen.add(fmt)
        return doc

    assert check("validate", "validate")["jobs"][0]["job"] == "cnn/bs1/cpu"
    assert check("plan", "plan")["has_work"] is False
    up = check("apply", "apply")
    assert (up["built"], up["dry_run"], up["frozen"]) == (0, False, False)
    assert check("apply", "apply", "--dry-run")["dry_run"] is True
    frozen = check("apply", "apply", "--frozen", "--dry-run")
    assert frozen["frozen"] and frozen["dry_run"]
    status = check("status", "status")
    assert status["ok"] and {r["state"] for r in status["jobs"]} == {"ok"}
    assert len(check("explain", "explain", "cnn/bs1/cpu")["trials"]) == 5
    assert check("layers", "explain", "cnn/bs1/cpu", "--layers")["job"] == "cnn/bs1/cpu"
    assert check("profile", "profile", "cnn/bs1/cpu")["layers"]
    report = check("report", "report", "--html", str(tmp_path / "r.html"))
    assert report["jobs"] == 2 and (tmp_path / "r.html").is_file()
    assert check("lock-show", "lock", "show", "cnn/bs1/cpu")["job"] == "cnn/bs1/cpu"
    assert check("lock-check", "lock", "check")["matches"] is True
    assert check("cache-stats", "cache", "stats")["trials"] == 10
    assert check("cache-verify", "cache", "verify")["ok"] is True
    assert check("cache-gc", "cache", "gc", "--dry-run")["dry_run"] is True
    assert check("knobs", "knobs")["backend"] == "onnxruntime"
    assert len(check("trials", "trials")["trials"]) == 10
    bundle = tmp_path / "b.tar.gz"
    assert check("cache-export", "cache", "export", str(bundle))["trials"] == 10
    assert check("cache-import", "cache", "import", str(bundle))["reports"][0]["present"] == 10
    remote = f"file://{tmp_path / 'remote'}"
    assert check("cache-push", "cache", "push", remote)["trials"] == 10
    assert check("cache-pull", "cache", "pull", remote)["segments"] == 0
    recovered = check("cache-recover", "cache", "recover")  # a healthy cache: every row comes across
    assert recovered["rows"]["trials"] == 10 and not sum(recovered["lost"].values())
    assert seen == set(DESCRIPTIONS) - {"error"}


def test_a_fresh_apply_and_a_failing_check_are_documents_too(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    plan = run_json("plan", "--json", "--check", "-m", str(manifest), code=1)
    assert plan["has_work"] and plan["builds"] == 10
    status = run_json("status", "--json", "-m", str(manifest), code=1)
    assert not status["ok"] and {r["state"] for r in status["jobs"]} == {"no-lock"}
    done = run_json("apply", "--json", "--only", "cnn/bs1/*", "-m", str(manifest))
    assert done["built"] == 5 and done["lock_written"] and [j["job"] for j in done["jobs"]] == ["cnn/bs1/cpu"]


def test_non_finite_numbers_become_null(a: Path) -> None:
    """A trial whose outputs were NaN (losses inf/nan): explain --json stays strict JSON; its verdict says why."""
    with open_project(a).open_cache() as cache:
        trial = next(t for t in cache.trials_for_job("cnn/bs1/cpu") if t.route != "")
        cache.add_trial(dataclasses.replace(trial, losses={"output": {"cos": math.inf, "lInf": math.nan}}))
    doc = run_json("explain", "cnn/bs1/cpu", "--json", "-m", str(a))
    (shown,) = [t for t in doc["trials"] if t["route"] == trial.route]
    assert shown["losses"]["output"] == {"cos": None, "lInf": None} and shown["verdict"]


def test_errors_are_json_documents_with_the_exit_code(a: Path, tmp_path: Path) -> None:
    err = run_json("plan", "--json", "-m", str(tmp_path / "nope.yaml"), code=2)
    assert err["format"] == "trt-routes/error@1" and err["code"] == 2 and err["error"] == "ManifestError"
    assert err["file"].endswith("nope.yaml") and "manifest not found" in err["message"] and err["hint"]

    text = a.read_text().replace("shapes:", "shapez:")
    a.write_text(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "shapez" in x)
    err = run_json("validate", "--json", "-m", str(a), code=2)
    assert (err["line"], err["file"]) == (line, str(a)) and err["column"] >= 1
    assert "did you mean 'shapes'?" in err["hint"]

    text = text.replace("shapez:", "shapes:").replace("mode: fast", "mode: bogus", 1)
    text = text.replace("threshold: 0.0001", "threshold: -1", 1)
    a.write_text(text)
    err = run_json("validate", "--json", "-m", str(a), code=2)
    assert len(err["problems"]) == 2, err  # every problem, in file order, not just the first
    assert [p["line"] for p in err["problems"]] == sorted(p["line"] for p in err["problems"])
    assert "bogus" in err["problems"][0]["message"] + err["problems"][1]["message"]


def test_usage_errors_under_json(a: Path) -> None:
    err = run_json("plan", "--json", "--only", "cnn/bs9*", "-m", str(a), code=2)
    assert err["error"] == "UsageError" and "cnn/bs9*" in err["message"] and "cnn/bs1/cpu" in err["hint"]
    err = run_json("apply", "--json", "--workers", "many", "-m", str(a), code=2)  # a click parse error
    assert err["code"] == 2 and "integer" in err["message"]
    err = run_json("explain", "nope", "-m", str(a), code=2, env={"TRT_ROUTES_JSON": "1"})
    assert "no job named 'nope'" in err["message"]


def test_schema_without_format_is_still_the_manifest_schema() -> None:
    result = CliRunner().invoke(app, ["schema"])
    data = json.loads(result.stdout)
    assert "models" in data["properties"] and "format" not in data.get("properties", {})
    listed = CliRunner().invoke(app, ["schema", "--format", "list"])
    assert listed.exit_code == 0 and all(f"trt-routes/{n}@1" in listed.stdout for n in DESCRIPTIONS)
    bad = CliRunner().invoke(app, ["schema", "--format", "plam"])
    assert bad.exit_code == 2 and "no JSON format 'plam'" in bad.output
