"""Running tasks on a machine that shares no disk with the coordinator (a Ray node).

The coordinator ships a task with the bytes it reads (the model file, the input and reference
arrays) instead of paths; the node stages them into a node-local blob cache and a scratch store per
task, runs the unchanged task (``run_trial``/``run_reference``/``run_remeasure``) in an isolated
worker process with its time limit, and returns the result with the bytes of every blob the task produced (engine,
outputs), which the coordinator puts in its own BlobStore. Nothing here imports Ray."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt_routes.backends.base import BuildSpec
from trt_routes.errors import UsageError
from trt_routes.evidence import TrialStatus
from trt_routes.execute.local import LocalExecutor
from trt_routes.execute.remeasure import run_remeasure
from trt_routes.execute.tasks import ReferenceTask, RemeasureTask, TaskResult, TrialTask
from trt_routes.execute.worker import run_reference, run_trial
from trt_routes.files.artifacts import BlobStore, atomic_copy
from trt_routes.files.model_files import ModelFileError, ModelFiles, external_path, read_model_files

#: Blob fields of tasks: inputs read from the store (shipped) and results written to it (returned).
RESULT_BLOBS = ("engine_sha256", "outputs_sha256", "inputs_sha256")
#: Hardware fields that must agree between a job's signature and the machine a trial lands on.
CPU_IDENTITY = ("cpu_model", "arch", "os")


_SHA = re.compile(r"^[0-9a-f]{64}$")


def input_shas(task: Any, store: BlobStore | None = None) -> list[str]:
    """Every blob a task reads from its store: its non-empty ``*_sha`` fields and, given the store, any
    other sha256 anywhere in the task (nested tuples, lists, dicts, dataclasses) that names a stored blob
    (engines of a side-by-side re-measurement, for instance)."""
    found = [v for f in dataclasses.fields(task) if f.name.endswith("_sha")
             and isinstance(v := getattr(task, f.name), str) and v]

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if store is not None and _SHA.match(value) and store.has(value):
                found.append(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name))

    walk(task)
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Shipment:
    """A task as it travels: paths replaced by the digests of the bytes that travel beside it."""

    task: Any
    model_name: str  # the model's file name (kept: backends may look at its suffix)
    model_sha: str
    blob_shas: tuple[str, ...]  # shas of the blobs passed beside the shipment, model first
    #: the model's external-data files: (location relative to the model's folder, sha256)
    side_files: tuple[tuple[str, str], ...] = ()


def ship(task: Any) -> tuple[Shipment, list[tuple[str, Path]]]:
    """The shipment for ``task`` and the (sha, coordinator path) of each blob it needs, model files first."""
    store = BlobStore(Path(task.store_root))
    model = Path(task.spec.model_path)
    if not model.is_file():
        raise UsageError(f"the ray executor ships model files to its nodes; {model} is not a file "
                         "(an entry-point model?)", "run this job with the local executor (--executor local)")
    files = _model_files(model)
    model_sha = files.sha256(model.name)
    side = tuple((rel, files.sha256(rel)) for rel, _ in files.side)
    blobs = [(model_sha, model), *((sha, path) for (_, sha), (_, path) in zip(side, files.side, strict=True))]
    shipped = {sha for sha, _ in blobs}
    blobs += [(sha, store.path(sha)) for sha in input_shas(task, store) if sha not in shipped]
    return Shipment(task, model.name, model_sha, tuple(dict.fromkeys(sha for sha, _ in blobs)), side), blobs


def _model_files(model: Path) -> ModelFiles:
    """The model files of ``model``, remembered while the file is unchanged (read once, not per trial); the
    file alone when it does not read as a model."""
    st = model.stat()
    key = (str(model.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _MODEL_FILES:
        try:
            _MODEL_FILES[key] = read_model_files(model)
        except ModelFileError:  # validate refuses such a model; here the node's build says what is wrong
            _MODEL_FILES[key] = ModelFiles(model)
    return _MODEL_FILES[key]


_MODEL_FILES: dict[tuple[str, int, int], ModelFiles] = {}


class StagingError(RuntimeError):
    """The node's staging folder is not private to this user (someone else could plant files in it)."""


