"""Environment detection and signatures: what measured facts depend on besides the job.

A signature is a flat dict of named string fields, hashed with the one canonical serializer and
diffable field by field. Volatile values (times, hostnames, clocks) never enter it."""

from __future__ import annotations

__all__ = ["Environment", "Signature", "cpu_fields", "detect", "gpu_fields", "job_signature"]

import fnmatch
import os
import platform
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from trt_routes import PROTOCOL_VERSION, canonical
from trt_routes.manifest.schema import Target


@dataclass(frozen=True)
class Signature:
    """Named fields plus their hash."""

    fields: dict[str, str]

    @property
    def hash(self) -> str:
        return canonical.digest(self.fields, 16)

    def diff(self, old: dict[str, str]) -> list[str]:
        """Human lines 'field: old -> new' for every field that differs from ``old``."""
        out = []
        for key in sorted(set(old) | set(self.fields)):
            a, b = old.get(key, "(none)"), self.fields.get(key, "(none)")
            if a != b:
                out.append(f"{key} {a} -> {b}")
        return out


@dataclass(frozen=True)
class Environment:
    """What this machine has: its CPU and its GPUs (each a dict of signature fields)."""

    cpu: dict[str, str]
    gpus: tuple[dict[str, str], ...] = field(default_factory=tuple)
    #: where the hardware was looked for, as skip reasons say it ("on this machine", "on the Ray cluster: ...")
    where: str = "on this machine"

    def match(self, target: Target) -> dict[str, str] | None:
        """Hardware fields of the first device matching ``target``, or None when absent."""
        if target.kind == "cpu":
            return {"device": "cpu", **self.cpu} if self.cpu else None
        for gpu in self.gpus:
            if target.name and not fnmatch.fnmatch(gpu.get("gpu_name", ""), target.name):
                continue
            if target.compute_capability and gpu.get("compute_capability") != target.compute_capability:
                continue
            return {"device": "gpu", **gpu}
        return None

    def cpu_shared(self, workers: int, cores_per_worker: int | None = None) -> Environment:
        """This environment as seen by one of ``workers`` concurrent CPU trials, each bounded to
        ``cores_per_worker`` cores (default: an equal share). Such trials are measured on fewer cores,
        next to neighbours sharing caches and memory bandwidth, so they are different facts: the
        signature says so (``cpu_count`` = the trial's cores, ``cpu_workers``) and they never mix
        with trials measured alone. One worker leaves the environment unchanged."""
        if workers <= 1:
            return self
        cores = int(self.cpu.get("cpu_count", "1") or 1)
        per = cores_per_worker or max(1, cores // workers)
        return Environment(cpu={**self.cpu, "cpu_count": str(per), "cpu_workers": str(workers)},
                           gpus=self.gpus)

    def describe_missing(self, target: Target) -> str:
        if target.kind == "cpu":
            return f"no CPU for this target {self.where}"
        want = " and ".join(
            p for p in (f"name '{target.name}'" if target.name else "",
                        f"compute capability {target.compute_capability}"
                        if target.compute_capability else "") if p
        )
        have = ", ".join(g.get("gpu_name", "?") for g in self.gpus) or "no NVIDIA GPU"
        return f"no GPU matching {want} {self.where} (found: {have})"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_fields() -> dict[str, str]:
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": str(len(cores)),
        "arch": platform.machine(),
        "os": platform.system(),
    }


def gpu_fields() -> list[dict[str, str]]:
    """GPUs through cuda-python / NVML where present; [] on a CPU-only machine."""
    if os.environ.get("TRT_ROUTES_NO_GPU"):
        return []
    try:
        from trt_routes.backends.cuda_device import gpu_fields as detect
    except ImportError:
        return []
    try:
        return detect()
    except Exception:  # detection is best effort: a broken driver means "no GPU here"
        return []


@cache
def detect() -> Environment:
    """This machine's environment (detected once per process)."""
    return Environment(cpu=cpu_fields(), gpus=tuple(gpu_fields()))


def job_signature(hardware: dict[str, str], software: dict[str, str], catalog_digest: str,
                  extra: dict[str, Any] | None = None) -> Signature:
    """The signature of a job: matched hardware + backend software + catalog + protocol."""
    fields = {**hardware, **software, "protocol": PROTOCOL_VERSION}
    if "catalog_digest" not in software:
        fields["catalog_digest"] = catalog_digest
    for key, value in (extra or {}).items():
        fields[key] = str(value)
    return Signature({k: str(v) for k, v in fields.items()})
