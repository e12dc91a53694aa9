"""torch-inductor jit engines keep the kernels their build chose (issue 17 item 4): each route compiles in a
cache folder of its own, the build's compiled artifacts go into the recipe, and a load in another process
restores them, verified by their sha256, so it runs the build's compiled code instead of benchmarking again.
Real torch, real Inductor builds on the CPU (C++ path), a real second process."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _paths import REPO  # noqa: E402

from trt_routes.backends.base import BuildSpec  # noqa: E402
from trt_routes.backends.torch_inductor import TorchInductorBackend, compile_cache  # noqa: E402
from trt_routes.backends.torch_inductor.catalog import FIXED  # noqa: E402
from trt_routes.errors import TrtRoutesError  # noqa: E402

ENTRY = textwrap.dedent('''\
    import torch


    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)
            self.big1, self.big2 = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)

        def forward(self, x):
            if x.shape[-1] == 256:  # the GPU test's shape: GEMMs max-autotune chooses templates for
                return self.big2(torch.nn.functional.gelu(self.big1(x)))
            return self.fc2(torch.relu(self.fc1(x)))


    def mlp(shapes):
        torch.manual_seed(0)
        return MLP()
    ''')
SHAPE = [4, 16]
GPU_SHAPE = [64, 256]

#: a fresh process: loads one recipe with the backend (as a re-measurement worker does) and prints how
LOADER = textwrap.dedent('''\
    import json, sys
    import numpy as np
    from trt_routes.backends.base import BuildSpec
    from trt_routes.backends.torch_inductor import TorchInductorBackend
    root, engine, route, kind = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    settings = json.loads(sys.argv[5])
    shape = [4, 16] if kind == "cpu" else [64, 256]
    spec = BuildSpec(model_path=root, route=route, profile={"x": {"min": shape, "opt": shape, "max": shape}},
                     settings=settings, target={"kind": kind}, entry="tiny:mlp")
    runner = TorchInductorBackend().load(engine, spec)
    out = runner.run({"x": np.ones(shape, np.float32)})["output"]
    print(json.dumps({"compile_cache": runner.compile_cache, "output": out.tolist()}))
    ''')


def spec(root: Path, route: dict[str, str], kind: str = "cpu", **settings: Any) -> BuildSpec:
    (root / "tiny.py").write_text(ENTRY, encoding="utf-8")
    shape = SHAPE if kind == "cpu" else GPU_SHAPE
    return BuildSpec(model_path=str(root), route=route, profile={"x": {"min": shape, "opt": shape, "max": shape}},
                     settings=settings, target={"kind": kind}, entry="tiny:mlp")


@pytest.fixture
def inductor_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own Inductor cache folder (the scopes live under it)."""
    root = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(root))
    monkeypatch.setattr(compile_cache, "_ROOT", [str(root)])
    return root


def load_elsewhere(tmp_path: Path, root: Path, engine: Path, route: dict[str, str], cache: Path, kind: str = "cpu",
                   **settings: Any) -> dict[str, Any]:
    script = tmp_path / "loader.py"
    script.write_text(LOADER, encoding="utf-8")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script), str(root), str(engine), json.dumps(route), kind,
                           json.dumps(settings)], env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_build_applies_the_fixed_cache_switches() -> None:
    import torch._inductor.config as config

    values = TorchInductorBackend()._values({"-freezing": "1"}, {"mode": "jit", "device": "cpu"})
    present = {k for k in FIXED if k in config.get_config_copy()}
    assert {"autotune_local_cache", "autotune_remote_cache", "fx_graph_cache"} <= present
    assert all(values[k] is FIXED[k] for k in present)
    assert values["autotune_remote_cache"] is False and values["autotune_local_cache"] is True
    assert values["freezing"] is True