def private_dir(path: Path) -> Path:
    """``path`` as a folder only this user can reach: created with mode 0700, and refused when it is a
    link, belongs to another user, or lets group or others in (a planted folder is never used)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise StagingError(f"{path} is not a private folder of this user (a link, another owner, or open to "
                           f"group/others: mode {stat.S_IMODE(st.st_mode):o}, owner {st.st_uid}); refusing to "
                           "stage models there: remove it, or set TRT_ROUTES_NODE_DIR to a private folder")
    return path


def node_root() -> Path:
    """This node's staging folder for this user: private (0700, owner checked). Each task stages into
    its own fresh folder under it (``stage``)."""
    base = os.environ.get("TRT_ROUTES_NODE_DIR")
    return private_dir(Path(base) if base else Path(tempfile.gettempdir()) / f"trt-routes-node-{os.getuid()}")


def stage(shipment: Shipment, blobs: list[bytes], root: Path) -> tuple[Any, Path]:
    """Write the shipped bytes, each verified by its digest, into a fresh private folder for this task
    (mkdtemp: mode 0700, under the checked ``root``); return the task rewritten to local paths and that
    folder (delete it when done). Nothing already on the node is trusted or served."""
    private_dir(root)
    scratch = Path(tempfile.mkdtemp(prefix="task-", dir=root))
    try:
        store = BlobStore(scratch)
        for sha, data in zip(shipment.blob_shas, blobs, strict=True):
            if hashlib.sha256(data).hexdigest() != sha:
                raise ValueError(f"blob {sha[:12]} arrived corrupted")
            store.put_bytes(data)
        model = scratch / "model" / shipment.model_name
        model.parent.mkdir()
        atomic_copy(store.path(shipment.model_sha), model, expect=shipment.model_sha)
        for rel, sha in shipment.side_files:  # external data where the model names it (inside its folder)
            side = model.parent / external_path(rel)
            side.parent.mkdir(parents=True, exist_ok=True)
            atomic_copy(store.path(sha), side, expect=sha)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return localize(shipment.task, str(model), str(scratch)), scratch


def localize(task: Any, model_path: str, store_root: str) -> Any:
    """``task`` with its store and every BuildSpec it carries (its ``spec``, and the per-engine specs of a
    re-measurement) pointing at the node's copies instead of the coordinator's paths."""

    def local(spec: BuildSpec) -> BuildSpec:
        return dataclasses.replace(spec, model_path=model_path, work_dir="")

    changes: dict[str, Any] = {"store_root": store_root, "spec": local(task.spec)}
    if isinstance(task, RemeasureTask):
        changes["engines"] = tuple((route, local(spec), sha) for route, spec, sha in task.engines)
    return dataclasses.replace(task, **changes)


def collect(result: TaskResult, scratch: Path) -> dict[str, bytes]:
    """The bytes of every blob ``result`` names that the task wrote into its scratch store (read once and
    checked against their name: the coordinator checks them again)."""
    store = BlobStore(scratch)
    out: dict[str, bytes] = {}
    for name in RESULT_BLOBS:
        sha = getattr(result, name)
        if sha and store.exists(sha):
            data = store.path(sha).read_bytes()
            if hashlib.sha256(data).hexdigest() == sha:
                out[sha] = data
    return out


def receive(result: TaskResult, blobs: dict[str, bytes], store: BlobStore) -> TaskResult:
    """Put returned blobs into the coordinator's store (verified by digest)."""
    for sha, data in blobs.items():
        if hashlib.sha256(data).hexdigest() != sha:
            return TaskResult(status=TrialStatus.CRASHED, error=f"blob {sha[:12]} came back corrupted",
                              meta=result.meta)
        store.put_bytes(data)
    return result


