"""Where an apply's start-up goes on a GPU machine: environment detection, the GPUs' local cores, a CUDA
context and a torch import in a fresh process, each timed twice (cold, then warm). A diagnostic for
bench/scale.py's time before the first trial; prints one line per step."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trt_routes.backends.cuda_device import gpu_local_cpus
from trt_routes.signature import detect

CHILD = "import time; t = time.perf_counter(); import torch; a = time.perf_counter(); torch.zeros(1, device='cuda'); " \
        "print(f'import torch {a - t:.2f} s, CUDA context {time.perf_counter() - a:.2f} s')"


def timed(label: str, fn: object) -> None:
    t = time.perf_counter()
    out = fn()  # type: ignore[operator]
    print(f"{label}: {time.perf_counter() - t:.2f} s {out if isinstance(out, str) else ''}".rstrip(), flush=True)


def child() -> str:
    """The child's line, or why it failed (no torch, no CUDA GPU) instead of nothing."""
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"(failed: {(proc.stderr.strip().splitlines() or [f'exit {proc.returncode}'])[-1]})"
    return proc.stdout.strip()


def main() -> None:
    for attempt in ("first", "second"):
        timed(f"{attempt} detect()", lambda: detect.__wrapped__() if hasattr(detect, "__wrapped__") else detect())
        timed(f"{attempt} gpu_local_cpus", lambda: str(gpu_local_cpus(["0", "1"])))
        timed(f"{attempt} child process", child)


if __name__ == "__main__":
    main()