@pytest.mark.slow
def test_routes_compile_in_scopes_of_their_own_and_the_engine_keeps_the_build(
        tmp_path: Path, inductor_root: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    backend = TorchInductorBackend()
    recipes = {}
    for name, route in {"default": {}, "frozen": {"-freezing": "1"}}.items():
        engine = project / f"{name}.json"
        log = backend.build(spec(project, route), engine)
        recipe = json.loads(engine.read_text())
        kept = recipe["compile_cache"]
        assert kept["format"] == compile_cache.FORMAT and kept["torch"] == torch.__version__
        data = zlib.decompress(base64.b64decode(kept["data"]))
        assert len(data) == kept["bytes"] and kept["artifacts"].get("inductor", 0) >= 1
        assert kept["scope"] == compile_cache.route_tag(recipe["inductor_config"]) and kept["scope"] in log
        recipes[name] = recipe
    scopes = {r["compile_cache"]["scope"] for r in recipes.values()}
    assert len(scopes) == 2, "two routes, two scopes"
    folders = {p.name for p in (inductor_root / "trt-routes-routes").iterdir()}
    assert folders == scopes
    # each scope holds only its own route's graphs: the FX-graph entries (fxgraph/<2 chars>/<key>) of one are not
    # in the other. (Generated code is stored by content hash under <2 chars>/, so the same kernel compiled by
    # both routes has one name in both scopes: it is not compared.)
    graphs = {s: {p.name for p in (inductor_root / "trt-routes-routes" / s / "fxgraph").glob("*/*")} for s in scopes}
    a, b = graphs.values()
    assert a and b and not (a & b)


@pytest.mark.slow
def test_a_load_in_another_process_runs_the_builds_compiled_code(tmp_path: Path, inductor_root: Path) -> None:
    """A second process with an empty Inductor cache: with the kept artifacts the compile is a cache hit
    (nothing compiled, nothing benchmarked again); without them it compiles (a miss). Same outputs."""
    project = tmp_path / "project"
    project.mkdir()
    route = {"-freezing": "1"}
    engine = project / "frozen.json"
    TorchInductorBackend().build(spec(project, route), engine)
    hit = load_elsewhere(tmp_path, project, engine, route, tmp_path / "cache-a")
    assert hit["compile_cache"]["restored"] is True
    assert hit["compile_cache"]["fx_graph_hits"] >= 1 and hit["compile_cache"]["fx_graph_misses"] == 0
    # the process runs the very code the build generated (every module it generated is one the recipe lists)
    assert hit["compile_cache"]["same_code"] is True
    bare = json.loads(engine.read_text())
    bare["compile_cache"] = None
    bare["generated_code_sha256"] = ["0" * 64]  # a build whose code this process does not generate
    stripped = project / "stripped.json"
    stripped.write_text(json.dumps(bare), encoding="utf-8")
    miss = load_elsewhere(tmp_path, project, stripped, route, tmp_path / "cache-b")
    assert miss["compile_cache"]["restored"] is False and miss["compile_cache"]["fx_graph_misses"] >= 1
    assert miss["compile_cache"]["same_code"] is False
    np.testing.assert_allclose(miss["output"], hit["output"], rtol=1e-5, atol=1e-6)


def test_artifacts_that_do_not_match_their_sha256_are_refused(tmp_path: Path) -> None:
    record = {"format": compile_cache.FORMAT, "torch": str(torch.__version__), "sha256": "0" * 64,
              "encoding": compile_cache.ENCODING, "data": base64.b64encode(zlib.compress(b"forged")).decode()}
    with pytest.raises(TrtRoutesError, match="sha256"):
        compile_cache.restore(record, "engine.json")
    with pytest.raises(TrtRoutesError, match="sha256"):  # not even base64 or zlib
        compile_cache.restore({**record, "data": "not base64!"}, "engine.json")
    # another torch's artifacts are not loaded at all (Inductor would not use them): recompiled instead
    assert compile_cache.restore({**record, "torch": "0.0.0"}, "engine.json") is False
    assert compile_cache.restore(None, "engine.json") is False


@pytest.mark.gpu
def test_a_max_autotune_route_loaded_elsewhere_runs_the_kernels_its_build_chose(
        tmp_path: Path, inductor_root: Path) -> None:
    """Where torch sees a CUDA GPU: max-autotune benchmarks GEMM templates while it builds. A second process
    with empty Inductor and Triton caches restores the kept artifacts: no FX-graph miss (nothing compiled
    or benchmarked again) and the same outputs."""
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    project = tmp_path / "project"
    project.mkdir()
    route = {"-max_autotune": "1", "-triton.cudagraphs": "1"}
    engine = project / "autotuned.json"
    backend = TorchInductorBackend()
    log = backend.build(spec(project, route, "gpu", dtype="float16"), engine)
    kept = json.loads(engine.read_text())["compile_cache"]
    assert kept and kept["artifacts"].get("inductor", 0) >= 1, log
    here = backend.load(engine, spec(project, route, "gpu", dtype="float16"))
    feeds = {"x": np.ones(GPU_SHAPE, np.float32)}
    there = load_elsewhere(tmp_path, project, engine, route, tmp_path / "cache-gpu", "gpu", dtype="float16")
    assert there["compile_cache"]["restored"] is True
    assert there["compile_cache"]["fx_graph_hits"] >= 1 and there["compile_cache"]["fx_graph_misses"] == 0
    assert there["compile_cache"]["same_code"] is True
    np.testing.assert_allclose(there["output"], here.run(feeds)["output"], rtol=1e-3, atol=1e-3)
