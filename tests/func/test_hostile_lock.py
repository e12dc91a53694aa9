"""A hostile tuning.lock or tuning.yaml (it arrives through pull requests) gets a clean, positioned error in
every command that reads it, in bounded time: an alias bomb, git conflict markers, a FIFO, a device, an
oversized file. And the lock writes non-finite numbers as null, never as a string."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
from pathlib import Path

import pytest
import yaml
from _project import cli

from trt_routes import lockfile
from trt_routes.errors import LockfileError
from trt_routes.lockfile import Lockfile

COMMANDS = (["plan"], ["status"], ["explain", "cnn/bs1/cpu"], ["lock", "check"], ["lock", "show", "cnn/bs1/cpu"],
            ["apply", "--frozen"], ["apply"])


def _copy(tuned: Path, tmp_path: Path) -> Path:
    project = tmp_path / "p"
    shutil.copytree(tuned.parent, project)
    return project


def _every_command_refuses(project: Path, *needles: str) -> None:
    before = (project / "tuning.lock").read_bytes() if (project / "tuning.lock").is_file() else None
    for command in COMMANDS:
        code, out = cli(*command, "-m", str(project / "tuning.yaml"))
        assert code == 2, (command, out)
        assert "Traceback" not in out, (command, out)
        for needle in needles:
            assert needle in out, (command, needle, out)
    if before is not None:
        assert (project / "tuning.lock").read_bytes() == before  # nothing rewrote it


def _alias_bomb(levels: int = 9, width: int = 10) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_the_lock_is_refused_at_its_line(tuned: Path, tmp_path: Path) -> None:
    project = _copy(tuned, tmp_path)
    path = project / "tuning.lock"
    text = path.read_text()
    job_line = "  cnn/bs1/cpu:\n"
    assert job_line in text
    bomb = "    evil:\n" + "".join(f"      {line}\n" for line in _alias_bomb().splitlines())
    path.write_text(text.replace(job_line, job_line + bomb, 1))
    line = path.read_text().splitlines().index("      a0: &a0 [x, x, x, x, x, x, x, x, x, x]") + 1
    with pytest.raises(LockfileError) as err:
        Lockfile.read(path)
    assert f"{path}:{line}:" in err.value.message and "anchor" in err.value.message
    _every_command_refuses(project, "tuning.lock", "alias")


def test_a_lock_with_git_conflict_markers_names_the_conflicting_jobs(tuned: Path, tmp_path: Path) -> None:
    project = _copy(tuned, tmp_path)
    path = project / "tuning.lock"
    lines = path.read_text().splitlines(keepends=True)
    route = next(i for i, line in enumerate(lines) if line.startswith("    route: "))
    job = next(lines[i].strip().rstrip(":") for i in range(route, -1, -1) if lines[i].startswith("  ")
               and not lines[i].startswith("   "))
    lines[route:route + 1] = ["<<<<<<< HEAD\n", lines[route], "=======\n", "    route: '-intra_op_num_threads=1'\n",
                              ">>>>>>> other-branch\n"]
    path.write_text("".join(lines))
    with pytest.raises(LockfileError) as err:
        Lockfile.read(path)
    assert f"{path}:{route + 1}:" in err.value.message and f"'{job}'" in err.value.message
    assert err.value.hint and "trt-routes apply" in err.value.hint
    _every_command_refuses(project, "merge conflict", job)


@pytest.mark.parametrize("kind", ["fifo", "device", "too large"])
def test_a_lock_that_is_not_a_small_regular_file_is_refused_without_reading_it(
        tuned: Path, tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _copy(tuned, tmp_path)
    path = project / "tuning.lock"
    if kind == "fifo":
        path.unlink()
        os.mkfifo(path)
        needle = "FIFO"
    elif kind == "device":
        path.unlink()
        path.symlink_to("/dev/zero")
        needle = "device"
    else:
        monkeypatch.setattr(lockfile, "MAX_LOCK_BYTES", path.stat().st_size - 1)
        needle = "MB"
    with pytest.raises(LockfileError) as err:
        Lockfile.read(path)
    assert needle in err.value.message and str(path) in err.value.message
    _every_command_refuses(project, "tuning.lock", needle)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_manifest_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "tuning.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    for command in (["validate"], ["plan"], ["status"]):
        code, out = cli(*command, "-m", str(path))
        assert code == 2 and "Traceback" not in out, (command, out)
        assert ("FIFO" if kind == "fifo" else "device") in out and "tuning.yaml" in out, (command, out)


def test_a_manifest_alias_bomb_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "tuning.yaml"
    path.write_text("schema_version: 1\nmodels: {}\nx-bomb:\n" +
                    "".join(f"  {line}\n" for line in _alias_bomb().splitlines()))
    code, out = cli("validate", "-m", str(path))
    assert code == 2 and "Traceback" not in out, out
    assert "aliases" in out and "tuning.yaml" in out, out
    path.write_text("schema_version: 1\nmodels: &m {a: *m}\n")
    code, out = cli("validate", "-m", str(path))
    assert code == 2 and "Traceback" not in out and "itself" in out, out


def test_non_finite_numbers_are_written_as_null(tuned: Path, tmp_path: Path) -> None:
    project = _copy(tuned, tmp_path)
    lock = Lockfile.read(project / "tuning.lock")
    entry = lock.jobs["cnn/bs1/cpu"]
    assert entry.timing is not None
    entry.timing.speedup_ci = [0.5, math.inf]
    entry.selection = {**(entry.selection.to_data() if entry.selection else {}),  # type: ignore[assignment]
                       "confirmation": {"ci": [0.0, math.inf], "ratio": math.nan}}
    assert lock.write()
    text = (project / "tuning.lock").read_text()
    assert "Infinity" not in text and "NaN" not in text and ".inf" not in text.lower()
    data = yaml.safe_load(text)["jobs"]["cnn/bs1/cpu"]
    assert data["timing"]["speedup_ci"] == [0.5, None]
    assert data["selection"]["confirmation"] == {"ci": [0, None], "ratio": None}
    code, out = cli("lock", "show", "cnn/bs1/cpu", "--json", "-m", str(project / "tuning.yaml"))
    assert code == 0 and "Infinity" not in out and "NaN" not in out, out


@pytest.mark.slow
def test_a_c_locale_in_a_non_ascii_folder_applies_like_a_utf8_one(tiny_models: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    """``LC_ALL=C PYTHONUTF8=0 trt-routes apply`` in a non-ASCII folder tunes (workers included), and a UTF-8
    locale then finds every job up to date: the same digests."""
    import subprocess
    import sys

    from _project import make_project

    from trt_routes.canonical import digest, utf8

    folder = "m\u00fcnchen-\u00e9t\u00e9"
    escaped = folder.encode().decode("ascii", "surrogateescape")  # how a C locale reads the folder's name
    assert utf8(escaped) == folder.encode() and digest({"p": escaped}) == digest({"p": folder})
    manifest = make_project(tmp_path / folder, tiny_models)
    exe = str(Path(sys.executable).parent / "trt-routes")
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run([exe, "apply"], cwd=manifest.parent, capture_output=True, timeout=600,
                          env={**env, "LC_ALL": "C", "PYTHONUTF8": "0"})
    out = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode == 0 and "Traceback" not in out and "crashed" not in out, out
    proc = subprocess.run([exe, "plan", "--check"], cwd=manifest.parent, capture_output=True, timeout=120,
                          env={**env, "LC_ALL": "C.UTF-8"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode(errors="replace")


def test_read_only_commands_work_on_a_cache_folder_this_user_cannot_write(tuned: Path) -> None:
    """A read-only ``caches/`` (a shared checkout, another user's project): plan, status, explain and trials
    read it; apply refuses with the folder named. As root (who may write anything) the commands run as
    nobody through setpriv, in a folder outside pytest's private tmp."""
    import stat
    import subprocess
    import sys
    import tempfile

    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: no user to whom caches/ is read-only")
        prefix = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    base = Path(tempfile.mkdtemp(prefix="trt-routes-ro-"))
    try:
        project = base / "p"
        shutil.copytree(tuned.parent, project)
        for path in [base, *base.rglob("*")]:
            mode = path.stat().st_mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
            if path.is_dir():
                mode |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
            path.chmod(mode)
        for path in [project / "caches", *(project / "caches").rglob("*")]:
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        exe = str(Path(sys.executable).parent / "trt-routes")
        env = {**os.environ, "COLUMNS": "200", "HOME": str(base), "TRT_ROUTES_MEMO": str(base / "memo")}
        before = sorted(p.name for p in (project / "caches").iterdir())

        def run(*args: str) -> tuple[int, str]:
            proc = subprocess.run([*prefix, exe, *args], cwd=project, capture_output=True, text=True, env=env,
                                  timeout=120)
            return proc.returncode, proc.stdout + proc.stderr

        for command in (["plan", "--check"], ["status"], ["explain", "cnn/bs1/cpu"], ["trials"], ["lock", "check"]):
            code, out = run(*command)
            assert code == 0 and "Traceback" not in out, (command, out)
        code, out = run("trials")
        assert "cnn/bs1/cpu" in out
        code, out = run("apply")
        assert code == 2 and "Traceback" not in out and "caches" in out, out
        assert sorted(p.name for p in (project / "caches").iterdir()) == before  # nothing written there
    finally:
        for path in [base, *base.rglob("*")]:
            with contextlib.suppress(OSError):
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
        shutil.rmtree(base, ignore_errors=True)


def test_a_saved_plan_that_is_a_fifo_is_refused_without_waiting(tuned: Path, tmp_path: Path) -> None:
    project = _copy(tuned, tmp_path)
    os.mkfifo(tmp_path / "plan.json")
    code, out = cli("apply", "--plan", str(tmp_path / "plan.json"), "-m", str(project / "tuning.yaml"))
    assert code == 2 and "FIFO" in out and "plan.json" in out and "Traceback" not in out, out
