"""Ray executor: every trial is a Ray task on a node that offers its target's resource.

Mapping (documented in the README): a trial of target ``T`` asks for ``{"trt_routes_target:T": 1}``
plus one GPU (GPU targets) or ``execution.cpus_per_trial`` CPUs (CPU targets). Start each node with
the resources of the targets its hardware matches, e.g. ``ray start --resources
'{"trt_routes_target:h200": 8}'`` on an 8-GPU H200 node. Before planning, one probe per target
reports the hardware of a node offering it; the jobs are keyed with that hardware, and every trial
checks on arrival that its node matches (a mismatch is retried elsewhere, then fails with the cause).

Model files and reference arrays travel through Ray's object store (``ray.put`` of their bytes, once
per apply); engines and outputs come back as bytes and the coordinator, the only writer, puts them
in its BlobStore and records the trial. A trial whose worker process or node dies is resubmitted up
to ``execution.max_retries`` times; then it is recorded as ``crashed`` with every cause."""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes.errors import BackendUnavailable, UsageError
from trt_routes.evidence import TrialStatus
from trt_routes.execute import remote
from trt_routes.execute.base import ExecutionConfig, InFlightRun, Target, task_target
from trt_routes.execute.pool import THREAD_VARS
from trt_routes.execute.tasks import TaskResult
from trt_routes.files.artifacts import BlobStore
from trt_routes.signature import Environment

if TYPE_CHECKING:
    from trt_routes.project import Project

RESOURCE_PREFIX = "trt_routes_target:"
INSTALL_HINT = "pip install 'trt-routes[ray]' (on the coordinator and on every node)"


def target_resource(target: str) -> str:
    """The Ray custom resource a node offers to take trials of manifest target ``target``."""
    return f"{RESOURCE_PREFIX}{target}"


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise BackendUnavailable(f"the ray executor needs Ray: {exc}", INSTALL_HINT) from exc
    return ray


def _node_task(shipment: remote.Shipment, timeout: float, env: dict[str, str], expect: dict[str, str] | None,
               *blobs: bytes) -> tuple[TaskResult, dict[str, bytes]]:
    """What runs in a Ray worker (top-level args, so Ray resolves the blob refs to bytes)."""
    import ray

    result, produced = remote.run_shipped(shipment, timeout, env, list(blobs), expect)
    result.meta = {**result.meta, "node": ray.get_runtime_context().get_node_id()}
    return result, produced


def _node_probe(env: dict[str, str]) -> dict[str, Any]:
    import ray

    result = remote.hosted_run(remote.Probe(), 120, env)
    return {**result.meta, "node": ray.get_runtime_context().get_node_id(), "error": result.error}


class _Flight:
    """One submitted task: what it takes to resubmit it, and the causes of earlier attempts."""

    def __init__(self, ticket: int, args: tuple[Any, ...], options: dict[str, Any], store: BlobStore) -> None:
        self.ticket = ticket
        self.args = args
        self.options = options
        self.store = store
        self.causes: list[str] = []
        self.target = ""


