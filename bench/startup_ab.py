"""Benchmark: what the start-up speculation saved (issue 34, point 1), A/B against another code tree.

The pieces removed in issue 34 (the console script's launcher and early worker, the no-op prediction, the
hinted first reference run, the held first trial, the worker-read engine identity, the start-up collector
pause) were all start-up work. Their savings add up: if the tree with all of them saves less than 5% of an
apply's wall time over the tree without any, each piece alone saves less than 5% too.

For each workload, each round runs a fresh ``trt-routes apply`` with the OLD tree and with the NEW tree, in
alternating order, each in its own copy of the project (so every apply tunes from an empty cache), as
subprocesses timed end to end through the console script's ``main`` of that tree (``cli.launch`` where it
exists, else ``cli.app``). The memo is primed once per tree by an untimed apply, the state of a user's second
project. Workloads:

* ``quickstart``: the repo's tuning.yaml and recipes/quickstart (ONNX Runtime, CPU);
* ``convnet``: a ResNet-style CNN exported with ``torch.onnx.export`` (bs4, 112x112), ~16 routes in ``fast``
  mode (needs torch; skipped without it).

Prints a table (median wall per tree, NEW/OLD, the saving as a share of OLD's wall) and, as its last line,
``max_saving_share=X.XXX``. Run: python bench/startup_ab.py --old /path/to/old/tree [--new .] [--rounds 3]"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

RESNET_GROUP = """
-graph_optimization_level=[basic|extended|all]
-disable:NchwcTransformer=[off|on]
-intra_op_num_threads=[1|3]
-allow_spinning=[0|1]
-disable_prepacking=[0|1]
-execution_mode=[sequential|parallel]
-enable_mem_pattern=[0|1]
-enable_cpu_mem_arena=[0|1]
-disable:ConvActivationFusion=[off|on]
-disable:ConstantFolding=[off|on]
-disable:MatMulAddFusion=[off|on]
"""


def _entry(tree: Path) -> str:
    module = "trt_routes.cli.launch" if (tree / "trt_routes/cli/launch.py").is_file() else "trt_routes.cli.app"
    return f"from {module} import main; main()"


def _quickstart(dest: Path) -> Path:
    shutil.copy(ROOT / "tuning.yaml", dest / "tuning.yaml")
    shutil.copytree(ROOT / "recipes" / "quickstart", dest / "recipes" / "quickstart")
    return dest / "tuning.yaml"


def _convnet(models: Path) -> object:
    """A ResNet-style CNN (six residual conv blocks, 112x112 input) exported with ``torch.onnx.export``; None
    without torch."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
    path = models / "convnet.onnx"
    if not path.exists():
        class Block(nn.Module):
            def __init__(self, c: int) -> None:
                super().__init__()
                self.a, self.b = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
                self.na, self.nb = nn.BatchNorm2d(c), nn.BatchNorm2d(c)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.relu(x + self.nb(self.b(torch.relu(self.na(self.a(x))))))

        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), *(Block(32) for _ in range(3)),
                              nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(), *(Block(64) for _ in range(3)),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).eval()
        torch.onnx.export(model, (torch.randn(4, 3, 112, 112),), str(path), input_names=["input"],
                          output_names=["logits"], dynamo=False)

    def write(dest: Path) -> Path:
        manifest = {
            "schema_version": 1,
            "measurement": {"warmup": 5, "iterations": 10, "repeats": 3, "timeout_s": 300},
            "targets": {"cpu": {"kind": "cpu"}},
            "switch_groups": {"g": RESNET_GROUP.strip()},
            "strategies": {"s": {"mode": "fast", "confirm": {"candidates": 2}}},
            "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
            "defaults": {"backend": "onnxruntime", "targets": ["cpu"], "switch_group": "g", "strategy": "s",
                         "tolerance": "t"},
            "models": {"convnet": {"path": str(path), "shapes": {"bs4": {"input": [4, 3, 112, 112]}}}},
        }
        (dest / "tuning.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        return dest / "tuning.yaml"

    return write


def _apply(tree: Path, manifest: Path, memo: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "TRT_ROUTES_MEMO": str(memo)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _entry(tree), "apply", "-q", "-m", str(manifest)], env=env,
                          cwd=manifest.parent, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"apply failed with {tree}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the code tree with the speculation")
    parser.add_argument("--new", type=Path, default=ROOT, help="the code tree without it (default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["quickstart", "convnet"], default=None)
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    with tempfile.TemporaryDirectory(prefix="startup-ab-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "models").mkdir()
        workloads = {"quickstart": _quickstart}
        convnet = _convnet(tmp / "models")
        if convnet is not None:
            workloads["convnet"] = convnet  # type: ignore[assignment]
        if args.only:
            workloads = {args.only: workloads[args.only]}
        shares = []
        print(f"{'workload':<12} {'old s (median)':>15} {'new s (median)':>15} {'new/old':>8} {'saved share':>12}")
        for name, write in workloads.items():
            walls: dict[str, list[float]] = {"old": [], "new": []}
            for label, tree in trees.items():  # prime each tree's memo, untimed
                folder = tmp / f"{name}-{label}-prime"
                folder.mkdir()
                _apply(tree, write(folder), tmp / f"memo-{label}")
            for r in range(args.rounds):
                order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
                for label in order:
                    folder = tmp / f"{name}-{label}-{r}"
                    folder.mkdir()
                    walls[label].append(_apply(trees[label], write(folder), tmp / f"memo-{label}"))
            old, new = statistics.median(walls["old"]), statistics.median(walls["new"])
            share = (new - old) / old
            shares.append(share)
            print(f"{name:<12} {old:>15.2f} {new:>15.2f} {new / old:>8.3f} {share:>12.3f}   "
                  f"old {[round(w, 2) for w in walls['old']]} new {[round(w, 2) for w in walls['new']]}")
        print(f"max_saving_share={max(shares):.3f}")


if __name__ == "__main__":
    main()
