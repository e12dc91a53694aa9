"""The local multi-device executor: one real worker process per slot, GPUs pinned with
CUDA_VISIBLE_DEVICES, CPU workers on disjoint cores with bounded threads, results in any order,
and apply with several workers giving the same routes and statuses as with one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from _exec_probe import EnvProbe, spec_for
from _paths import TESTS
from _project import edit_manifest, make_project, routes_and_statuses
from typer.testing import CliRunner

from trt_routes.cli.app import app
from trt_routes.errors import UsageError
from trt_routes.execute.local import LocalExecutor
from trt_routes.execute.pool import PoolExecutor, local_slots
from trt_routes.execute.tasks import WarmupTask
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.signature import Environment, detect
from trt_routes.tune.apply import ApplyOptions, apply, compute_plan

TESTS = TESTS
GPU = {"gpu_name": "Stand-in H200", "compute_capability": "9.0", "sm_count": "132", "gpu_memory_gib": "140",
       "driver_version": "580.1", "cuda_driver": "13.0"}
OTHER_GPU = {**GPU, "gpu_name": "Stand-in L4", "compute_capability": "8.9"}
#: a landscape with an unambiguous winner: every timed run sleeps -sleep_ms (default 4 ms), and two
#: of the fault values fail deterministically (a build error and a segfault)
LANDSCAPE = "-sleep_ms=[0|8] -fault=[none|raise|segv]"




def fake_env(*gpus: dict[str, str]) -> Environment:
    return Environment(cpu=detect().cpu, gpus=tuple(gpus))


def drain(pool: PoolExecutor, n: int) -> list[dict]:  # type: ignore[type-arg]
    return [pool.wait()[1].meta for _ in range(n)]


def test_gpu_workers_are_pinned_one_device_each_and_run_concurrently(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # this process sees two GPUs: physical 3 and 5
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML here: GPU-local cores unknown
    slots = local_slots(fake_env(GPU, GPU))
    cores = sorted(os.sched_getaffinity(0))
    halves = [frozenset(cores[: len(cores) // 2]), frozenset(cores[len(cores) // 2:(len(cores) // 2) * 2])]
    # the host's cores split between the two GPU workers; their compile pools may use every core, at low priority
    pools = {"TORCHINDUCTOR_COMPILE_THREADS": str(len(cores)), "TRT_ROUTES_SPARE_CPUS": ",".join(map(str, cores))}
    assert [(s.name, s.env, s.cpus) for s in slots] == [
        ("gpu0", {"CUDA_VISIBLE_DEVICES": "3", **pools}, halves[0]),
        ("gpu1", {"CUDA_VISIBLE_DEVICES": "5", **pools}, halves[1]),
        ("cpu0", {}, None)]
    device = {"device": "gpu", **GPU}
    with PoolExecutor(slots) as pool:
        assert pool.free_slots({"device": device}) == 2
        for i in range(2):
            pool.submit(EnvProbe(spec_for(device), sleep_s=1.0, label=f"t{i}"), 60)
        assert pool.free_slots({"device": device}) == 0
        assert pool.free_slots({"device": {"device": "cpu", **detect().cpu}}) == 1  # the CPU slot is still free
        metas = drain(pool, 2)
        assert pool.free_slots({"device": device}) == 2
    assert sorted(m["env"]["CUDA_VISIBLE_DEVICES"] for m in metas) == ["3", "5"]
    assert {m["worker"]: frozenset(m["cpus"]) for m in metas} == {"gpu0": halves[0], "gpu1": halves[1]}
    assert sorted(m["worker"] for m in metas) == ["gpu0", "gpu1"]
    first, second = sorted(metas, key=lambda m: m["start"])
    assert second["start"] < first["end"], "the two tasks did not overlap"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3,5"  # the coordinator's own environment is untouched


def test_gpu_workers_get_the_cores_local_to_their_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A stand-in pynvml gives each GPU's PCI bus id; a fake sysfs tree lists the cores local to it
    (GPUs 0 and 1 on one NUMA node, GPU 2 on the other): workers of one node split its cores."""
    from types import SimpleNamespace

    from trt_routes.backends import cuda_device

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))  # an 8-core host, two nodes
    node0, node1 = list(range(4)), list(range(4, 8))
    buses = {0: "00000000:18:00.0", 1: "00000000:19:00.0", 2: "00000000:9A:00.0"}
    for index, bus in buses.items():
        folder = tmp_path / bus[-12:].lower()
        folder.mkdir()
        node = node0 if index < 2 else node1
        (folder / "local_cpulist").write_text(f"{node[0]}-{node[-1]}\n")
    fake = SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                           nvmlDeviceGetHandleByIndex=lambda i: i,
                           nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=buses[h].encode()))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(cuda_device, "SYSFS_PCI", tmp_path)
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    gpus = {s.name: s.cpus for s in local_slots(fake_env(GPU, GPU, GPU)) if s.name.startswith("gpu")}
    assert gpus == {"gpu0": frozenset({0, 1}), "gpu1": frozenset({2, 3}), "gpu2": frozenset({4, 5, 6, 7})}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_helper_processes_start_on_the_spare_cores_at_the_lowest_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a GPU worker's compile pool gets: a process started through start_on_spare_cpus runs on every
    spare core at nice 19, while the starting thread keeps its own cores and priority."""
    import subprocess

    from trt_routes.backends.base import start_on_spare_cpus

    cores = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv("TRT_ROUTES_SPARE_CPUS", ",".join(map(str, cores)))
    child = "import os; print(sorted(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0))"
    out: list[str] = []
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.sched_setaffinity(0, {cores[0]})  # like a pinned worker's own thread
    try:
        start_on_spare_cpus(lambda: out.append(subprocess.run([sys.executable, "-c", child], capture_output=True,
                                                               text=True, check=True).stdout.strip()))
        assert os.sched_getaffinity(0) == {cores[0]}
    finally:
        os.sched_setaffinity(0, cores)
    assert out == [f"{cores} 19"]
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    with pytest.raises(ZeroDivisionError):  # what the start function raises reaches the caller
        start_on_spare_cpus(lambda: 1 / 0)


def test_warm_starts_the_matching_workers_before_their_first_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Warm-up tasks start every matching slot's worker at once (the CPU slot is left alone); a warm-up
    that fails costs nothing but a fresh worker for the first real task."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    device = {"device": "gpu", **GPU}
    with PoolExecutor(local_slots(fake_env(GPU, GPU))) as pool:
        pool.warm([WarmupTask(backend="onnxruntime", spec=spec_for(device))])
        deadline = time.monotonic() + 60
        while pool.workers_started < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.workers_started == 2 and set(pool._runners) == {"gpu0", "gpu1"}
        for i in range(2):
            pool.submit(EnvProbe(spec_for(device), sleep_s=0.5, label=f"t{i}"), 60)
        assert sorted(m["worker"] for m in drain(pool, 2)) == ["gpu0", "gpu1"]
        assert pool.workers_started == 2  # the trials ran in the warmed workers
    with PoolExecutor(local_slots(fake_env(GPU))) as pool:
        pool.warm([WarmupTask(backend="no-such-backend", spec=spec_for(device))])
        assert pool.run(EnvProbe(spec_for(device)), 60).status == "ok"
        assert pool.workers_started == 2  # the failed warm-up's worker was replaced


def test_workers_caps_gpus_per_kind_and_tasks_land_only_on_matching_devices() -> None:
    env = fake_env(GPU, OTHER_GPU, GPU)
    assert [s.name for s in local_slots(env, workers=1)] == ["gpu0", "gpu1", "cpu0"]
    l4 = {"device": "gpu", **OTHER_GPU}
    with PoolExecutor(local_slots(env)) as pool:
        assert pool.free_slots({"device": l4}) == 1
        for i in range(3):  # three tasks for the one L4: they queue behind each other on gpu1
            if pool.free_slots({"device": l4}) == 0:
                drain(pool, 1)
            pool.submit(EnvProbe(spec_for(l4), label=f"t{i}"), 60)
        metas = drain(pool, 1)
    assert {m["worker"] for m in metas} == {"gpu1"}
    with PoolExecutor(local_slots(env)) as pool, pytest.raises(UsageError, match="no local worker runs"):
        pool.submit(EnvProbe(spec_for({"device": "gpu", **GPU, "gpu_name": "B200"})), 60)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPU cores")
def test_cpu_workers_get_disjoint_cores_and_bounded_threads() -> None:
    env = detect().cpu_shared(2)
    assert env.cpu["cpu_workers"] == "2" and int(env.cpu["cpu_count"]) == len(os.sched_getaffinity(0)) // 2
    slots = local_slots(env, cpu_workers=2)
    device = {"device": "cpu", **env.cpu}
    with PoolExecutor(slots) as pool:
        for i in range(2):
            pool.submit(EnvProbe(spec_for(device), sleep_s=0.5, label=f"t{i}"), 60)
        metas = drain(pool, 2)
    cores = [set(m["cpus"]) for m in metas]
    assert not cores[0] & cores[1] and all(len(c) == int(env.cpu["cpu_count"]) for c in cores)
    for m in metas:
        assert m["env"]["OMP_NUM_THREADS"] == m["env"]["TRT_ROUTES_CPU_THREADS"] == env.cpu["cpu_count"]
    assert len(os.sched_getaffinity(0)) >= 2  # the coordinator's own affinity is restored after spawning


def test_workers_bound_numpys_blas_pool_unless_the_user_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's idle OpenBLAS threads spin after each call and would compete with the timed runs."""
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with LocalExecutor() as executor:
        assert executor.run(EnvProbe(), 60).meta["env"]["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    with LocalExecutor() as executor:
        assert executor.run(EnvProbe(), 60).meta["env"]["OPENBLAS_NUM_THREADS"] == "3"


def test_run_keeps_results_that_finish_meanwhile_for_wait() -> None:
    device = {"device": "gpu", **GPU}
    with PoolExecutor(local_slots(fake_env(GPU, GPU))) as pool:
        slow = pool.submit(EnvProbe(spec_for(device), sleep_s=0.3, label="slow"), 60)
        t0 = time.perf_counter()
        quick = pool.run(EnvProbe(spec_for(device), label="quick"), 60)
        assert quick.meta["label"] == "quick"
        time.sleep(0.5)
        ticket, result = pool.wait()
        assert ticket == slow and result.meta["label"] == "slow"
        assert time.perf_counter() - t0 < 30


@pytest.mark.slow
def test_two_cpu_workers_tune_the_same_routes_and_record_the_shared_cpu(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    kw = {"backend": "faulty", "group": LANDSCAPE, "mode": "full"}
    one = make_project(tmp_path / "one", tiny_models, **kw)  # type: ignore[arg-type]
    two = make_project(tmp_path / "two", tiny_models, **kw)  # type: ignore[arg-type]
    r1 = apply(open_project(one), ApplyOptions(only=["cnn/bs1/*"]))
    r2 = apply(open_project(two), ApplyOptions(only=["cnn/bs1/*"], workers=2))
    assert r1.exit_code == r2.exit_code == 0
    assert routes_and_statuses(one) == routes_and_statuses(two)
    statuses = routes_and_statuses(two)["cnn/bs1/cpu"]
    assert len(statuses) == 7 and statuses["-fault=segv -sleep_ms=0"] == "crashed"
    assert statuses["-fault=raise -sleep_ms=8"] == "build-error"
    for manifest in (one, two):
        assert Lockfile.read(manifest.parent / "tuning.lock").jobs["cnn/bs1/cpu"]["route"] == "-sleep_ms=0"
    entry = Lockfile.read(two.parent / "tuning.lock").jobs["cnn/bs1/cpu"]
    assert entry["signature"]["fields"]["cpu_workers"] == "2"
    assert "cpu_workers" not in Lockfile.read(one.parent / "tuning.lock").jobs["cnn/bs1/cpu"]["signature"]["fields"]
    project = open_project(two)
    with project.open_cache() as cache:
        workers = {t.meta.worker for t in cache.all_trials()}
    assert workers == {"cpu0", "cpu1"}
    # without the flag the shared-CPU trials are another signature's: plan wants to tune again...
    with project.open_cache() as cache:
        assert compute_plan(project, cache, project.read_lock(), ["cnn/bs1/*"]).jobs[0].action == "tune"
    # ...and with the manifest's execution.workers they are this project's trials: nothing to do
    edit_manifest(two, lambda d: d.update(execution={"workers": 2}))
    project = open_project(two)
    with project.open_cache() as cache:
        assert compute_plan(project, cache, project.read_lock(), ["cnn/bs1/*"]).jobs[0].action == "up-to-date"


def test_cli_rejects_bad_execution_options(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    runner = CliRunner()
    res = runner.invoke(app, ["apply", "-m", str(manifest), "--workers", "0"])
    assert res.exit_code == 2 and "--workers must be at least 1" in res.output
    res = runner.invoke(app, ["apply", "-m", str(manifest), "--address", "ray://x:10001"])
    assert res.exit_code == 2 and "--executor ray" in res.output
    res = runner.invoke(app, ["apply", "-m", str(manifest), "--executor", "dask"])
    assert res.exit_code == 2 and "unknown executor 'dask'" in res.output
    assert not (manifest.parent / "tuning.lock").exists()
