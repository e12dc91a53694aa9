"""The CLI maps arguments to library calls and errors to exit codes, with no raw tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _project import cli, edit_manifest, make_project


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trt_routes.cli.app", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.fixture
def project(tmp_path: Path, tiny_models: dict[str, Path]) -> Path:
    return make_project(tmp_path / "p", tiny_models)


def test_plan_check_exit_codes_follow_the_work(project: Path) -> None:
    code, out = cli("plan", "--check", "-m", str(project))
    assert code == 1 and "new job: never tuned" in out
    code, out = cli("apply", "-m", str(project))
    assert code == 0 and "Summary" in out and "speedup" in out
    code, out = cli("plan", "--check", "-m", str(project))
    assert code == 0 and "Nothing to do" in out
    code, out = cli("apply", "-m", str(project))
    assert code == 0 and "Every job is up to date; nothing was built." in out


def test_plan_json_is_machine_readable(project: Path) -> None:
    code, out = cli("plan", "--json", "-m", str(project))
    assert code == 0
    data = json.loads(out)
    assert data["has_work"] and data["builds"] == 10
    assert {j["job"] for j in data["jobs"]} == {"cnn/bs1/cpu", "cnn/bs4/cpu"}
    assert all(j["action"] == "tune" for j in data["jobs"])


def test_apply_dry_run_lists_routes(project: Path) -> None:
    code, out = cli("apply", "--dry-run", "-m", str(project))
    assert code == 0
    assert "cnn/bs1/cpu: 5 route(s) to build" in out
    assert "-graph_optimization_level=basic" in out and "default" in out
    assert not (project.parent / "tuning.lock").exists()


def test_manifest_error_names_file_line_and_fix_without_traceback(project: Path) -> None:
    text = project.read_text().replace("shapes:", "shapez:")
    project.write_text(text)
    line = text.splitlines().index(next(x for x in text.splitlines() if "shapez" in x)) + 1
    proc = run_cli("plan", "-m", str(project))
    assert proc.returncode == 2
    assert f"tuning.yaml:{line}:" in proc.stderr and "did you mean 'shapes'?" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (project.parent / "caches").exists()


def test_unknown_knob_in_switch_group_points_at_the_manifest(project: Path) -> None:
    edit_manifest(project, lambda d: d["switch_groups"].update(g="-intra_op_num_thread=[1|2]"))
    code, out = cli("validate", "-m", str(project))
    assert code == 2
    assert "tuning.yaml:" in out and "-intra_op_num_thread" in out and "did you mean `-intra_op_num_threads`" in out


def test_missing_manifest(tmp_path: Path) -> None:
    proc = run_cli("plan", "-m", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2 and "nope.yaml" in proc.stderr and "Traceback" not in proc.stderr


def test_explain_unknown_job_suggests_names(project: Path) -> None:
    code, out = cli("explain", "cnn/bs8/cpu", "-m", str(project))
    assert code == 2 and "no job named 'cnn/bs8/cpu'" in out and "cnn/bs1/cpu" in out


def test_explain_and_status_after_apply(project: Path) -> None:
    assert cli("apply", "-m", str(project))[0] == 0
    code, out = cli("explain", "cnn/bs1/cpu", "-m", str(project))
    assert code == 0 and "Decision:" in out and "winner" in out and "History:" in out
    code, out = cli("explain", "cnn/bs1/cpu", "--json", "-m", str(project))
    data = json.loads(out)
    assert len(data["trials"]) == 5 and data["winner"] is not None
    code, out = cli("status", "--json", "-m", str(project))
    assert code == 0 and {r["state"] for r in json.loads(out)["jobs"]} == {"ok"}
    engine = project.parent / "engines" / "cnn" / "bs1" / "cpu.onnx"
    engine.write_bytes(b"tampered")
    code, out = cli("status", "-m", str(project))
    assert code == 1 and "digest-mismatch" in out
    code, out = cli("plan", "-m", str(project))
    assert "materialize" in out
    assert cli("apply", "-m", str(project))[0] == 0
    assert cli("status", "-m", str(project))[0] == 0


def test_unavailable_backend_blocks_and_apply_exits_3(project: Path) -> None:
    edit_manifest(project, lambda d: d.update(targets={"h200": {"kind": "gpu", "name": "*H200*"}},
                                              defaults={**d["defaults"], "backend": "tensorrt",
                                                        "targets": ["h200"]},
                                              switch_groups={"g": "-conv_use_long_w=[on|off]"}))
    code, out = cli("plan", "-m", str(project))
    assert code == 0 and "blocked" in out and "TensorRT Global Performance Tuner unavailable" in out
    assert "every job is up to date" not in out
    # blocked is not up to date: plan --check, status and apply all exit 3 (the backend cannot load here)
    assert cli("plan", "--check", "-m", str(project))[0] == 3
    assert cli("status", "-m", str(project))[0] == 3
    code, out = cli("apply", "-m", str(project))
    assert code == 3 and "Every job is up to date" not in out and "blocked here, not up to date" in out


def test_knobs_and_schema(project: Path) -> None:
    for name in (["graph_optimization_level"], ["--", "-graph_optimization_level"]):
        code, out = cli("knobs", *name)
        assert code == 0 and "-graph_optimization_level=[disabled|basic|extended|layout|all]" in out
        assert "-intra_op_num_threads" not in out
    code, out = cli("knobs", "no_such_knob")
    assert code == 2 and "has no knob" in out
    code, out = cli("knobs", "--expr", "g", "-m", str(project))
    assert code == 0 and out.startswith('--tuneBuildRoutes="-graph_optimization_level=[basic|all]')
    code, out = cli("schema")
    schema = json.loads(out)
    assert "models" in schema["properties"] and schema["$schema"].startswith("https://json-schema.org")


def test_version() -> None:
    code, out = cli("--version")
    assert code == 0 and out.startswith("trt-routes ")


def test_apply_flag_rules_live_in_apply_options() -> None:
    """The CLI only parses; which apply flags combine is decided by ApplyOptions.from_flags."""
    from trt_routes.errors import Exit, UsageError
    from trt_routes.tune.apply import ApplyOptions

    options = ApplyOptions.from_flags(only=None, keep_going=True, workers=2, executor="ray", address="auto")
    assert options == ApplyOptions(only=[], keep_going=True, workers=2, executor="ray", address="auto")
    assert ApplyOptions.from_flags(frozen=True, executor="local", dry_run=True).dry_run  # local is --frozen's own
    for flags, says in (({"workers": 1}, "do not apply to it"), ({"executor": "ray"}, "do not apply to it"),
                        ({"address": "auto"}, "do not apply to it"), ({"plan": True}, "exclude each other")):
        with pytest.raises(UsageError, match=says) as info:
            ApplyOptions.from_flags(frozen=True, **flags)  # type: ignore[arg-type]
        assert info.value.exit_code == Exit.USAGE and info.value.hint
    with pytest.raises(UsageError, match="--only cannot be combined with --plan"):
        ApplyOptions.from_flags(only=["cnn/*"], plan=True)


def test_apply_usage_errors_keep_their_order(project: Path, tmp_path: Path) -> None:
    """A manifest error comes before flag rules, and an unreadable --plan FILE before --only's rule."""
    code, out = cli("apply", "--frozen", "--workers", "2", "-m", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml" in out and "do not apply to it" not in out
    code, out = cli("apply", "--plan", str(tmp_path / "none.json"), "--only", "cnn/*", "-m", str(project))
    assert code == 2 and "no saved plan at" in out
    code, out = cli("apply", "--frozen", "--plan", str(tmp_path / "none.json"), "--executor", "ray",
                    "-m", str(project))
    assert code == 2 and "do not apply to it" in out and "no saved plan" not in out
    assert not (project.parent / "tuning.lock").exists()


# -- GitOps habits ----------------------------------------------------------------------------------
def test_plan_on_a_fresh_project_creates_no_file(project: Path) -> None:
    root = project.parent
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    for args in (["plan"], ["plan", "--json"], ["plan", "--check"], ["status"], ["lock", "check"]):
        assert cli(*args, "-m", str(project))[0] in (0, 1), args
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # no caches/trials.sqlite



def test_a_model_error_comes_before_the_executors_and_the_locks_checks(project: Path) -> None:
    """A missing model is the first thing apply reports, whatever else its flags would refuse: the jobs are
    resolved before the executor is set up (-j beyond the cores) or a lockfile is looked for (--frozen)."""
    (project.parent / "models" / "cnn.onnx").unlink()
    for command in (["apply"], ["apply", "--dry-run", "-j", "999"], ["apply", "--frozen"]):
        code, out = cli(*command, "-m", str(project))
        assert code == 2 and "not found" in out and "cnn.onnx" in out, (command, out)

def test_only_matching_no_job_is_a_usage_error(project: Path) -> None:
    for command in (["plan"], ["plan", "--check"], ["apply"], ["apply", "--dry-run"], ["status"],
                    ["lock", "check"]):
        code, out = cli(*command, "--only", "cnn/bs9*", "-m", str(project))
        assert code == 2, (command, out)
        assert "--only 'cnn/bs9*' matches no job" in out and "cnn/bs1/cpu" in out, out
    code, out = cli("plan", "--only", "cnn/bs1*", "--only", "typo", "-m", str(project))
    assert code == 2 and "'typo'" in out  # every pattern must match, not just one
    code, out = cli("plan", "--only", "cnn/bs1*", "-m", str(project))
    assert code == 0 and "cnn/bs1/cpu" in out and "cnn/bs4/cpu" not in out
    assert not (project.parent / "tuning.lock").exists()


def test_pull_materializes_the_locked_engines_so_plan_check_passes(sharing_project: Path, tmp_path: Path) -> None:
    """Two copies of a project (machine A, and a clone with the lockfile) share a file:// remote: after
    `cache pull` the clone has every locked engine in place, and `plan --check` exits 0 with no build."""
    from _project import copy_project
    from _sharing import fresh_clone

    from trt_routes.canonical import file_sha256
    from trt_routes.lockfile import Lockfile

    a = copy_project(sharing_project, tmp_path / "a")
    remote = (tmp_path / "remote").as_uri()
    assert cli("cache", "push", remote, "-m", str(a))[0] == 0
    b = fresh_clone(a, tmp_path / "b")
    assert cli("plan", "--check", "-m", str(b))[0] == 1  # engines missing: materialize
    from typer.testing import CliRunner

    from trt_routes.cli.app import app

    pulled = CliRunner().invoke(app, ["cache", "pull", remote, "--json", "-m", str(b)])
    assert pulled.exit_code == 0, pulled.output
    assert sorted(json.loads(pulled.stdout)["materialized"]) == ["cnn/bs1/cpu", "cnn/bs4/cpu"]
    assert "sha256 verified" in pulled.stderr
    for entry in Lockfile.read(b.parent / "tuning.lock").jobs.values():
        assert file_sha256(b.parent / entry["engine"]["path"]) == entry["engine"]["sha256"]
    code, out = cli("plan", "--check", "-m", str(b))
    assert code == 0 and "Nothing to do" in out, out
    assert cli("status", "-m", str(b))[0] == 0
    code, out = cli("cache", "pull", remote, "-m", str(b))  # again: nothing to write
    assert code == 0 and "materialized" not in out


# -- CLI habits -------------------------------------------------------------------------------------
def _all_help(args: list[str]) -> dict[str, str]:
    from typer.main import get_command

    from trt_routes.cli.app import app

    def walk(cmd: object, path: list[str]) -> dict[str, str]:
        found = {" ".join(path): cli(*path, "--help")[1]}
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            found.update(walk(sub, [*path, name]))
        return found

    return walk(get_command(app), args)


def test_help_has_no_type_noise_and_names_the_environment() -> None:
    helps = _all_help([])
    assert len(helps) > 15 and "cache pull" in helps and "lock check" in helps
    for command, text in helps.items():
        assert "<bool>" not in text and "<list[" not in text, (command, text)
    apply = " ".join(helps["apply"].split())
    assert "TRT_ROUTES_WORKERS" in apply and "TRT_ROUTES_EXECUTOR" in apply and "TRT_ROUTES_MANIFEST" in apply
    assert "--install-completion" in helps[""]  # shell completion is on
    assert "PATTERN" in helps["plan"] and "PATH" in helps["plan"]


def test_environment_variables_sit_between_flags_and_manifest(project: Path, tmp_path: Path) -> None:
    env = {"TRT_ROUTES_MANIFEST": str(project)}
    proc = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "plan", "--json"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300, env={**os.environ, **env})
    assert proc.returncode == 0 and json.loads(proc.stdout)["format"] == "trt-routes/plan@1"  # TRT_ROUTES_JSON
    proc = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "validate"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**os.environ, **env, "TRT_ROUTES_JSON": "1"})
    assert proc.returncode == 0 and json.loads(proc.stdout)["format"] == "trt-routes/validate@1"
    proc = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "validate", "-m", str(tmp_path / "x.yaml")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, env={**os.environ, **env})
    assert proc.returncode == 2 and "x.yaml" in proc.stderr  # the flag wins over the environment
    # apply: --executor from the environment (a bad value shows it was read), the flag still wins
    edit_manifest(project, lambda d: d.update(execution={"executor": "local"}))
    proc = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "apply", "--dry-run"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, **env, "TRT_ROUTES_EXECUTOR": "nosuch"})
    assert proc.returncode == 2 and "nosuch" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "apply", "--dry-run", "--executor", "local"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, **env, "TRT_ROUTES_EXECUTOR": "nosuch"})
    assert proc.returncode == 0, proc.stderr


