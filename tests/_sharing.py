"""Helpers for the cache-sharing tests: projects standing in for machines with their own signatures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _project import make_project

from trt_routes.project import Project, open_project
from trt_routes.signature import Environment, detect
from trt_routes.tune.apply import apply


def other_machine() -> Environment:
    """This machine's environment with another CPU model: a second machine with another signature."""
    here = detect()
    return Environment(cpu={**here.cpu, "cpu_model": "Stand-in CPU of machine B"}, gpus=here.gpus)


def machine(manifest: Path, env: Environment | None = None) -> Project:
    return open_project(manifest, env=env or detect())


def fresh_clone(manifest: Path, dest: Path, *, lock: bool = True) -> Path:
    """What a git clone of the project holds: manifest, models and (optionally) tuning.lock; no caches or engines."""
    src = manifest.parent
    dest.mkdir(parents=True)
    shutil.copy(manifest, dest / "tuning.yaml")
    shutil.copytree(src / "models", dest / "models")
    if lock and (src / "tuning.lock").is_file():
        shutil.copy(src / "tuning.lock", dest / "tuning.lock")
    return dest / "tuning.yaml"


def trial_table(project: Project) -> list[tuple[object, ...]]:
    """Every trial row, sorted: compares two caches exactly."""
    with project.open_cache() as cache:
        return [tuple(r) for r in cache.conn.execute("SELECT * FROM trials ORDER BY id")]


def tuned_once(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]) -> Path:
    """Machine A's project applied once (10 trials, two jobs): the session fixture ``sharing_project``
    of conftest.py. Copy it (or ``fresh_clone`` it) before changing anything."""
    manifest = make_project(tmp_path_factory.mktemp("sharing") / "a", tiny_models)
    result = apply(machine(manifest))
    assert result.exit_code == 0 and result.built == 10
    return manifest


def add_foreign_trials(src: Path, dest: Path, when: str | None = None, cpu: str = "Old machine") -> int:
    """``src``'s trials re-keyed under another machine's signature, merged into ``dest``'s cache (as if
    that machine had measured them, at ``when`` when given). Returns how many were added."""
    from trt_routes import canonical
    from trt_routes.share.merge import merge
    from trt_routes.share.rows import expected_group_key, expected_trial_id

    fields = {"cpu_model": cpu, "backend": "onnxruntime"}
    sig = canonical.digest(fields, 16)
    with machine(src).open_cache() as cache:
        trials = cache.all_trials()
    for t in trials:
        t.signature, t.host = sig, f"host of {cpu}"
        t.created_at = when or t.created_at
        t.group_key = expected_group_key(t)
        t.id = expected_trial_id(t)
    with machine(dest).open_cache() as cache:
        return merge(cache, trials, {sig: fields}).added
