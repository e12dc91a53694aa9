"""Record a landscape file (trt-routes/landscape@1) from any real backend.

Runs `full` over a switch group for one job of a manifest, in isolated workers like `apply` does, into a
throw-away store (the project's cache is not touched): every route is built, checked against the
reference and measured once; then every route that built is re-measured in `--rounds` interleaved
rounds of `--iterations` timed runs in one worker (a seeded shuffle per round), so each route's samples
span the whole recording and capture drift and sessions. The default route (every knob at its catalog
default) is always recorded too.

Run: python bench/record_landscape.py -m tuning.yaml --job resnet-like/bs8/cpu \\
        --group "-graph_optimization_level=[basic|all] -intra_op_num_threads=[0|1|2]" \\
        --out bench/landscapes/ort-resnet-bs8.json
`--group` defaults to the job's switch group; list the catalog default in each knob's values when you
can (`trt-routes knobs`), or routes that combine a knob's default with others are missing (crashed)."""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trt_routes import PROTOCOL_VERSION, __version__  # noqa: E402
from trt_routes.backends.landscape import SCHEMA, dump, validate  # noqa: E402
from trt_routes.execute.local import LocalExecutor  # noqa: E402
from trt_routes.execute.protocol import settle_spec  # noqa: E402
from trt_routes.execute.tasks import ReferenceTask, RemeasureTask, TrialTask  # noqa: E402
from trt_routes.files.artifacts import BlobStore  # noqa: E402
from trt_routes.jobs import find_job  # noqa: E402
from trt_routes.project import open_project  # noqa: E402
from trt_routes.routes import parse_expression, route_dict  # noqa: E402
from trt_routes.search import make_search  # noqa: E402
from trt_routes.selection import DEFAULT_ROUTE  # noqa: E402
from trt_routes.signature import cpu_fields  # noqa: E402


def worst_losses(losses: dict[str, dict[str, float]]) -> dict[str, float | None]:
    """One output's worth of losses: per metric, the worst over the outputs (non-finite -> None)."""
    out: dict[str, float | None] = {}
    for per in losses.values():
        for metric in ("cos", "lInf", "l1", "l2"):
            if metric in per:
                value = per[metric]
                old = out.get(metric, 0.0)
                out[metric] = None if (value is None or not math.isfinite(value) or old is None) else max(old, value)
    return out


def record(manifest: Path, job_name: str, group: str | None, rounds: int, iterations: int,
           seed: int, log: Any = print) -> dict[str, Any]:
    project = open_project(manifest)
    job = find_job(project.jobs, job_name)
    if job.blocked or job.catalog is None:
        raise SystemExit(f"{job.name} cannot run here: {job.blocked}")
    expr = parse_expression(group, job.catalog) if group else job.expression
    assert expr is not None
    routes = list(dict.fromkeys([DEFAULT_ROUTE, *make_search("full", expr, job.catalog).candidates({})]))
    store = BlobStore(Path(tempfile.mkdtemp(prefix="trt-routes-record-")))
    m = job.measurement
    rows: dict[str, dict[str, Any]] = {}
    engines: dict[str, str] = {}
    t0 = time.perf_counter()
    with LocalExecutor() as ex:
        ref = ex.run(ReferenceTask(backend=job.backend, spec=job.build_spec({}), store_root=str(store.root),
                                   inputs=job.inputs, seed=m.seed), m.timeout_s)
        if ref.status != "ok":
            raise SystemExit(f"reference failed: {ref.error}")
        for i, route in enumerate(routes, 1):
            task = TrialTask(backend=job.backend, spec=job.build_spec(route_dict(route)),
                             store_root=str(store.root), inputs_sha=ref.inputs_sha256,
                             reference_sha=ref.outputs_sha256, l0_params=job.l0_params, warmup=m.warmup,
                             iterations=iterations, repeats=1, seed=m.seed, settle=settle_spec(m.settle))
            result = ex.run(task, m.timeout_s)
            rows[route] = {"route": route, "status": result.status, "losses": worst_losses(result.losses),
                           "build_s": round(result.build_s or 0.0, 4)}
            if result.status == "ok":
                engines[route] = result.engine_sha256
            log(f"[{i}/{len(routes)}] {route or 'default'}: {result.status} {result.error[:80]}")
        ok = list(engines)
        rng = random.Random(seed)
        order: list[str] = []
        for _ in range(rounds):
            shuffled = ok[:]
            rng.shuffle(shuffled)
            order += shuffled
        remeasure = RemeasureTask(backend=job.backend, spec=job.build_spec(route_dict(ok[0])),
                                  store_root=str(store.root), inputs_sha=ref.inputs_sha256,
                                  engines=tuple((r, job.build_spec(route_dict(r)), engines[r]) for r in ok),
                                  order=tuple(order), iterations=iterations, warmup=m.warmup,
                                  settle=settle_spec(m.settle), keep_samples=True)
        log(f"re-measuring {len(ok)} routes in {rounds} interleaved rounds of {iterations} runs")
        result = ex.run(remeasure, m.timeout_s * (1 + len(ok)))
        if result.status != "ok":
            raise SystemExit(f"re-measurement failed: {result.status}: {result.error}")
    for route in ok:
        rows[route]["samples_ms"] = result.meta["samples"][route]
    catalog = job.catalog
    knobs = []
    for token in expr.varied:
        knob = catalog.get(token.option)
        assert knob is not None
        values = list(dict.fromkeys([*token.values, knob.default]))
        knobs.append({"option": token.option, "values": values, "default": knob.default})
    for option, value in expr.pinned.items():
        knob = catalog.get(option)
        assert knob is not None
        knobs.append({"option": option, "values": list(dict.fromkeys([value, knob.default])),
                      "default": knob.default})
    data = {
        "schema": SCHEMA, "backend": job.backend,
        "knobs": knobs,
        "routes": [rows[r] for r in routes],
        "meta": {"job": job.name, "expression": expr.text(), "aligned": True,
                 "recorded": datetime.date.today().isoformat(),
                 "machine": f"{cpu_fields()['cpu_model']}, {cpu_fields()['cpu_count']} cores, "
                            f"{platform.system()} {platform.machine()}",
                 "software": job.signature.fields if job.signature else {},
                 "protocol": {"rounds": rounds, "iterations": iterations, "warmup": m.warmup,
                              "settle": m.settle.model_dump() if m.settle else None,
                              "trt_routes": __version__, "protocol_version": PROTOCOL_VERSION},
                 "seconds": round(time.perf_counter() - t0, 1)},
    }
    validate(data, "recorded landscape")
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--manifest", type=Path, default=REPO / "tuning.yaml")
    ap.add_argument("--job", required=True, help="job name, e.g. resnet-like/bs8/cpu")
    ap.add_argument("--group", help="tuning expression (default: the job's switch group)")
    ap.add_argument("--rounds", type=int, default=8, help="interleaved re-measurement rounds")
    ap.add_argument("--iterations", type=int, default=25, help="timed runs per route per round")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    data = record(args.manifest, args.job, args.group, args.rounds, args.iterations, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump(data), encoding="utf-8")
    ok = sum(1 for r in data["routes"] if r["status"] == "ok")
    print(f"wrote {args.out}: {len(data['routes'])} routes ({ok} ok), {data['meta']['seconds']} s")


if __name__ == "__main__":
    main()
