"""Where AOTInductor fails on a GPU machine: each step in a fresh process with faulthandler on, so a
segfault names the Python frame it happened under.

    python bench/probes/torch_gpu_probe.py                  # raw torch AOTI, the backend's build/load/run, jit then aot
    python bench/probes/torch_gpu_probe.py --load-variants  # legacy aot_load, single-threaded loader, bare .so runner
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

RAW = """
import faulthandler, sys, time, torch, torch._inductor
faulthandler.enable()
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).eval().cuda().half()
x = torch.randn(8, 64, device="cuda", dtype=torch.half)
t = time.time()
with torch.no_grad():
    ep = torch.export.export(m, (x,))
    print("export ok", flush=True)
    path = torch._inductor.aoti_compile_and_package(ep, package_path=sys.argv[1] + "/m.pt2")
print("compile ok", round(time.time() - t, 1), "s", flush=True)
f = torch._inductor.aoti_load_package(path, device_index=0)
print("load ok", flush=True)
with torch.no_grad():
    y = f(x)
torch.cuda.synchronize()
print("run ok", tuple(y.shape), float((y.float() - m(x).float()).abs().max()), flush=True)
"""

SEQUENCE = """
import faulthandler, sys, torch, torch._inductor
faulthandler.enable()
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).eval().cuda().half()
x = torch.randn(8, 64, device="cuda", dtype=torch.half)
c = torch.compile(m, options={"triton.cudagraphs": True})
with torch.no_grad():
    for _ in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        c(x)
print("jit with CUDA graphs ok", flush=True)
torch._dynamo.reset()
with torch.no_grad():
    path = torch._inductor.aoti_compile_and_package(torch.export.export(m, (x,)), package_path=sys.argv[1] + "/m.pt2")
f = torch._inductor.aoti_load_package(path, device_index=0)
with torch.no_grad():
    print("aot after jit ok", tuple(f(x).shape), flush=True)
"""

BACKEND = """
import faulthandler, sys, time
faulthandler.enable()
from pathlib import Path
import numpy as np
from trt_routes.backends.base import BuildSpec
from trt_routes.backends.torch_inductor import TorchInductorBackend
root = Path(sys.argv[1])
(root / "tiny.py").write_text("import torch\\ndef mlp(shapes):\\n    return torch.nn.Sequential("
                              "torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))\\n")
b = TorchInductorBackend()
spec = BuildSpec(model_path=str(root), route={}, profile={"input": {"min": [8, 64], "opt": [8, 64], "max": [8, 64]}},
                 settings={"mode": "aot", "dtype": "float16"}, target={"kind": "gpu", "device": {}}, entry="tiny:mlp")
t = time.time()
print(b.build(spec, root / "engine.pt2"), "build", round(time.time() - t, 1), "s", flush=True)
blob = root / "blob"
(root / "engine.pt2").rename(blob)
r = b.load(blob, spec)
print("load ok", flush=True)
x = {"input": np.random.default_rng(0).uniform(-1, 1, (8, 64)).astype(np.float32)}
print("run ok", r.run(x)["output"].shape, "time", np.median(r.time(x, 5, 20, 2)), "ms", flush=True)
"""


LOAD_VARIANTS = """
import faulthandler, glob, os, sys, zipfile, torch, torch._inductor
faulthandler.enable()
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).eval().cuda().half()
x = torch.randn(8, 64, device="cuda", dtype=torch.half)
variant, tmp = sys.argv[2], sys.argv[1]
with torch.no_grad():
    if variant == "legacy":  # torch._export.aot_compile + aot_load: the container runner, no package loader
        so = torch._export.aot_compile(m, (x,))
        print("compiled", so, flush=True)
        run = torch._export.aot_load(so, device="cuda")
        print("legacy aot_load ok", tuple(run(x).shape), flush=True)
    else:
        path = torch._inductor.aoti_compile_and_package(torch.export.export(m, (x,)), package_path=tmp + "/m.pt2")
        if variant == "single":
            f = torch._inductor.aoti_load_package(path, run_single_threaded=True, device_index=0)
            print("single-threaded package load ok", tuple(f(x).shape), flush=True)
        else:  # the package's .so through the CUDA container runner directly
            zipfile.ZipFile(path).extractall(tmp + "/x")
            so = glob.glob(tmp + "/x/**/*.so", recursive=True)[0]
            runner = torch._C._aoti.AOTIModelContainerRunnerCuda(so, 1, "cuda", os.path.dirname(so))
            print("extracted .so runner ok", [tuple(t.shape) for t in runner.run([x])], flush=True)
"""


def step(name: str, code: str, *extra: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-c", code, tmp, *extra], capture_output=True, text=True,
                              timeout=300)
        out = (proc.stdout + proc.stderr).strip().splitlines()
        print(f"== {name}: exit {proc.returncode} in {time.time() - t0:.0f} s")
        print("\n".join(line for line in out if "Warning" not in line and "return cls" not in line)[-3000:])
        return proc.returncode == 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--load-variants"]:  # which way of loading an AOTInductor model works here
        results = [step(f"load variant {v}", LOAD_VARIANTS, v) for v in ("legacy", "single", "so")]
        sys.exit(0 if any(results) else 1)
    ok = step("raw torch AOTInductor on cuda:0", RAW)
    ok = step("torch-inductor backend, mode aot", BACKEND) and ok
    ok = step("jit with CUDA graphs, then AOTInductor, in one process", SEQUENCE) and ok
    sys.exit(0 if ok else 1)
