"""`apply --executor ray` on one machine with no Ray cluster running: trt-routes starts a Ray instance that offers
the manifest's targets this machine's hardware matches (found on the H200, where a plain `--executor ray` skipped
every GPU job as "no GPU ... on this machine" because no node offered the target's resource). In a subprocess with
a Ray temp folder of its own, so no other test's cluster is found."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _project import make_project

from trt_routes.cache.store import CacheStore
from trt_routes.execute.ray_executor import local_resources
from trt_routes.project import open_project

pytest.importorskip("ray")
pytestmark = pytest.mark.slow


def test_a_ray_instance_started_here_offers_this_machine_s_targets(tmp_path: Path,
                                                                    tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, mode="fast")
    project = open_project(manifest)
    cores = len(os.sched_getaffinity(0))
    assert local_resources(project, 1) == {"trt_routes_target:cpu": cores}  # no GPU target in this manifest
    ray_tmp = tempfile.mkdtemp(prefix="r", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RAY_ADDRESS": ""}
    done = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", "apply", "--executor", "ray", "-m",
                           str(manifest), "--only", "cnn/bs1/*"], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "skipped" not in done.stdout
    with CacheStore(project.cache_path) as cache:
        trials = cache.all_trials()
    assert trials and all(t.meta.node for t in trials)  # each ran as a Ray task
