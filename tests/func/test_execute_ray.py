"""The Ray executor on a real local Ray cluster (two CPU workers, started in-process by the test):
same lockfile routes and trial set as the local executor, a worker killed mid-trial is retried, a
trial whose worker keeps dying is recorded as crashed with the cause, and the cluster's resources
decide which targets run. Skipped where Ray is not installed (`pip install 'trt-routes[ray]'`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _paths import TESTS
from _project import edit_manifest, make_project

from trt_routes.cache.side_tables import remeasurements_for
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.tune.apply import ApplyOptions, apply

ray = pytest.importorskip("ray")

TESTS = TESTS
LANDSCAPE = "-sleep_ms=[0|4] -fault=[none|raise|segv]"  # winner -sleep_ms=0 by 4 ms (4: the default); two fail
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local two-CPU Ray cluster whose node offers the `cpu` target's resource; yields the fault marker."""
    marker = tmp_path_factory.mktemp("marker") / "killed-once"
    env = {"TRT_ROUTES_BACKENDS": "faulty=fault_backend:FaultBackend", "TRT_ROUTES_FAULT_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the coordinator side resolves the same backend
    ray.init(num_cpus=2, resources={"trt_routes_target:cpu": 2}, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env})
    from trt_routes.backends import registry

    registry.get.cache_clear()
    try:
        yield marker
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        registry.get.cache_clear()


def trials(manifest: Path) -> dict[str, tuple[str, str]]:
    project = open_project(manifest)
    with project.open_cache() as cache:
        return {t.id: (t.route, t.status) for t in cache.all_trials()}


def trial_meta(manifest: Path) -> dict[str, dict[str, Any]]:
    project = open_project(manifest)
    with project.open_cache() as cache:
        return {t.route: {"status": t.status, "error": t.error, **t.meta.to_json()} for t in cache.all_trials()}


def test_ray_tunes_the_same_trials_and_routes_as_the_local_executor(
        cluster: Path, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    kw: dict[str, Any] = {"backend": "faulty", "group": LANDSCAPE, "mode": "full"}
    local = make_project(tmp_path / "local", tiny_models, **kw)
    remote = make_project(tmp_path / "ray", tiny_models, **kw)
    # two local CPU workers share the machine as two one-CPU Ray tasks on it do: same signature
    only = ["cnn/bs1/*"]  # one job keeps the test short; the second job adds nothing Ray-specific
    r_local = apply(open_project(local), ApplyOptions(only=only, workers=2))
    r_ray = apply(open_project(remote), ApplyOptions(only=only, executor="ray"))
    assert r_local.exit_code == r_ray.exit_code == 0, [o.error for o in r_ray.outcomes]
    assert trials(remote) == trials(local)  # same trial ids (same keys), same routes and statuses
    assert len(trials(remote)) == 6  # the group includes the default route
    lock_local = Lockfile.read(local.parent / "tuning.lock").jobs
    lock_ray = Lockfile.read(remote.parent / "tuning.lock").jobs
    assert {j: e["route"] for j, e in lock_ray.items()} == {j: e["route"] for j, e in lock_local.items()} == {
        "cnn/bs1/cpu": "-sleep_ms=0"}
    meta = trial_meta(remote)
    segv = meta["-fault=segv -sleep_ms=0"]
    assert segv["status"] == "crashed" and "SIGSEGV" in segv["error"]  # isolated: the Ray worker survives
    assert all(m.get("node") for m in meta.values())  # every trial ran on a Ray node
    # engines and outputs came back through the object store into the coordinator's blob store
    project = open_project(remote)
    for entry in lock_ray.values():
        assert project.store.verify(entry["engine"]["sha256"])
    # the winner (not the default route) was confirmed side by side on a Ray node, engines shipped to it
    assert lock_ray["cnn/bs1/cpu"]["selection"]["confirmation"]["vs_default"]["winner"] == "-sleep_ms=0"
    with project.open_cache() as cache:
        runs = remeasurements_for(cache, lock_ray["cnn/bs1/cpu"]["group_key"])
    assert runs and all(r["meta"].get("node") for r in runs)
    # a second apply through Ray builds nothing
    assert apply(open_project(remote), ApplyOptions(only=only, executor="ray")).built == 0


def test_a_worker_killed_mid_trial_is_retried(cluster: Path, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    cluster.unlink(missing_ok=True)
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-fault=[kill-host-once]")
    result = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"], executor="ray"))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    assert cluster.exists()  # the first attempt really killed its Ray worker
    meta = trial_meta(manifest)["-fault=kill-host-once"]
    assert meta["status"] == "ok" and meta["attempts"] == 2
    assert "WorkerCrashedError" in meta["retried_after"][0] or "died" in meta["retried_after"][0]


def test_a_trial_whose_worker_keeps_dying_is_recorded_with_the_cause(
        cluster: Path, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    cluster.unlink(missing_ok=True)
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-fault=[kill-host-once]")
    edit_manifest(manifest, lambda d: d.update(execution={"executor": "ray", "max_retries": 0}))
    result = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]))
    assert result.exit_code == 0  # the default route still wins
    meta = trial_meta(manifest)["-fault=kill-host-once"]
    assert meta["status"] == "crashed" and meta["attempts"] == 1
    assert "Ray worker failed 1 time(s)" in meta["error"]


def test_targets_the_cluster_does_not_offer_are_skipped(
        cluster: Path, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)

    def other_target(d: dict[str, Any]) -> None:
        d["targets"] = {"edge": {"kind": "cpu"}}
        d["defaults"]["targets"] = ["edge"]

    edit_manifest(manifest, other_target)
    result = apply(open_project(manifest), ApplyOptions(executor="ray"))
    assert result.built == 0
    assert {j.action for j in result.plan.jobs} == {"skipped"}
    assert "no CPU for this target on the Ray cluster: no node offers trt_routes_target:edge" in \
        result.plan.jobs[0].reasons[0]
    from rich.console import Console

    from trt_routes.report.console import render_plan, render_summary

    out = Console(record=True, width=200)
    render_plan(result.plan, out)
    render_summary(result, out)
    text = out.export_text()  # skipped is not "every job is up to date" (every job skipped on the H200 said so)
    assert "job(s) skipped: their target's hardware is not here" in text and "every job is up to date" not in text
    assert "Nothing was built: 2 job(s) skipped here" in text and "Every job is up to date" not in text
