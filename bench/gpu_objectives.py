"""Objectives on a GPU (issue 18): one torch-inductor model tuned on an H200 with a tail-latency objective
under a device-memory limit, then re-selected by energy (a reselect: 0 builds), with the facts each trial
stored (p50/p99, throughput, peak device memory, engine size, build time, energy from NVML).

    python bench/gpu_objectives.py --work /tmp/objectives [--model mobilenet_v3]

Prints per route the facts, the winner under each objective, and the builds of each apply. GPU only."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def run(args: list[str], cwd: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "trt_routes.cli.app", *args], cwd=cwd, capture_output=True,
                          text=True)
    return done.returncode, done.stdout + ("\n" + done.stderr if done.returncode else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--model", default="mobilenet_v3")
    ap.add_argument("--shape", default="[32, 3, 224, 224]")
    args = ap.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copy(REPO / "recipes" / "torch-gpu" / "models.py", work / "models.py")
    manifest = {
        "schema_version": 1,
        "measurement": {"warmup": 10, "iterations": 40, "repeats": 5, "timeout_s": 900},
        "targets": {"h200": {"kind": "gpu", "name": "*H200*"}},
        "switch_groups": {"g": "-triton.cudagraphs=[0|1] -freezing=[0|1]"},
        "strategies": {"full": {"mode": "full"}},
        "tolerances": {"fp16": {"checks": [{"metric": "cos", "threshold": 5.0e-4}]}},
        "objectives": {"tail": {"rank": "latency.p99", "limits": {"device_memory_mb": 8192}},
                       "edge": {"rank": "energy"}},
        "defaults": {"backend": "torch-inductor", "targets": ["h200"], "switch_group": "g", "strategy": "full",
                     "tolerance": "fp16", "settings": {"dtype": "float16"}, "objective": "tail"},
        "models": {"m": {"entry": f"models:{args.model}", "shapes": {"b": {"image": json.loads(args.shape)}}}},
    }
    path = work / "tuning.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    report: dict[str, object] = {}
    code, out = run(["apply", "--json"], work)
    report["apply_tail"] = {"code": code, "doc": json.loads(out) if code in (0, 4) else out[-3000:]}
    code, out = run(["explain", "m/b/h200", "--json"], work)
    report["explain_tail"] = json.loads(out) if code == 0 else out[-3000:]
    manifest["defaults"]["objective"] = "edge"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    code, out = run(["plan", "--json"], work)
    report["plan_edge"] = json.loads(out) if code == 0 else out[-3000:]
    code, out = run(["apply", "--json"], work)
    report["apply_edge"] = {"code": code, "doc": json.loads(out) if code in (0, 4) else out[-3000:]}
    code, out = run(["explain", "m/b/h200", "--json"], work)
    report["explain_edge"] = json.loads(out) if code == 0 else out[-3000:]
    print(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
