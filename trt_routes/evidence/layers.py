"""Layer profiles: where an engine spends its time, per layer (an ONNX Runtime node, a TensorRT layer), and the
comparison of two of them that says where a winner's gain comes from (``explain --layers``).

A profile comes from runs of its own, separate from every timed run (profiling slows what it watches): each
layer's time is its median over the kept runs, ``wall_ms`` the median time of a whole run under the profiler.
Two profiles are aligned by layer name; layers whose names differ are paired by op type and order of
appearance; what is left is only in one of them (a Transpose a layout route added, nodes a fusion removed)."""

from __future__ import annotations

__all__ = ["MAX_PROFILE_BYTES", "Layer", "LayerDiff", "LayerProfile", "LayerRow", "compare"]

import json
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

#: A stored profile is at most this big: the smallest layers are dropped (and counted) beyond it.
MAX_PROFILE_BYTES = 1 << 20
#: The per-layer times of a run sum to within this fraction of the trial's median, or explain says why not.
SUM_TOLERANCE = 0.20


@dataclass(frozen=True)
class Layer:
    name: str
    op: str
    where: str  # the execution provider or device it ran on
    ms: float  # median over the profiled runs


@dataclass(frozen=True)
class LayerProfile:
    backend: str
    route: str
    runs: int
    wall_ms: float | None  # median time of a whole profiled run
    layers: tuple[Layer, ...]
    dropped: int = 0  # layers left out to keep the profile under MAX_PROFILE_BYTES
    note: str = ""

    @property
    def total_ms(self) -> float:
        return sum(layer.ms for layer in self.layers)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "layers": [asdict(layer) for layer in self.layers]}

    def dumps(self) -> str:
        """The profile as JSON of at most MAX_PROFILE_BYTES: the fastest layers are dropped first, the others
        keep their order."""
        by_time = sorted(range(len(self.layers)), key=lambda i: -self.layers[i].ms)
        keep = len(by_time)
        while True:
            kept = sorted(by_time[:keep])
            text = json.dumps({**self.to_json(), "layers": [asdict(self.layers[i]) for i in kept],
                               "dropped": self.dropped + len(by_time) - keep})
            if len(text.encode()) <= MAX_PROFILE_BYTES or not keep:
                return text
            keep -= max(1, keep // 10)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LayerProfile:
        layers = tuple(Layer(str(x["name"]), str(x["op"]), str(x["where"]), float(x["ms"])) for x in data["layers"])
        wall = data.get("wall_ms")
        return cls(str(data["backend"]), str(data["route"]), int(data["runs"]), None if wall is None else float(wall),
                   layers, int(data.get("dropped", 0)), str(data.get("note", "")))


def median_layers(runs: list[list[tuple[str, str, str, float]]]) -> tuple[Layer, ...]:
    """Each layer's median time over ``runs`` (each run: (name, op, where, ms) per layer event, in order; a
    layer that runs twice in one run counts its sum), in the order of the first run."""
    order: dict[str, tuple[str, str]] = {}
    per: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        sums: dict[str, float] = defaultdict(float)
        for name, op, where, ms in run:
            order.setdefault(name, (op, where))
            sums[name] += ms
        for name, ms in sums.items():
            per[name].append(ms)
    return tuple(Layer(name, op, where, statistics.median(per[name])) for name, (op, where) in order.items())


@dataclass(frozen=True)
class LayerRow:
    name: str  # the default's name (or the winner's, for a layer only it has)
    op: str
    default_ms: float | None
    winner_ms: float | None
    paired_by: str  # "name", "op and order", or "" for a layer only one has
    winner_name: str = ""
    default_where: str = ""  # where it ran in each engine ("" in the engine that lacks it)
    winner_where: str = ""

    @property
    def diff_ms(self) -> float:
        return (self.default_ms or 0.0) - (self.winner_ms or 0.0)  # > 0: faster in the winner

    @property
    def moved(self) -> bool:
        """Both engines have the layer and it ran elsewhere: another kernel (a TensorRT tactic) or provider."""
        return bool(self.paired_by) and self.default_where != self.winner_where


@dataclass
class LayerDiff:
    default: LayerProfile
    winner: LayerProfile
    rows: list[LayerRow] = field(default_factory=list)

    @property
    def gain_ms(self) -> float:
        return sum(r.diff_ms for r in self.rows)

    @property
    def only_default(self) -> list[LayerRow]:
        return [r for r in self.rows if r.winner_ms is None]

    @property
    def only_winner(self) -> list[LayerRow]:
        return [r for r in self.rows if r.default_ms is None]

    @property
    def moved(self) -> list[LayerRow]:
        return [r for r in self.rows if r.moved]

    @property
    def same_layers(self) -> bool:
        """The two engines have the same layers by name and op, each run where it ran before (what the
        profiler sees did not change)."""
        return all(r.paired_by == "name" and not r.moved for r in self.rows)

    def largest(self, n: int = 10) -> list[LayerRow]:
        return sorted(self.rows, key=lambda r: -abs(r.diff_ms))[:n]

    def share(self, row: LayerRow) -> float | None:
        """The row's part of the total per-layer difference."""
        gain = self.gain_ms
        return None if abs(gain) < 1e-12 else row.diff_ms / gain


def compare(default: LayerProfile, winner: LayerProfile) -> LayerDiff:
    """Align ``winner``'s layers with ``default``'s: by name, then by op type and order among the unmatched."""
    theirs = {layer.name: layer for layer in winner.layers}
    rows: list[LayerRow] = []
    left: list[Layer] = []
    for layer in default.layers:
        other = theirs.pop(layer.name, None)
        if other is not None and other.op == layer.op:
            rows.append(LayerRow(layer.name, layer.op, layer.ms, other.ms, "name", "", layer.where, other.where))
        else:
            if other is not None:
                theirs[layer.name] = other
            left.append(layer)
    by_op: dict[str, list[Layer]] = defaultdict(list)
    for layer in winner.layers:
        if layer.name in theirs:
            by_op[layer.op].append(layer)
    for layer in left:
        pool = by_op.get(layer.op)
        if pool:
            other = pool.pop(0)
            theirs.pop(other.name, None)
            rows.append(LayerRow(layer.name, layer.op, layer.ms, other.ms, "op and order", other.name, layer.where,
                                 other.where))
        else:
            rows.append(LayerRow(layer.name, layer.op, layer.ms, None, "", "", layer.where))
    rows += [LayerRow(layer.name, layer.op, None, layer.ms, "", "", "", layer.where)
             for layer in winner.layers if layer.name in theirs]
    return LayerDiff(default, winner, rows)


def sums_check(profile: LayerProfile, median_ms: float | None) -> str | None:
    """None when the profile's per-layer times sum to within SUM_TOLERANCE of the trial's median; else what
    the gap is and its likely cause (the time between layers: launches, copies, thread hand-offs)."""
    if median_ms is None or median_ms <= 0:
        return "the trial has no median to compare with"
    total = profile.total_ms
    gap = (median_ms - total) / median_ms
    if abs(gap) <= SUM_TOLERANCE:
        return None
    if gap > 0:
        return (f"the layers sum to {total:.3f} ms, {gap:.0%} less than the trial's median {median_ms:.3f} ms: the "
                "rest is time between layers (launch gaps, copies, thread hand-offs) the profiler does not see")
    return (f"the layers sum to {total:.3f} ms, {-gap:.0%} more than the trial's median {median_ms:.3f} ms: the "
            "profiler slows what it watches, or layers overlap (parallel execution, asynchronous kernels)")
