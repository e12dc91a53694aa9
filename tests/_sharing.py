"""Helpers for the cache-sharing tests: projects standing in for machines with their own signatures."""

from __future__ import annotations

import shutil
from pathlib import Path

from trt_routes.project import Project, open_project
from trt_routes.signature import Environment, detect


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
        return [tuple(r) for r in cache.db.execute("SELECT * FROM trials ORDER BY id")]
