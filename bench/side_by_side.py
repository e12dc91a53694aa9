"""Benchmark: side-by-side re-measurement of ONNX Runtime engines, sessions kept loaded or loaded per turn.

The confirmation times a baseline and its challengers in turns in one worker and pairs each challenger turn with
a baseline turn beside it. This runs that very code (``trt_routes.execute.remeasure.run_remeasure``, here the
fixed schedule of ``rounds`` rounds, B C1 B C2 B C3 B C1 ...; see ``--layouts`` for apply's) on A/A engines: the
quickstart model's default-route engine, built once by the ONNX Runtime backend, under four labels. Every
paired ratio's true value is 1. Two variants, interleaved per repeat:

- **kept**: every session loaded once and kept loaded while the others are timed (``reload_each_turn`` off:
  the protocol before the change);
- **reload**: each turn loads its engine afresh, warms it up and releases it (ONNX Runtime's default now).

Per variant: the median of the paired ratios, the share of ratios outside [0.8, 1.25] (a turn that took
another engine's time), and the worst challenger's median. Also a true difference, to check the reload
variant still sees one: the same model with ``-intra_op_num_threads=1`` against the default, alone (each in a
fresh process-local session, as a trial times it) and side by side.

``--layouts``: instead, the two layouts of the confirmation's turns on the same A/A engines, reloaded each turn,
interleaved per repeat: **adjacent** (B C1 B C2 B C3 B ...: design "sequential-1", one baseline turn per
challenger turn) and **shared** (C1 B C2, C3 B C1, ...: ``confirm.run_sequential`` since design
"sequential-2", one baseline turn for two challenger turns), each for ``rounds`` full rounds (no stopping).
Per layout: the A/A ratio median, the medians of the ratios whose challenger turn came before its baseline turn
and after it (a turn's position must not tilt a ratio), the share off by > 25%, the worst challenger's median,
and the turns per ratio.

Run: python bench/side_by_side.py [--model resnet-like] [--shape bs8] [--rounds 15] [--repeats 3] [--layouts]"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trt_routes.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from trt_routes.execute.protocol import SettleSpec  # noqa: E402
from trt_routes.execute.remeasure import run_remeasure  # noqa: E402
from trt_routes.execute.tasks import RemeasureTask  # noqa: E402
from trt_routes.files.artifacts import BlobStore  # noqa: E402
from trt_routes.project import open_project  # noqa: E402
from trt_routes.routes import parse_route  # noqa: E402
from trt_routes.selection import Remeasurement, run_sequential, schedule  # noqa: E402


class KeptSessions(OnnxRuntimeBackend):
    """ONNX Runtime with every side-by-side session kept loaded (the protocol before ``reload_each_turn``)."""

    name = "onnxruntime-kept"
    reload_each_turn = False


os.environ["TRT_ROUTES_BACKENDS"] = f"{KeptSessions.name}=side_by_side:KeptSessions"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def engines(job_name: str, routes: dict[str, str], work: Path) -> tuple[BlobStore, dict[str, Any], str]:
    """Build each distinct route of ``routes`` (label -> route) once into a blob store; the reference inputs."""
    import numpy as np

    project = open_project(REPO / "tuning.yaml")
    job = next(j for j in project.jobs if j.name == job_name)
    store = BlobStore(work / "store")
    backend = OnnxRuntimeBackend()
    built: dict[str, str] = {}
    out: dict[str, Any] = {}
    for label, route in routes.items():
        spec = job.build_spec(parse_route(route))
        if route not in built:
            path = work / f"engine{len(built)}.onnx"
            backend.build(spec, path)
            built[route] = store.put_file(path, move=True)
        out[label] = (spec, built[route])
    rng = np.random.default_rng(0)
    feeds = {name: rng.random(tuple(dims["opt"]), dtype=np.float32) for name, dims in
             job.build_spec(parse_route("")).profile.items()}
    return store, out, store.put_arrays(feeds)


class NeverStops:
    """A stand-in for ``confirm.Stopping`` that decides nothing, so ``run_sequential`` lays out ``rounds`` full
    rounds of its turns (the two attributes it reads)."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def verdict(self, ratios: list[float]) -> tuple[None, int]:
        return None, len(ratios)


def shared_order(baseline: str, challengers: list[str], rounds: int) -> tuple[str, ...]:
    """The turns ``run_sequential`` takes when no challenger is decided early (C1 B C2, C3 B C1, ...)."""
    return tuple(r for r, _ in run_sequential(baseline, challengers, NeverStops(rounds),  # type: ignore[arg-type]
                                              lambda route, k: 1.0))


def remeasure(backend: str, store: BlobStore, built: dict[str, Any], inputs: str, rounds: int,
              iterations: int, order: tuple[str, ...] | None = None) -> Remeasurement:
    labels = list(built)
    task = RemeasureTask(backend=backend, spec=built[labels[0]][0], store_root=str(store.root), inputs_sha=inputs,
                         engines=tuple((label, spec, sha) for label, (spec, sha) in built.items()),
                         order=order or tuple(schedule(labels[0], labels[1:], rounds)), iterations=iterations,
                         warmup=10, settle=SettleSpec())
    result = run_remeasure(task)
    assert result.status == "ok", result.error
    return Remeasurement(labels[0], tuple(labels[1:]), tuple((r, float(t)) for r, t in result.meta["slots"]))


