"""Named routes of one model timed side by side on ONNX Runtime's CUDA EP, to answer what a search's table leaves
open (issue 30: does ``-graph_optimization_level=extended`` help BERT beside float16 and CUDA graphs?).

    python bench/gpu_routes.py --model bert-base --route 'fp16+graph=-enable_cuda_graph=1 -precision=fp16' \
        [--route ...] [--rounds 8] [--iters 30] [--out routes.json]

The model comes from the recipe's exporter, its job from ``gpu_search.py``'s project; the default route is always
timed first in the list. Each route's speedup is the median over rounds of default / route, the order rotated
every round (``onnx_gpu.interleaved``)."""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run or imported from anywhere

from gpu_search import RECIPE, manifest
from onnx_gpu import interleaved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--route", action="append", default=[], metavar="LABEL=ROUTE")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    for r in args.route:
        if "=" not in r or r.split("=", 1)[0] in ("", "default"):
            parser.error(f"--route takes LABEL=ROUTE with a label of its own (not 'default'): {r!r}")
    sys.path.insert(0, str(RECIPE))
    import make_models  # the recipe's exporter

    from trt_routes.project import open_project
    from trt_routes.signature import cpu_fields

    onnx = make_models.HERE / "models" / f"{args.model}.onnx"
    if not onnx.exists():
        make_models.export(args.model)
    routes = {"default": "", **dict(r.split("=", 1) for r in args.route)}
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "tuning.yaml").write_text(yaml.safe_dump(manifest(args.model, onnx, "", {"mode": "fast"})))
        job = open_project(Path(work) / "tuning.yaml").jobs[0]
        times = interleaved(job, routes, args.rounds, args.iters)
    rows = [{"label": label, "route": route, "ms": statistics.median(times[label]),
             "speedup": statistics.median(d / t for d, t in zip(times["default"], times[label], strict=True))}
            for label, route in routes.items()]
    if args.out:
        args.out.write_text(json.dumps({"model": args.model, "rounds": args.rounds, "rows": rows}, indent=2) + "\n")
    print(f"# bench/gpu_routes.py --model {args.model} ({datetime.date.today().isoformat()}, "
          f"{cpu_fields()['cpu_model']})")
    print("| route | ms (median of rounds) | speedup over the default |\n|---|---|---|")
    for row in rows:
        print(f"| {row['label']}: `{row['route'] or 'the default'}` | {row['ms']:.3f} | {row['speedup']:.2f}x |")


if __name__ == "__main__":
    main()