# -- output hygiene ---------------------------------------------------------------------------------
def test_backend_stderr_goes_to_the_trial_log_not_the_terminal(tmp_path: Path) -> None:
    """A real worker process: what native code writes to fd 2 lands, ANSI-free, at the end of the task's
    log (shown by `apply --verbose`), and not on the coordinator's stderr."""
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from _stderr_probe import NativeStderrProbe\n"
        "from trt_routes.execute.local import LocalExecutor\n"
        "if __name__ == '__main__':\n"
        "    with LocalExecutor() as ex:\n"
        "        r = ex.run(NativeStderrProbe(), 60)\n"
        "    print(repr(r.log))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "native warning" not in proc.stderr and "\x1b" not in proc.stderr
    log = eval(proc.stdout.strip())
    assert log == "built\n--- backend stderr ---\n2025-01-01 [W:onnxruntime:, graph.cc:42] a native warning"


def test_verbose_progress_shows_the_captured_stderr_and_errors_cut_at_words() -> None:
    import io

    from rich.console import Console

    from trt_routes.cache.store import TrialRecord
    from trt_routes.report.console import PlainReporter

    class _Job:
        name = "cnn/bs1/cpu"

    error = "InvalidGraph: " + " ".join(f"node{i} has an input whose shape cannot be inferred" for i in range(6))
    trial = TrialRecord(id="x", group_key="g", job="cnn/bs1/cpu", route="", signature="s", model_digest="m",
                        shape_key="k", settings_key="k", protocol_key="k", reference_key="k", backend="onnxruntime",
                        status="build-error", error=error, log="tb\n--- backend stderr ---\n[W:ort] careful")
    for verbose in (False, True):
        buf = io.StringIO()
        reporter = PlainReporter(Console(file=buf, width=400), verbose=verbose)
        reporter.trial_done(_Job(), trial)  # type: ignore[arg-type]
        out = buf.getvalue()
        line = out.splitlines()[0]
        shown = line.split("build-error ", 1)[1].split("…")[0]
        assert error.startswith(shown) and error[len(shown)] == " " and "…" in line  # cut between words
        assert ("stderr: [W:ort] careful" in out) is verbose


def test_the_console_script_keeps_exit_codes_output_and_exit_handlers(project: Path, tmp_path: Path) -> None:
    """`main` leaves with os._exit after the command (no interpreter teardown): exit codes, the whole output
    through a pipe, and atexit handlers (multiprocessing's, a temporary folder's) are kept."""
    ok = run_cli("plan", "--json", "-m", str(project))
    assert ok.returncode == 0 and ok.stdout.rstrip().endswith("}"), ok.stderr
    import json

    assert json.loads(ok.stdout)["jobs"]  # the whole document came through
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nmodels: [\n")
    invalid = run_cli("validate", "-m", str(bad))
    assert invalid.returncode == 2 and "bad.yaml:" in invalid.stdout + invalid.stderr
    assert run_cli("plan", "--check", "-m", str(project)).returncode == 1
    marker = tmp_path / "atexit-ran"
    code = ("import atexit, pathlib, sys\n"
            f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')\n"
            "sys.argv = ['trt-routes', '--version']\n"
            "from trt_routes.cli.app import main\nmain()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    assert marker.read_text() == "yes"