class RayExecutor(InFlightRun):
    """Runs trials as Ray tasks; ``free_slots`` is the cluster's capacity for the target minus what runs."""

    def __init__(self, config: ExecutionConfig, local: Mapping[str, int] | None = None) -> None:
        """Connect to the cluster at ``config.address``; without one, to a cluster running on this machine
        (``ray start --head``), else start a Ray instance here offering ``local`` (target resource -> count:
        the manifest's targets this machine's hardware matches, so one machine works without ``ray start``)."""
        ray = _ray()
        self.ray = ray
        self.config = config
        self._owns = False
        if not ray.is_initialized():
            try:
                if config.address:
                    ray.init(address=config.address, log_to_driver=False, include_dashboard=False)
                else:
                    try:
                        ray.init(address="auto", log_to_driver=False, include_dashboard=False)
                    except ConnectionError:  # no cluster here: start one that offers this machine's targets
                        ray.init(resources=dict(local or {}), log_to_driver=False, include_dashboard=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise UsageError(f"cannot connect to the Ray cluster at {config.address or '(default)'}: {exc}",
                                 "start one with `ray start --head`, or pass --address ray://HOST:10001") from exc
            self._owns = True
        self._task = ray.remote(_node_task)  # retries are ours (max_retries=0 below): we record every cause
        self._probe = ray.remote(_node_probe)
        self._refs: dict[Any, _Flight] = {}
        self._blob_refs: dict[str, Any] = {}
        self._done: dict[int, TaskResult] = {}
        self._running: dict[str, int] = {}
        self._tickets = 0
        self._capacity: dict[str, int] = {}

    # -- the cluster's hardware ------------------------------------------------------------
    def _resources(self, target: Mapping[str, Any]) -> dict[str, Any]:
        name = str(target.get("target", ""))
        if target.get("kind") == "gpu":
            return {"num_gpus": 1, "num_cpus": 1, "resources": {target_resource(name): 1}}
        return {"num_cpus": self.config.cpus_per_trial, "resources": {target_resource(name): 1}}

    def _thread_env(self, target: Mapping[str, Any]) -> dict[str, str]:
        if target.get("kind") == "gpu":
            return {}
        return {v: str(self.config.cpus_per_trial) for v in THREAD_VARS}

    def capacity(self, target: Mapping[str, Any]) -> int:
        """Trials of ``target`` the whole cluster can run at once."""
        name = str(target.get("target", ""))
        if name not in self._capacity:
            total = self.ray.cluster_resources()
            slots = int(total.get(target_resource(name), 0))
            if target.get("kind") == "gpu":
                slots = min(slots, int(total.get("GPU", 0)))
            else:
                slots = min(slots, int(total.get("CPU", 0)) // self.config.cpus_per_trial)
            if self.config.workers:  # --workers caps the trials in flight per target
                slots = min(slots, self.config.workers)
            self._capacity[name] = slots
        return self._capacity[name]

    def environment(self, project: Project) -> tuple[Environment, tuple[int, int | None]]:
        """The hardware the project's targets get on this cluster (one probe per target), and how CPU
        trials share a node. A target no node offers has no hardware: its jobs are skipped, and say which
        resource no node offers."""
        manifest = project.loaded.manifest
        cpu: dict[str, str] = {}
        gpus: list[dict[str, str]] = []
        share: tuple[int, int | None] = (1, None)
        nodes = {n["NodeID"]: n for n in self.ray.nodes() if n.get("Alive")}
        for name, target in sorted(manifest.targets.items()):
            data = {**target.model_dump(), "target": name}
            if self.capacity(data) < 1:
                continue
            opts = self._resources(data)
            probe = self._probe.options(**opts, max_retries=self.config.max_retries)
            info = self.ray.get(probe.remote(self._thread_env(data)))
            if info.get("error"):
                raise UsageError(f"probing the Ray node for target '{name}' failed: {info['error']}")
            if target.kind == "cpu":
                if cpu and cpu != info["cpu"]:
                    raise UsageError("CPU targets landed on nodes with different CPUs",
                                     "give each CPU target's resource to one kind of node")
                cpu = info["cpu"]
                node_cpus = int(nodes.get(info["node"], {}).get("Resources", {}).get("CPU", 1))
                per = self.config.cpus_per_trial
                together = min(node_cpus // per, self.config.workers or node_cpus)  # trials sharing a node
                share = (together, per) if together > 1 else (1, None)
            else:
                gpus.extend(g for g in info["gpus"] if g not in gpus)
        unserved = sorted(name for name, target in manifest.targets.items()
                          if self.capacity({**target.model_dump(), "target": name}) < 1)
        where = ("on the Ray cluster: no node offers " + ", ".join(target_resource(n) for n in unserved)
                 + " (start nodes with `ray start --resources '{\"" + target_resource(unserved[0])
                 + "\": N}'`)") if unserved else "on the Ray cluster"
        return Environment(cpu=cpu, gpus=tuple(gpus), where=where), share

    # -- dispatch ---------------------------------------------------------------------------
    def free_slots(self, target: Target | None) -> int:
        target = target or {}
        return max(0, self.capacity(target) - self._running.get(str(target.get("target", "")), 0))

    def _put(self, sha: str, path: Path) -> Any:
        if sha not in self._blob_refs:
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != sha:
                raise UsageError(f"{path} changed while trt-routes was reading it", "run apply again")
            self._blob_refs[sha] = self.ray.put(data)
        return self._blob_refs[sha]

    def submit(self, task: Any, timeout: float) -> int:
        target = task_target(task)
        if self.capacity(target) < 1:
            resource = target_resource(str(target.get("target", "")))
            raise UsageError(f"no node of the Ray cluster offers the resource {resource}",
                             f"start matching nodes with ray start --resources '{{\"{resource}\": N}}'")
        shipment, blobs = remote.ship(task)
        refs = [self._put(sha, path) for sha, path in blobs]
        device = target.get("device") or None
        self._tickets += 1
        flight = _Flight(self._tickets, (shipment, timeout, self._thread_env(target), device, *refs),
                         self._resources(target), BlobStore(Path(task.store_root)))
        flight.target = str(target.get("target", ""))
        self._launch(flight)
        self._running[flight.target] = self._running.get(flight.target, 0) + 1
        return flight.ticket

    def _launch(self, flight: _Flight) -> None:
        self._refs[self._task.options(**flight.options, max_retries=0).remote(*flight.args)] = flight

    def _retryable(self, exc: Exception) -> bool:
        ex = self.ray.exceptions
        system = (ex.WorkerCrashedError, ex.NodeDiedError, ex.LocalRayletDiedError, ex.ObjectLostError,
                  ex.OwnerDiedError, ex.RaySystemError)
        if isinstance(exc, system):
            return True
        return isinstance(exc, ex.RayTaskError) and "HardwareMismatch" in str(exc)

    def _take(self) -> tuple[int, TaskResult]:
        while True:
            if not self._refs:
                raise RuntimeError("wait() with nothing submitted")
            ready, _ = self.ray.wait(list(self._refs), num_returns=1)
            flight = self._refs.pop(ready[0])
            try:
                result, produced = self.ray.get(ready[0])
            except Exception as exc:
                cause = _cause(exc)
                flight.causes.append(cause)
                if self._retryable(exc) and len(flight.causes) <= self.config.max_retries:
                    time.sleep(0.2 * len(flight.causes))
                    self._launch(flight)  # elsewhere, wherever Ray finds the resources
                    continue
                tries = len(flight.causes)
                result = TaskResult(status=TrialStatus.CRASHED, error=f"the trial's Ray worker failed {tries} time(s): "
                                    + " | ".join(flight.causes), meta={"attempts": tries})
                produced = {}
            else:
                result = remote.receive(result, produced, flight.store)
                if flight.causes:
                    result.meta = {**result.meta, "attempts": len(flight.causes) + 1,
                                   "retried_after": flight.causes}
            self._running[flight.target] -= 1
            return flight.ticket, result

    def _has_room(self, task: Any) -> bool:
        return self.free_slots(task_target(task)) >= 1 or not self._refs

    def close(self) -> None:
        for ref in list(self._refs):
            with contextlib.suppress(Exception):  # best effort: the cluster may be gone already
                self.ray.cancel(ref, force=True)
        self._refs.clear()
        self._blob_refs.clear()
        if self._owns:
            self.ray.shutdown()
            self._owns = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cause(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def local_resources(project: Project, cpus_per_trial: int) -> dict[str, int]:
    """Target resource -> count for a Ray instance started on this machine: each CPU target its cores over
    ``cpus_per_trial``, each GPU target the GPUs here that match it (targets this machine lacks: none)."""
    from trt_routes.signature import detect

    here = detect()
    out: dict[str, int] = {}
    for name, target in project.loaded.manifest.targets.items():
        if target.kind == "cpu":
            out[target_resource(name)] = max(1, int(here.cpu.get("cpu_count", "1") or 1) // cpus_per_trial)
        elif count := sum(1 for gpu in here.gpus if Environment(cpu={}, gpus=(gpu,)).match(target) is not None):
            out[target_resource(name)] = count
    return out
