"""Choosing the executor: the manifest's ``execution`` section, overridden by apply's options.

``prepare`` also fixes the environment the project's jobs are resolved with, because where trials
run is part of what they measure: CPU trials sharing a machine (local ``workers > 1`` or Ray CPU
tasks) get the shared-CPU signature, and a Ray cluster's jobs get the hardware its nodes report."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from trt_routes.errors import UsageError
from trt_routes.execute.base import ExecutionConfig, Executor
from trt_routes.execute.local import LocalExecutor
from trt_routes.execute.pool import PoolExecutor, local_slots

if TYPE_CHECKING:
    from trt_routes.project import Project

EXECUTORS = ("local", "ray")


def execution_config(project: Project, workers: int | None = None, executor: str | None = None,
                     address: str | None = None) -> ExecutionConfig:
    """The manifest's ``execution`` with command-line overrides applied."""
    m = project.loaded.manifest.execution
    kind = executor or m.executor
    if kind not in EXECUTORS:
        raise UsageError(f"unknown executor '{kind}'", f"executors: {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    if address and kind != "ray":
        raise UsageError("--address is for the ray executor", "add --executor ray (or execution.executor: ray)")
    return ExecutionConfig(executor=kind, workers=workers if workers is not None else m.workers,
                           address=address or m.address, cpus_per_trial=m.cpus_per_trial,
                           max_retries=m.max_retries)


def prepare(project: Project, config: ExecutionConfig) -> Callable[[], Executor]:
    """Set up ``project``'s job environment for ``config`` and return a factory for its executor.

    Must run before the project's jobs are resolved (before planning)."""
    if config.executor == "ray":
        from trt_routes.execute.ray_executor import RayExecutor, local_resources

        local = None if config.address else local_resources(project, config.cpus_per_trial)
        ray_executor = RayExecutor(config, local)  # connects now: the cluster's hardware decides the jobs' keys
        env, share = ray_executor.environment(project)
        project.use_environment(env, share)
        return lambda: ray_executor
    cpu_workers = config.workers or 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cpu_workers > cores:
        raise UsageError(f"{cpu_workers} CPU workers asked for, but this process may use {cores} core(s): "
                         "each CPU worker measures on cores of its own",
                         f"use --workers {cores} or fewer (or execution.workers in tuning.yaml)")
    project.use_environment(cpu_share=(cpu_workers, None))
    has_gpu_jobs = any(j.target_data.get("device", {}).get("device") == "gpu" for j in project.jobs)
    if cpu_workers == 1 and not has_gpu_jobs:
        return LocalExecutor  # one worker: exactly the sequential executor
    slots = local_slots(project.job_env, config.workers, cpu_workers)
    return lambda: PoolExecutor(slots)