@dataclass(frozen=True)
class Checked:
    """A trial, reference or re-measurement task that first checks it landed on the hardware its job was
    keyed for (a side-by-side re-measurement elsewhere would decide the winner on the wrong hardware)."""

    inner: TrialTask | ReferenceTask | RemeasureTask
    expect: dict[str, str]

    @property
    def spec(self) -> Any:
        return self.inner.spec

    def execute(self) -> TaskResult:
        why = hardware_mismatch(self.expect)
        if why:
            return TaskResult(status=TrialStatus.CRASHED, error=why, meta={"mismatch": True})
        if isinstance(self.inner, TrialTask):
            return run_trial(self.inner)
        if isinstance(self.inner, RemeasureTask):
            return run_remeasure(self.inner)
        return run_reference(self.inner)


def hardware_mismatch(expect: dict[str, str]) -> str | None:
    """Why this machine is not the one ``expect`` (a job's device fields) describes, or None."""
    from trt_routes.signature import cpu_fields, gpu_fields

    if expect.get("device") == "gpu":
        gpus = gpu_fields()
        have = gpus[0] if gpus else {}
        keys = [k for k in expect if k != "device"]
    else:
        have = cpu_fields()
        keys = [k for k in CPU_IDENTITY if k in expect]
    diff = [f"{k} {have.get(k, '(none)')} (wanted {expect[k]})" for k in keys if have.get(k) != expect[k]]
    if not diff:
        return None
    return ("landed on hardware that does not match the job's signature: " + ", ".join(diff)
            + "; give the target's Ray resource only to matching nodes")


@dataclass(frozen=True)
class Probe:
    """Reports the hardware of the machine it runs on (from inside an isolated worker)."""

    def execute(self) -> TaskResult:
        from trt_routes.signature import cpu_fields, gpu_fields

        return TaskResult(status=TrialStatus.OK, meta={"cpu": cpu_fields(), "gpus": gpu_fields()})


_HOSTED: dict[tuple[tuple[str, str], ...], LocalExecutor] = {}
_HOSTED_LOCK = threading.Lock()


def hosted_run(task: Any, timeout: float, env: dict[str, str]) -> TaskResult:
    """Run ``task`` in this process's isolated worker for ``env`` (kept between tasks, replaced after a
    failure, like the local executor's). The key includes CUDA_VISIBLE_DEVICES as Ray set it."""
    full = {**env, "TRT_ROUTES_HOST": "ray"}
    key = tuple(sorted({**full, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}.items()))
    with _HOSTED_LOCK:
        executor = _HOSTED.get(key)
        if executor is None:
            for stale in _HOSTED.values():  # one worker per Ray worker process: its GPU may have changed
                stale.close()
            _HOSTED.clear()
            executor = _HOSTED[key] = LocalExecutor(full)
        return executor.run(task, timeout)


def close_hosted() -> None:
    """Stop this process's hosted workers (they also stop on their own when this process exits)."""
    with _HOSTED_LOCK:
        for executor in _HOSTED.values():
            executor.close()
        _HOSTED.clear()


class HardwareMismatch(RuntimeError):
    """The task landed on a node whose hardware differs from its job's signature (retried elsewhere)."""


def run_shipped(shipment: Shipment, timeout: float, env: dict[str, str], blobs: list[bytes],
                expect: dict[str, str] | None) -> tuple[TaskResult, dict[str, bytes]]:
    """Node side of one task: stage, run isolated, collect. Returns (result, produced blobs)."""
    root = node_root()
    task, scratch = stage(shipment, blobs, root)
    try:
        # trials, references and re-measurements check their node first; other tasks run as they are
        checked = (TrialTask, ReferenceTask, RemeasureTask)
        wrapped = Checked(task, expect) if expect and isinstance(task, checked) else task
        result = hosted_run(wrapped, timeout, env)
        if result.meta.get("mismatch"):
            raise HardwareMismatch(result.error)
        return result, collect(result, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
