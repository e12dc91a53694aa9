"""A jit route's compiled artifacts kept with its engine, so that loading the engine runs what was measured.

torch.compile's output depends on benchmarks taken while it compiles (max-autotune's GEMM/conv template
choices) and at the first calls (the block sizes of Triton kernels with several configs, coordinate descent).
Recompiling a route from its configuration alone benchmarks again, in another process under other load, and
may choose other kernels: the route measured is then not the route deployed. So each build is compiled in a
*route scope* and its cache artifacts are kept in the recipe:

- **Route scope.** While a route compiles and first runs, Inductor's cache folder
  (``TORCHINDUCTOR_CACHE_DIR``) is a folder of that route's own, named by a digest of its full Inductor
  configuration, under the folder Inductor would use. Its FX-graph and AOTAutograd caches, its autotuned
  Triton configs and its GEMM/conv template timings live there, and the in-memory caches are cleared at both
  ends: one route never reads another route's benchmark results, and a rebuild of the same route on the same
  machine reads its own. Triton's compiled binaries (compiled code keyed by its source, no benchmarks) stay
  shared (``TRITON_CACHE_DIR``, set once to where Inductor would put them).
- **Capture.** ``torch.compiler.save_cache_artifacts`` (PyTorch's portable "mega-cache") after the build
  serializes every cache entry the build wrote or read: the compiled graphs with their Triton binaries and
  kernel choices, and the autotuned configs. They go into the recipe, with their sha256.
- **Restore.** Loading a recipe in another process first checks that sha256 and that the torch version is
  the recipe's, then ``torch.compiler.load_cache_artifacts``, then compiles in the route's scope: the compile is
  a cache hit and runs the kernels the build chose. ``restored()`` reports the FX-graph hits and misses.

The artifacts are pickles, trusted as far as the engine file is: an engine is only loaded when its sha256 is
the one its trial or lock records (the same trust as an AOTInductor package's shared library)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from trt_routes import canonical
from trt_routes.errors import TrtRoutesError

FORMAT = "torch.compiler.save_cache_artifacts"
#: the artifacts in the recipe: zlib-compressed (a max-autotune build keeps every Triton binary it compiled,
#: 50-140 MB for a ConvNeXt or BERT on an H200), then base64
ENCODING = "zlib+base64"


def route_tag(values: Mapping[str, Any]) -> str:
    """The name of a route's scope: a digest of every Inductor switch it applies."""
    return "trt-routes-" + canonical.digest(sorted((k, str(v)) for k, v in values.items()), 16)


@dataclass
class Captured:
    """What a build wrote or read in its route scope (``record`` is None when torch recorded nothing)."""

    record: dict[str, Any] | None = None
    hits: dict[str, int] = field(default_factory=dict)


def restored() -> dict[str, int]:
    """FX-graph cache hits, misses and bypasses since the last ``torch._dynamo.utils.counters.clear()``."""
    from torch._dynamo.utils import counters

    return {"fx_graph_hits": int(counters["inductor"].get("fxgraph_cache_hit", 0)),
            "fx_graph_misses": int(counters["inductor"].get("fxgraph_cache_miss", 0)),
            "fx_graph_bypasses": int(counters["inductor"].get("fxgraph_cache_bypass", 0))}


_ROOT: list[str] = []  # Inductor's own cache folder, read once before any scope changes the variable


def _root() -> str:
    if not _ROOT:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        _ROOT.append(cache_dir())
    return _ROOT[0]


def share_triton_binaries(device_index: int) -> None:
    """Point ``TRITON_CACHE_DIR`` (unless set) where Inductor puts Triton binaries for this device, before
    any compile worker starts: route scopes then share compiled kernels, never benchmark results."""
    if "TRITON_CACHE_DIR" not in os.environ:
        os.environ["TRITON_CACHE_DIR"] = os.path.join(_root(), "triton", str(max(device_index, 0)))


@contextlib.contextmanager
def scope(tag: str) -> Iterator[None]:
    """Compile and first-run inside the route's own cache folder."""
    from torch._inductor.utils import clear_caches

    folder = os.path.join(_root(), "trt-routes-routes", tag)
    os.makedirs(folder, exist_ok=True)
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    clear_caches()
    try:
        yield
    finally:
        clear_caches()
        if saved is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved


@contextlib.contextmanager
def capture(tag: str) -> Iterator[Captured]:
    """Compile inside the route scope; on exit, the build's cache artifacts as a recipe record."""
    import torch
    from torch.compiler._cache import CacheArtifactManager

    out = Captured()
    with CacheArtifactManager.with_fresh_cache(), scope(tag):
        yield out
        saved = torch.compiler.save_cache_artifacts()
    out.hits = restored()
    if saved is not None:
        data, info = saved
        out.record = {"format": FORMAT, "torch": str(torch.__version__), "scope": tag,
                      "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                      "artifacts": {kind: len(keys) for kind, keys in sorted(info.artifacts.items())},
                      "encoding": ENCODING, "data": base64.b64encode(zlib.compress(data, 6)).decode("ascii")}


def restore(record: Mapping[str, Any] | None, where: str) -> bool:
    """Inside the route's scope: load a recipe's artifacts into its cache folder; False (nothing loaded)
    when the recipe has none, or another torch or encoding made them (it then recompiles and benchmarks
    again). A record whose data does not match its sha256 is an error: the engine was changed after it
    was measured."""
    import torch

    if (not record or record.get("format") != FORMAT or record.get("encoding") != ENCODING
            or record.get("torch") != str(torch.__version__)):
        return False
    try:
        data = zlib.decompress(base64.b64decode(str(record.get("data", "")), validate=True))
    except (ValueError, zlib.error):
        data = b""
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        raise TrtRoutesError(f"{where}: the compiled artifacts do not match their recorded sha256",
                             "rebuild the engine (trt-routes apply); do not edit engine recipes by hand")
    torch.compiler.load_cache_artifacts(data)
    return True

