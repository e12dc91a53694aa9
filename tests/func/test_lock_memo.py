"""tuning.lock is read through a memo of parsed copies (``caches/lock-memo``, keyed by the file's sha256):
PyYAML took 0.15 s to construct a 200-job lock on every plan; JSON loads it in a few milliseconds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _project import make_project

from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.tune.apply import apply


def test_a_second_read_of_the_same_bytes_does_not_parse_yaml(
        tmp_path: Path, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    assert apply(open_project(manifest)).exit_code == 0
    project = open_project(manifest)
    first = project.read_lock()  # apply's lock write left the memo of this very content
    memo = project.cache_path.parent / "lock-memo"
    assert len(list(memo.glob("*.json"))) >= 1

    def no_yaml(*args: object, **kwargs: object) -> None:
        raise AssertionError("the memo was not used")

    monkeypatch.setattr(yaml, "load", no_yaml)
    again = project.read_lock()
    assert {n: e.to_data() for n, e in again.jobs.items()} == {n: e.to_data() for n, e in first.jobs.items()}


def test_an_edited_lock_is_parsed_anew_and_a_corrupt_memo_is_only_slower(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    assert apply(open_project(manifest)).exit_code == 0
    project = open_project(manifest)
    lock = project.read_lock()
    name = sorted(lock.jobs)[0]
    del lock.jobs[name]
    lock.write()  # a different file: a different key
    assert name not in project.read_lock().jobs
    memo = project.cache_path.parent / "lock-memo"
    for copy in memo.glob("*.json"):
        copy.write_text("{not json")  # torn or garbage: parsed from the YAML again
    assert name not in project.read_lock().jobs and len(project.read_lock().jobs) == len(lock.jobs)
    assert len(list(memo.glob("*.json"))) <= 4  # old copies do not pile up


def test_a_memo_that_cannot_be_written_does_not_fail_the_read(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    assert apply(open_project(manifest)).exit_code == 0
    project = open_project(manifest)
    memo = project.cache_path.parent / "lock-memo"
    import shutil

    shutil.rmtree(memo, ignore_errors=True)
    memo.write_text("a file where the folder should be")
    lock = Lockfile.read(project.lock_path, memo=memo, remember=True)
    assert lock.jobs and memo.is_file()
    del lock.jobs[sorted(lock.jobs)[0]]
    assert lock.write() is True  # the lock is written; only its memo copy could not be


def test_a_write_with_nothing_changed_renders_nothing_and_a_change_is_written(
        tmp_path: Path, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    assert apply(open_project(manifest)).exit_code == 0
    lock = open_project(manifest).read_lock()
    before = lock.path.read_bytes()
    rendered: list[int] = []
    real = Lockfile._render
    monkeypatch.setattr(Lockfile, "_render", lambda self: rendered.append(1) or real(self))
    assert lock.write() is False and not rendered  # unchanged since the read: not even rendered
    name = sorted(lock.jobs)[0]
    del lock.jobs[name]
    assert lock.write() is True and rendered and name not in lock.path.read_text()
    assert lock.write() is False  # written: the new content is what was read now
    assert before != lock.path.read_bytes()
    lock.path.unlink()
    assert lock.write() is True  # the file is gone: written again even though nothing changed


def test_plan_and_a_dry_run_write_nothing_on_a_fresh_checkout(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """A fresh clone: `plan` and `apply --dry-run` create no cache, project lock or memo file."""
    from _project import cli

    manifest = make_project(tmp_path / "p", tiny_models)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for args in (("plan",), ("apply", "--dry-run"), ("plan", "--json"), ("apply", "--dry-run", "--json")):
        code, out = cli(*args, "-m", str(manifest))
        assert code == 0, (args, out)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert apply(open_project(manifest)).exit_code == 0  # and the real apply still works after them


def test_plan_after_apply_reads_the_lock_without_yaml_and_writes_nothing(
        tmp_path: Path, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from _project import cli

    manifest = make_project(tmp_path / "p", tiny_models)
    assert apply(open_project(manifest)).exit_code == 0  # its lock write left the memo of the new lock
    files = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    real = yaml.load

    def only_the_manifest(stream: object, Loader: object = None) -> object:
        assert "lock_version" not in str(stream), "tuning.lock was parsed with PyYAML"
        return real(stream, Loader=Loader)  # type: ignore[arg-type]

    monkeypatch.setattr(yaml, "load", only_the_manifest)
    code, out = cli("plan", "-m", str(manifest))
    assert code == 0 and "up to date" in out.lower(), out
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == files