def summary(ms: list[Remeasurement]) -> tuple[float, float, float]:
    ratios = [x for m in ms for c in m.challengers for x in m.paired_ratios(c)]
    worst = max(statistics.median(m.paired_ratios(c)) for m in ms for c in m.challengers)
    off = sum(1 for x in ratios if x < 0.8 or x > 1.25) / len(ratios)
    return statistics.median(ratios), off, worst


def positioned(m: Remeasurement) -> tuple[list[float], list[float]]:
    """A/A ratios whose challenger turn came before its baseline turn, and those after it (``Remeasurement.pairs``)."""
    before, after = [], []
    for c in m.challengers:
        for i, j in m.pairs(c):
            (before if i < j else after).append(m.slots[i][1] / m.slots[j][1])
    return before, after


def layouts(job: str, rounds: int, iterations: int, repeats: int) -> None:
    """``--layouts``: adjacent against shared baseline turns on A/A engines (see the module docstring)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        store, aa, inputs = engines(job, {"A": "", "B": "", "C": "", "D": ""}, Path(tmp) / "aa")
        labels = list(aa)
        orders = {"adjacent": tuple(schedule(labels[0], labels[1:], rounds)),
                  "shared": shared_order(labels[0], labels[1:], rounds)}
        runs: dict[str, list[Remeasurement]] = {name: [] for name in orders}
        for _ in range(repeats):  # the layouts alternate, so drift of the host hits both
            for name, order in orders.items():
                runs[name].append(remeasure("onnxruntime", store, aa, inputs, rounds, iterations, order))
    print("\n| layout | turns per ratio | A/A ratio median | challenger before / after its baseline turn | "
          "off by > 25% | worst challenger median |")
    print("| --- | --- | --- | --- | --- | --- |")
    last = []
    for name, ms in runs.items():
        med, off, worst = summary(ms)
        before = [x for m in ms for x in positioned(m)[0]]
        after = [x for m in ms for x in positioned(m)[1]]
        ratios = len(before) + len(after)
        per = sum(len(m.slots) for m in ms) / max(1, ratios)
        b = f"{statistics.median(before):.3f}" if before else "-"
        print(f"| {name} | {per:.2f} | {med:.3f} | {b} / {statistics.median(after):.3f} ({len(before)} / "
              f"{len(after)}) | {off:.0%} | {worst:.3f} |")
        last.append(f"{name}_median={med:.3f} {name}_worst={worst:.3f} {name}_turns_per_ratio={per:.2f}")
    print(f"\n{time.perf_counter() - t0:.0f} s. Expected: both at 1.00, before and after alike, shared at 1.5 turns "
          "per ratio against 2.")
    print(" ".join(last))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet-like")
    ap.add_argument("--shape", default="bs8")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layouts", action="store_true", help="compare the turns' layouts instead (see above)")
    args = ap.parse_args()
    job = f"{args.model}/{args.shape}/cpu"
    t0 = time.perf_counter()
    if args.layouts:
        print(f"# bench/side_by_side.py --layouts ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {job}, "
              f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
              f"load {os.getloadavg()[0]:.2f})")
        layouts(job, args.rounds, args.iterations, args.repeats)
        return
    print(f"# bench/side_by_side.py ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {job}, "
          f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.2f})")
    with tempfile.TemporaryDirectory() as tmp:
        store, aa, inputs = engines(job, {"A": "", "B": "", "C": "", "D": ""}, Path(tmp) / "aa")
        store2, diff, inputs2 = engines(job, {"default": "", "one-thread": "-intra_op_num_threads=1"},
                                           Path(tmp) / "diff")
        runs: dict[str, list[Remeasurement]] = {"kept": [], "reload": []}
        pairs: dict[str, list[Remeasurement]] = {"kept": [], "reload": []}
        for _ in range(args.repeats):  # the two variants alternate, so drift of the host hits both
            for variant, backend in (("kept", KeptSessions.name), ("reload", "onnxruntime")):
                runs[variant].append(remeasure(backend, store, aa, inputs, args.rounds, args.iterations))
                pairs[variant].append(remeasure(backend, store2, diff, inputs2, args.rounds, args.iterations))
        alone = {}
        ort_backend = OnnxRuntimeBackend()
        feeds = store2.get_arrays(inputs2)
        for label, (spec, sha) in diff.items():
            runner = ort_backend.load(store2.path(sha), spec)
            runner.time(feeds, 20, 1, 1)
            alone[label] = statistics.median(runner.time(feeds, 0, 200, 1))
            del runner
    truth = alone["one-thread"] / alone["default"]
    print("\n| variant | A/A ratio median | A/A ratios off by > 25% | worst A/A challenger median | "
          f"-intra_op_num_threads=1 / default side by side (alone: {truth:.3f}) |")
    print("| --- | --- | --- | --- | --- |")
    out = {}
    for variant in ("kept", "reload"):
        med, off, worst = summary(runs[variant])
        one = statistics.median(x for m in pairs[variant] for x in m.paired_ratios("one-thread"))
        out[variant] = (off, one)
        print(f"| {variant} | {med:.3f} | {off:.0%} | {worst:.3f} | {one:.3f} |")
    print(f"\n{time.perf_counter() - t0:.0f} s. Expected: reload's A/A ratios at 1.00 with none off, its one-thread "
          "ratio near the alone one; kept's off where cores are few.")
    print(f"kept_off={out['kept'][0]:.2f} reload_off={out['reload'][0]:.2f} one_thread_alone={truth:.3f} "
          f"one_thread_reload={out['reload'][1]:.3f} one_thread_kept={out['kept'][1]:.3f}")


if __name__ == "__main__":
    main()
