"""What a trial stores beside its samples (``TrialRecord.meta``), as a typed record.

The worker writes it (``execute/worker.py``, ``execute/protocol.py``), executors add where the trial ran,
a tuning-cache import says where the row came from; the busy-host verdict, the selection's facts and loss
points read it. In the cache and in bundles it is one JSON object; ``from_json`` keeps every key it does not
know, and every value of the wrong type, in ``extra``, and ``to_json`` writes them back: a row written by a
newer or older version reads and writes back the same object. A plain dataclass: workers import it, and they
do not import pydantic."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: field type -> the check a JSON value must pass to be read into it (else it stays in ``extra``)
_CHECKS = {
    "float | None": _is_number,
    "int | None": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "bool | None": lambda v: isinstance(v, bool),
    "str | None": lambda v: isinstance(v, str),
    "list[str] | None": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "list[float] | None": lambda v: isinstance(v, list) and all(_is_number(x) for x in v),
    "dict[str, Any] | None": lambda v: isinstance(v, dict),
}


@dataclass
class TrialMeta:
    """A trial's metadata; None: not recorded (the key is absent from the JSON)."""

    # the noise context while it was timed (execute/protocol.NoiseContext; evidence/noise judges it)
    loadavg: float | None = None
    cpu_count: int | None = None
    cpu_ticks: float | None = None  # /proc/stat clock ticks its CPU shares were read over
    cpu_busy: float | None = None  # share of its CPUs busy, all processes
    cpu_busy_others: float | None = None  # share other processes kept busy
    gpu: dict[str, Any] | None = None  # GPU readings before and after: {name: [before, after]}
    # the warm-up (execute/protocol.settle)
    settle_runs: int | None = None
    settled: bool | None = None
    settle_medians_ms: list[float] | None = None
    # what the measurement yields besides the samples (evidence/facts), and where the losses were worst
    facts: dict[str, Any] | None = None
    profile_points: list[str] | None = None  # the profile points its outputs were checked at
    loss_points: dict[str, Any] | None = None  # {output: {metric: point}} of each loss not at opt
    # where and how it ran
    worker_s: float | None = None  # the task's wall time inside the worker
    worker: str | None = None  # the pool slot
    node: str | None = None  # the Ray node
    attempts: int | None = None  # Ray: the tries a task took when a node failed under it
    imported: dict[str, Any] | None = None  # a trtexec / Torch-TensorRT tuning cache row: its file and line
    #: every other key, and every value of the wrong type, as read: written back as it was
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> TrialMeta:
        if not data:  # every light row (plan reads no meta)
            return cls()
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            check = _FIELD_CHECKS.get(key)
            if check is not None and value is not None and check(value):
                known[key] = value
            else:
                extra[key] = value
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, Any]:
        out = {name: value for name in _TYPES if (value := getattr(self, name)) is not None}
        return {**out, **self.extra}


_TYPES = {f.name: str(f.type) for f in fields(TrialMeta) if f.name != "extra"}
if set(_TYPES.values()) - set(_CHECKS):  # pragma: no cover - guards a new field's annotation
    raise RuntimeError(f"evidence/meta.py has no check for {sorted(set(_TYPES.values()) - set(_CHECKS))}")
_FIELD_CHECKS = {name: _CHECKS[kind] for name, kind in _TYPES.items()}
