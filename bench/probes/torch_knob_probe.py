"""Does ANY torch.compile setting beat torch.compile's best named mode by a real margin, and how far apart are
two compiles of one configuration? (issue 17's probe; plain torch: of trt_routes only its median interval.)

Models: the five of ``recipes/torch-gpu/modes/tuning.yaml``, built by that recipe's own factories
(``recipes/torch-gpu/modes/models.py``: timm ConvNeXt-T bs16, timm ViT-B/16 bs8, torchvision ResNet-50 bs32,
HF BERT-base b8 s128, HF GPT-2 b4 s128), random init (seed 0), float16, eval, ``torch.inference_mode``.

Variants per model (each its own ``torch.compile`` of its own copy of the model, behind a wrapper whose
``forward`` is a fresh code object, so Dynamo never hands one variant another's graph; Inductor's caches are
off, ``force_disable_caches``, so every compile autotunes afresh):

* ``eager`` (timed for context);
* ``reduce-overhead`` #1, #2, #3: the mode compiled three times, independent draws;
* ``max-autotune`` (the mode);
* on top of ``triton.cudagraphs=True`` (reduce-overhead's whole config), one knob each: ``combo_kernels``,
  ``aggressive_fusion``, ``coordinate_descent_tuning`` + ``coordinate_descent_check_all_directions``,
  ``triton.cooperative_reductions``, ``benchmark_fusion``;
* runtime settings: CNNs ``torch.backends.cudnn.benchmark=True`` (its compile, warm-up and turns run on a
  thread of their own, since cuDNN's plan cache is per thread and keyed without the flag) and channels_last
  model and input; transformers the SDPA backend (``sdpa_kernel`` FLASH / EFFICIENT / CUDNN around compile
  and every call), each with reduce-overhead;
* transformers, if the compile deadline allows: max-autotune + ``triton.enable_persistent_tma_matmul``.

Option names missing from the installed ``torch._inductor.config`` are skipped and reported; a variant that
fails is reported with its error's last line.

Protocol, "compile in parallel, time serially": one process per model, all side by side. Each compiles its
variants (cheap ones first, the max-autotune ones last; a variant is started only if its estimated compile
time fits before the compile deadline, otherwise reported as cut) and runs each three times (CUDA-graph
warm-up and recording). The max-autotune variants take minutes, so by default (``--no-prebuild`` turns it off)
each is compiled from the start by a helper process of its own, in a fresh Inductor cache folder, and the
model's process loads it from that FX graph cache when it gets there (the table's compile s is the helper's
compile; the JSON has the load time and the cache hit counters); a helper still compiling at the compile
deadline is stopped and its variant reported as cut. Then each waits until every process has finished
compiling (or the barrier deadline), takes an exclusive ``fcntl.flock`` on a file in /tmp and times alone:
``--rounds`` rounds, each through all its variants in a fresh seeded random order, each turn ``--warmup``
calls then ``--iters`` CUDA-event-timed calls, the turn's median. Per variant: the median of its turns; its
ratio to the best named mode (the faster of reduce-overhead #1 and max-autotune by median; ratio = best /
variant, > 1 means faster) as the median of per-round ratios with a distribution-free 95% interval (order
statistics, sign test); the same against the fastest of all four named-mode draws; cosine distance of its
output to eager fp16's on the same input (flagged above 1e-3). Per model: the spread of the three
reduce-overhead draws.

``--plan confirm`` (the second call, CNNs) compiles the first call's candidates again, twice each and
combined (channels_last, coordinate descent over all directions), with freezing, cudnn.benchmark and
max-autotune with channels_last.

``--plan extra`` (the third call; by default the three transformers, where the first call found nothing above
~1%) tries the settings of issue 17's list that the first call did not, each once, against reduce-overhead
drawn three times and max-autotune:

* on top of ``triton.cudagraphs=True``: ``split_reductions=False``, ``triton.persistent_reductions=False``,
  ``triton.multi_kernel=1``, ``max_fusion_size`` 8 and 256 (default 64), ``layout_optimization=False``,
  padding off (``shape_padding`` and ``comprehensive_padding`` False), ``pad_outputs=True``,
  ``force_shape_pad=True``;
* runtime settings with reduce-overhead, set around the compile and every call (so also around the CUDA-graph
  recording): cuBLASLt as aten's BLAS library (``torch.backends.cuda.preferred_blas_library("cublaslt")``),
  fp16 accumulation in cuBLAS's fp16 matmuls (``torch.backends.cuda.matmul.allow_fp16_accumulation=True``, a
  precision setting: read its cosine distance), and both together;
* on top of max-autotune's config (``max_autotune``, ``triton.cudagraphs``, ``coordinate_descent_tuning``),
  where the setting acts only when GEMMs are autotuned: ``max_autotune_gemm_backends="TRITON"`` (the default
  is ``"ATEN,TRITON,CPP"``), ``epilogue_fusion=False``, and ``max_autotune_gemm_search_space="EXHAUSTIVE"``,
  whose estimate is 4x max-autotune's compile: its helper starts, and the compile deadline stops it if it is
  not done (reported as cut), rather than the call running out. On the H200 (2026-12-02) it was cut on all
  three models, and its helpers, Triton-compiling from the start, made the other compiles about 2-4x slower, so
  several cheap variants were cut too: give it a call of its own (``--only exhaustive``), or leave it out
  (``--only`` with the other names).

``--only`` takes ``MODEL/TAG`` for one model alone and ``=NAME`` for one name exactly, so one call can time
other models' variants and, for one model, EXHAUSTIVE against max-autotune (``bert-base/=max-autotune
bert-base/exhaustive``). The workers' barrier also waits until no helper process is left (the parent stops them
at the compile deadline), so no autotuning shares the GPU or the cores with any timing; ``--helper-nice``
lowers the helpers' CPU priority so the cheap compiles are not slowed by them. The fourth call
(2026-12-02, the settings the third call cut)::

    python bench/probes/torch_knob_probe.py --plan extra --helper-nice 10 --only reduce-overhead#2 reduce-overhead#3 \
        persistent max_fusion_size_256 cublaslt+fp16 bert-base/=ro+fp16_accum bert-base/pad_outputs \
        bert-base/force_shape_pad gpt2/force_shape_pad bert-base/=max-autotune bert-base/exhaustive --out $OUT

In that call EXHAUSTIVE was cut on BERT again (no GEMM shape's autotuning finished in ~400 s, the last ~260 s of
them with the machine nearly to itself): by torch 2.11's config space it is about 5,300 Triton configs over
BERT's five GEMM shapes, ~7,000 on GPT-2's, more than one call of at most 600 s on 16 cores compiles.

A max-autotune variant's estimate is its ``cost`` times the model's max-autotune compile time. Helpers are
stopped as soon as the compile deadline has passed (their model's process has stopped waiting for them).

Output: ``knobprobe-<model>.json`` per model (rewritten after every round, so a cut run keeps what it has)
and ``knobprobe-table.md`` under ``--out``; the table is printed too.

    python bench/probes/torch_knob_probe.py --budget 560 --out $OUT          # the H200 run (five models)
    python bench/probes/torch_knob_probe.py --tiny --budget 240 --out /tmp/kp  # self-check: small plain-torch models
                                                                       # (CPU where no GPU)
    python bench/probes/torch_knob_probe.py --plan extra --budget 555 --out $OUT  # the third H200 call (transformers)
    python bench/probes/torch_knob_probe.py --plan extra --tiny --models tiny-attn --budget 300 --out /tmp/kpx
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import fcntl
import importlib.util
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "torch-gpu" / "modes"
CNNS = ("convnext-tiny", "resnet50", "tiny-cnn")
# max-autotune compile seconds seen on the H200 with five models compiling side by side (bench/RESULTS.md)
MAX_AUTOTUNE_EST_S = {"convnext-tiny": 300.0, "resnet50": 300.0, "vit-base": 150.0, "bert-base": 150.0,
                      "gpt2": 150.0}
COS_FLAG = 1e-3


# ---------------------------------------------------------------------------------------------- statistics


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): trt-routes' own sign-test interval of the median (``trt_routes.selection``, which
    imports no pydantic or sqlite-utils, so it loads on a bare torch image); low 0 and high inf when there are
    too few values, and none at all for no values."""
    if not values:
        return math.nan, 0.0, math.inf
    sys.path.insert(0, str(REPO))
    from trt_routes.selection import median_interval as mi

    return mi(values, confidence)


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


# ---------------------------------------------------------------------------------------------- models


@dataclass
class ModelSpec:
    name: str
    kind: str  # "cnn" | "transformer"
    build: Callable[[], Any]
    dims: list[int]
    int_range: tuple[int, int] | None = None  # token ids: [low, high)


def recipe_specs() -> dict[str, ModelSpec]:
    """The five models exactly as recipes/torch-gpu/modes/tuning.yaml names them (factories from its entry
    module, shapes and input ranges from the manifest)."""
    import yaml

    manifest = yaml.safe_load((RECIPE / "tuning.yaml").read_text())
    module_spec = importlib.util.spec_from_file_location("knobprobe_recipe_models", RECIPE / "models.py")
    assert module_spec is not None and module_spec.loader is not None
    models = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(models)
    specs: dict[str, ModelSpec] = {}
    for name, entry in manifest["models"].items():
        ((_, shapes),) = entry["shapes"].items()
        ((input_name, dims),) = shapes.items()
        factory = getattr(models, entry["entry"].split(":")[1])
        inp = (entry.get("inputs") or {}).get(input_name)
        int_range = (int(inp["low"]), int(inp["high"])) if inp and inp["dtype"] == "int64" else None
        specs[name] = ModelSpec(name, "cnn" if name in CNNS else "transformer", lambda f=factory, s=shapes: f(s),
                                list(dims), int_range)
    return specs


def tiny_specs() -> dict[str, ModelSpec]:
    """Two small plain-torch models for the self-check: a conv net and a one-block attention model."""
    import torch
    from torch import nn

    class TinyAttention(nn.Module):
        def __init__(self, vocab: int = 512, dim: int = 64, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.emb = nn.Embedding(vocab, dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.out = nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.norm = nn.LayerNorm(dim)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.emb(ids)
            b, s, d = h.shape
            q, k, v = self.qkv(h).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = self.norm(h + self.out(a.transpose(1, 2).reshape(b, s, d)))
            return h + self.mlp(h)

    def cnn() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(32, 10))

    return {"tiny-cnn": ModelSpec("tiny-cnn", "cnn", cnn, [4, 3, 32, 32]),
            "tiny-attn": ModelSpec("tiny-attn", "transformer", TinyAttention, [2, 32], (0, 512))}


# ---------------------------------------------------------------------------------------------- variants


@dataclass
class Variant:
    name: str
    setting: str  # what it is, in words, for the table
    group: str  # "eager" | "mode" | "knob" | "runtime" | "autotune"
    mode: str | None = None
    options: dict[str, Any] | None = None
    context: str | None = None  # "cudnn_benchmark" | "sdpa:<SDPBackend name>"
    layout: str | None = None  # "channels_last"
    thread: bool = False  # compile, warm up and time it on a thread of its own
    cost: float = 1.0  # estimated compile time relative to reduce-overhead #1's
    # filled in by the run
    status: str = "pending"
    error: str = ""
    compile_s: float | None = None
    est_s: float | None = None
    cos: float | None = None
    graphs: int | None = None
    graph_breaks: int | None = None
    load_s: float | None = None  # loaded from a helper process's compile (its FX graph cache)
    cache: dict[str, int] | None = None
    slots: list[float | None] = field(default_factory=list)
    fn: Any = None
    inp: Any = None
    executor: ThreadPoolExecutor | None = None

    @property
    def tag(self) -> str:
        return "".join(c if c.isalnum() else "_" for c in self.name)

    @property
    def cudagraphs(self) -> bool:
        if self.group == "eager":
            return False
        if self.mode:
            return self.mode in ("reduce-overhead", "max-autotune")
        return bool((self.options or {}).get("triton.cudagraphs"))


RO = {"triton.cudagraphs": True}


CD_ALL = {"coordinate_descent_tuning": True, "coordinate_descent_check_all_directions": True}


def confirm_variants() -> list[Variant]:
    """The second call's plan (``--plan confirm``, for the CNNs): the first call's candidates, channels_last
    and coordinate descent over all directions, compiled twice each and combined, against three
    reduce-overhead draws and max-autotune; freezing (folds the weights' layout change, one explanation of
    channels_last's gain) and cudnn.benchmark on its own thread (set up for CUDA-graph trees this time);
    max-autotune with channels_last, so the named mode gets the same layout."""
    ro = "mode=reduce-overhead"
    cl = "model and input channels_last"
    cd = "coordinate_descent_tuning=True + coordinate_descent_check_all_directions=True"

    def cl_(n: int) -> Variant:
        return Variant(f"ro+channels_last#{n}", f"{ro}, {cl}", "runtime", mode="reduce-overhead",
                       layout="channels_last")

    def cd_(n: int) -> Variant:
        return Variant(f"ro+coord_descent_all#{n}", f"cudagraphs + {cd}", "knob", options={**RO, **CD_ALL}, cost=8.0)

    def clcd(n: int) -> Variant:
        return Variant(f"ro+channels_last+coord_descent_all#{n}", f"cudagraphs + {cd}, {cl}", "knob",
                       options={**RO, **CD_ALL}, layout="channels_last", cost=8.0)

    return [Variant("eager", "no compile", "eager"),
            Variant("reduce-overhead#1", ro, "mode", mode="reduce-overhead"),
            cl_(1), cd_(1),
            Variant("reduce-overhead#2", f"{ro} (2nd compile)", "mode", mode="reduce-overhead"),
            clcd(1),
            Variant("ro+freezing", "cudagraphs + freezing=True", "knob", options={**RO, "freezing": True}, cost=1.5),
            Variant("ro+cudnn.benchmark", f"{ro}, torch.backends.cudnn.benchmark=True (own thread)", "runtime",
                    mode="reduce-overhead", context="cudnn_benchmark", thread=True),
            Variant("reduce-overhead#3", f"{ro} (3rd compile)", "mode", mode="reduce-overhead"),
            cd_(2), cl_(2), clcd(2),
            Variant("max-autotune", "mode=max-autotune", "autotune", mode="max-autotune"),
            Variant("max-autotune+channels_last", f"mode=max-autotune, {cl}", "autotune", mode="max-autotune",
                    layout="channels_last")]


MA = {"max_autotune": True, "triton.cudagraphs": True, "coordinate_descent_tuning": True}  # the mode's config
EXTRA_MODELS = ("vit-base", "bert-base", "gpt2")


def extra_variants() -> list[Variant]:
    """The third call's plan (``--plan extra``, for the transformers): the settings of issue 17's list that
    the first call did not try, each once, against three reduce-overhead draws and max-autotune. On top of
    reduce-overhead's CUDA graphs: no split reductions, no persistent reductions, multi-kernel, max_fusion_size
    8 and 256, no layout optimization, padding off / outputs padded / shape padding forced, and the runtime
    settings cuBLASLt as the BLAS library and fp16 accumulation in cuBLAS matmuls (alone and together; a
    precision setting: see its cosine distance). On top of max-autotune's config (they act only where GEMMs
    are autotuned): the EXHAUSTIVE GEMM search space, Triton as the only GEMM backend, no epilogue fusion."""
    ro = "mode=reduce-overhead"

    def knob(name: str, options: dict[str, Any], cost: float = 1.0) -> Variant:
        words = " + ".join(f"{k}={v!r}" for k, v in options.items())
        return Variant(f"ro+{name}", f"cudagraphs + {words}", "knob", options={**RO, **options}, cost=cost)

    def autotune(name: str, options: dict[str, Any], cost: float = 1.0) -> Variant:
        words = " + ".join(f"{k}={v!r}" for k, v in options.items())
        return Variant(f"max-autotune+{name}", f"max-autotune's options + {words}", "autotune",
                       options={**MA, **options}, cost=cost)

    def runtime(name: str, context: str, words: str) -> Variant:
        return Variant(f"ro+{name}", f"{ro}, {words}", "runtime", mode="reduce-overhead", context=context)

    return [Variant("eager", "no compile", "eager"),
            Variant("reduce-overhead#1", ro, "mode", mode="reduce-overhead"),
            knob("no_split_reductions", {"split_reductions": False}),
            knob("multi_kernel", {"triton.multi_kernel": 1}, cost=1.5),
            runtime("cublaslt", "blas:cublaslt", 'torch.backends.cuda.preferred_blas_library("cublaslt")'),
            knob("max_fusion_size_8", {"max_fusion_size": 8}),
            Variant("reduce-overhead#2", f"{ro} (2nd compile)", "mode", mode="reduce-overhead"),
            knob("no_layout_opt", {"layout_optimization": False}),
            knob("no_padding", {"shape_padding": False, "comprehensive_padding": False}),
            runtime("fp16_accum", "fp16_accum", "torch.backends.cuda.matmul.allow_fp16_accumulation=True"),
            knob("pad_outputs", {"pad_outputs": True}),
            knob("force_shape_pad", {"force_shape_pad": True}),
            Variant("reduce-overhead#3", f"{ro} (3rd compile)", "mode", mode="reduce-overhead"),
            knob("no_persistent_reductions", {"triton.persistent_reductions": False}),
            knob("max_fusion_size_256", {"max_fusion_size": 256}),
            runtime("cublaslt+fp16_accum", "blas:cublaslt+fp16_accum", "cuBLASLt and fp16 accumulation"),
            Variant("max-autotune", "mode=max-autotune", "autotune", mode="max-autotune"),
            autotune("gemm_backends_TRITON", {"max_autotune_gemm_backends": "TRITON"}),
            autotune("no_epilogue_fusion", {"epilogue_fusion": False}),
            # many times the default's GEMM configs per shape: minutes of Triton compiles per model. Estimated at 4x
            # max-autotune's compile, so its helper still starts (it needs half its estimate before the compile
            # deadline) and is stopped there if not done; the model's process waits for it until then.
            autotune("exhaustive", {"max_autotune_gemm_search_space": "EXHAUSTIVE"}, cost=4.0)]


def plan_variants(spec: ModelSpec, tma: bool, plan: str = "probe") -> list[Variant]:
    """Cheap ones first (the reduce-overhead draws spread among them, so they compile under the same load as
    the knobs), the costlier tuning knobs next, the max-autotune ones last."""
    if plan == "confirm":
        return confirm_variants()
    if plan == "extra":
        return extra_variants()
    v: list[Variant] = [Variant("eager", "no compile", "eager"),
                        Variant("reduce-overhead#1", "mode=reduce-overhead", "mode", mode="reduce-overhead"),
                        Variant("ro+combo_kernels", "cudagraphs + combo_kernels=True", "knob",
                                options={**RO, "combo_kernels": True}, cost=1.3),
                        Variant("ro+aggressive_fusion", "cudagraphs + aggressive_fusion=True", "knob",
                                options={**RO, "aggressive_fusion": True}),
                        Variant("reduce-overhead#2", "mode=reduce-overhead (2nd compile)", "mode",
                                mode="reduce-overhead"),
                        Variant("ro+cooperative_reductions", "cudagraphs + triton.cooperative_reductions=True",
                                "knob", options={**RO, "triton.cooperative_reductions": True})]
    if spec.kind == "cnn":
        v += [Variant("ro+cudnn.benchmark", "mode=reduce-overhead, torch.backends.cudnn.benchmark=True "
                      "(own thread)", "runtime", mode="reduce-overhead", context="cudnn_benchmark", thread=True),
              Variant("ro+channels_last", "mode=reduce-overhead, model and input channels_last", "runtime",
                      mode="reduce-overhead", layout="channels_last")]
    else:
        v += [Variant(f"ro+sdpa:{b.split('_')[0].lower()}", f"mode=reduce-overhead, sdpa_kernel({b})", "runtime",
                      mode="reduce-overhead", context=f"sdpa:{b}")
              for b in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")]
    v += [Variant("reduce-overhead#3", "mode=reduce-overhead (3rd compile)", "mode", mode="reduce-overhead"),
          Variant("ro+coord_descent_all", "cudagraphs + coordinate_descent_tuning=True + "
                  "coordinate_descent_check_all_directions=True", "knob",
                  options={**RO, **CD_ALL}, cost=8.0),
          Variant("ro+benchmark_fusion", "cudagraphs + benchmark_fusion=True", "knob",
                  options={**RO, "benchmark_fusion": True}, cost=5.0),
          Variant("max-autotune", "mode=max-autotune", "autotune", mode="max-autotune")]
    if tma and spec.kind == "transformer":
        v.append(Variant("max-autotune+tma", "max-autotune's options + triton.enable_persistent_tma_matmul=True",
                         "autotune", options={"max_autotune": True, "triton.cudagraphs": True,
                                              "coordinate_descent_tuning": True,
                                              "triton.enable_persistent_tma_matmul": True}))
    return v


def only_match(only: list[str] | None, model: str, name: str) -> bool:
    """Does ``--only`` pick variant ``name`` of ``model``? A tag matches names that contain it, or, written
    ``=NAME``, the name exactly; ``MODEL/TAG`` applies to that model alone (one call, models with different
    variants: the eleventh run's cut settings, say, and EXHAUSTIVE on one model)."""
    for tag in only or []:
        scope, _, tag = tag.rpartition("/")
        if scope and scope != model:
            continue
        if (name == tag[1:]) if tag.startswith("=") else (tag in name):
            return True
    return False


def missing_options(options: dict[str, Any]) -> list[str]:
    import torch._inductor.config as cfg

    missing = []
    for key in options:
        obj: Any = cfg
        for part in key.split("."):
            if not hasattr(obj, part):
                missing.append(key)
                break
            obj = getattr(obj, part)
    return missing


def fresh_wrapper(inner: Any, tag: str) -> Any:
    """``inner`` behind a module whose ``forward`` is a code object of its own. Dynamo keeps its compiled
    frames on the code object and treats two Inductor backends with equal options as one, so without this
    reduce-overhead #2 would reuse #1's graph and the SDPA variants the graph traced under another backend."""
    from torch import nn

    def forward(self: Any, x: Any) -> Any:
        return self.inner(x)

    code = forward.__code__.replace(co_name=f"forward_{tag}", co_qualname=f"forward_{tag}")
    fn = types.FunctionType(code, forward.__globals__, f"forward_{tag}", forward.__defaults__,
                            forward.__closure__)
    cls = type(f"KnobProbe_{tag}", (nn.Module,), {"forward": fn})
    module = cls()
    module.inner = inner
    return module


def _thread_setup() -> None:
    """A fresh thread has no CUDA-graph-tree manager (Inductor keeps it per thread, and seeds it only in the
    threads it knows of): give this one its own."""
    import threading
    from collections import defaultdict

    from torch._inductor import cudagraph_trees

    if not hasattr(cudagraph_trees.local, "tree_manager_containers"):
        cudagraph_trees.local.tree_manager_containers = {}
        cudagraph_trees.local.tree_manager_locks = defaultdict(threading.Lock)


@contextlib.contextmanager
def cudnn_benchmark(on: bool) -> Iterator[None]:
    import torch

    old = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = old


@contextlib.contextmanager
def cache_scope(directory: Path) -> Iterator[None]:
    """Inductor's caches on, in ``directory`` (a max-autotune compile done in a helper process, then loaded
    by the timing process from that FX graph cache); everywhere else they are off."""
    import torch._inductor.config as icfg

    old_dir, old_flag = os.environ.get("TORCHINDUCTOR_CACHE_DIR"), icfg.force_disable_caches
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
    icfg.force_disable_caches = False
    try:
        with icfg.patch({k: True for k in ("fx_graph_cache", "autotune_local_cache") if hasattr(icfg, k)}):
            yield
    finally:
        icfg.force_disable_caches = old_flag
        if old_dir is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old_dir


@contextlib.contextmanager
def blas_library(name: str) -> Iterator[None]:
    """``torch.backends.cuda.preferred_blas_library(name)`` (aten's matmuls: cuBLAS or cuBLASLt), restored."""
    import torch

    old = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(name)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(old)


@contextlib.contextmanager
def fp16_accumulation(on: bool) -> Iterator[None]:
    """``torch.backends.cuda.matmul.allow_fp16_accumulation`` (cuBLAS fp16 GEMMs accumulate in fp16), restored."""
    import torch

    old = torch.backends.cuda.matmul.allow_fp16_accumulation
    torch.backends.cuda.matmul.allow_fp16_accumulation = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_fp16_accumulation = old


def missing_context(v: Variant) -> str | None:
    """Why this torch cannot set the variant's runtime setting(s), or None."""
    import torch

    for part in (v.context or "").split("+"):
        if part == "fp16_accum" and not hasattr(torch.backends.cuda.matmul, "allow_fp16_accumulation"):
            return "torch.backends.cuda.matmul.allow_fp16_accumulation not in this torch"
        if part.startswith("blas:") and not hasattr(torch.backends.cuda, "preferred_blas_library"):
            return "torch.backends.cuda.preferred_blas_library not in this torch"
    return None


def variant_context(v: Variant) -> contextlib.AbstractContextManager[Any]:
    """The variant's runtime settings (``context``, parts joined by "+"), around its compile and every call."""
    stack = contextlib.ExitStack()
    for part in (v.context or "").split("+"):
        if part == "cudnn_benchmark":
            stack.enter_context(cudnn_benchmark(True))
        elif part.startswith("sdpa:"):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel(getattr(SDPBackend, part.split(":", 1)[1])))
        elif part.startswith("blas:"):
            stack.enter_context(blas_library(part.split(":", 1)[1]))
        elif part == "fp16_accum":
            stack.enter_context(fp16_accumulation(True))
        elif part:
            raise ValueError(f"unknown runtime setting {part!r}")
    return stack


_BOILERPLATE = ("TORCHDYNAMO_VERBOSE", "TORCH_LOGS", "from user code", "Hint:", "Developer debug context",
                "For more details", "File \"", "You can suppress")


def last_line(exc: BaseException) -> str:
    """The error's type, first line and last line that is not Dynamo's boilerplate (its tail, if long)."""
    message = str(exc).split("from user code:")[0]  # Dynamo appends the user's source lines
    lines = [ln.strip() for ln in message.strip().splitlines()
             if ln.strip(" ^~") and not any(b in ln for b in _BOILERPLATE)]
    if not lines:
        return type(exc).__name__
    text = f"{type(exc).__name__}: {lines[0][:120]}"
    if len(lines) > 1:
        tail = lines[-1]
        text += " ... " + (tail if len(tail) <= 300 else "..." + tail[-300:])
    return text


# ---------------------------------------------------------------------------------------------- worker


def write_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


def worker(args: argparse.Namespace) -> int:
    role = f"helper-{args.prebuild_variant}" if args.prebuild_only else "main"
    if args.prebuild_only and args.helper_nice:
        os.nice(args.helper_nice)  # inherited by the compile workers it starts: the timing processes' compiles first
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(args.run_dir / f"cache-{args.worker}-{role}")
    import torch
    import torch._dynamo
    import torch._inductor.config as icfg
    from torch._dynamo.utils import counters

    t_begin = time.time()
    icfg.force_disable_caches = True  # every compile autotunes afresh: independent draws
    for name, value in (("recompile_limit", 64), ("cache_size_limit", 64), ("accumulated_recompile_limit", 4096),
                        ("accumulated_cache_size_limit", 4096)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)
    cuda = torch.cuda.is_available() and not args.cpu
    device = "cuda" if cuda else "cpu"
    dtype = torch.float16 if cuda else torch.float32
    spec = (tiny_specs() if args.tiny else recipe_specs())[args.worker]
    out_path = args.out / f"knobprobe-{spec.name}.json"
    prefix = spec.name + (f" helper {args.prebuild_variant}" if args.prebuild_only else "")
    log = lambda msg: print(f"[{prefix} {time.time() - args.t0:6.1f}s] {msg}", flush=True)  # noqa: E731

    env: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__,
                           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None,
                           "device": torch.cuda.get_device_name(0) if cuda else "cpu", "dtype": str(dtype)}
    for mod in ("triton", "timm", "transformers", "torchvision"):
        try:
            env[mod] = importlib.import_module(mod).__version__
        except Exception:
            env[mod] = None

    torch.manual_seed(0)
    base = spec.build().eval().to(device, dtype)
    gen = torch.Generator(device=device).manual_seed(1)
    if spec.int_range:
        x = torch.randint(spec.int_range[0], spec.int_range[1], spec.dims, device=device, generator=gen)
    else:
        x = torch.randn(spec.dims, device=device, dtype=dtype, generator=gen)
    attn = None
    for path in ("model.config._attn_implementation", "config._attn_implementation"):
        obj: Any = base
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            attn = obj
            break

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def call(v: Variant) -> Any:
        if v.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        return v.fn(v.inp)

    def on(v: Variant, fn: Callable[[], Any]) -> Any:
        return v.executor.submit(fn).result() if v.executor is not None else fn()

    with torch.inference_mode():
        ref = base(x).float().clone()
    sync()

    variants = plan_variants(spec, tma=not args.no_tma, plan=args.plan)
    if args.only:
        variants = [v for v in variants if v.group == "eager" or v.name.startswith("reduce-overhead#1")
                    or only_match(args.only, spec.name, v.name)]
    if args.no_max_autotune:
        variants = [v for v in variants if v.group != "autotune"]
    if args.prebuild_only:
        variants = [v for v in variants if v.tag == args.prebuild_variant]
    state: dict[str, Any] = {"phase": "compile"}

    def cos(out: Any) -> float:
        a, b = out.flatten().double(), ref.flatten().double()
        return float(1 - (a @ b) / (a.norm() * b.norm() + 1e-30))

    def save() -> None:
        if args.prebuild_only:
            return
        args.out.mkdir(parents=True, exist_ok=True)
        write_atomic(out_path, summarize(spec, variants, env, attn, state))

    plain_s: list[float] = []
    for v in variants:
        if v.group == "eager":
            v.fn, v.inp, v.status, v.cos, v.compile_s = base, x, "ok", 0.0, 0.0
            continue
        missing = missing_options(v.options or {})
        if missing:
            v.status, v.error = "skipped", f"option(s) not in this torch's inductor config: {', '.join(missing)}"
            log(f"{v.name}: skipped ({v.error})")
            continue
        why = missing_context(v)
        if why:
            v.status, v.error = "skipped", why
            log(f"{v.name}: skipped ({v.error})")
            continue
        if v.layout == "channels_last" and len(spec.dims) != 4:
            v.status, v.error = "skipped", "channels_last needs a 4-d input"
            continue
        if v.group == "autotune":
            v.est_s = v.cost * MAX_AUTOTUNE_EST_S.get(spec.name, 60.0 if args.tiny else 150.0)
        else:
            # a plain compile's time: the median of those done after the first (which also warms up)
            base_s = statistics.median(plain_s[1:]) if len(plain_s) > 1 else (plain_s[0] if plain_s else 30.0)
            v.est_s = max(10.0, v.cost * base_s)
        prebuilt: dict[str, Any] | None = None
        scope = args.run_dir / f"cache-{spec.name}-{v.tag}"
        if v.group == "autotune" and args.prebuild and not args.prebuild_only:
            marker = args.run_dir / f"{spec.name}.{v.tag}.prebuilt"
            log(f"{v.name}: waiting for the helper process's compile")
            while not marker.exists() and time.time() < args.compile_deadline:
                time.sleep(1.0)
            if not marker.exists():
                v.status = "cut"
                v.error = "its compile in the helper process was not done by the compile deadline (helper stopped)"
                log(f"{v.name}: cut ({v.error})")
                save()
                continue
            prebuilt = json.loads(marker.read_text())
            if prebuilt["status"] != "ok":
                v.status, v.error, v.compile_s = prebuilt["status"], f"in the helper: {prebuilt['error']}", \
                    prebuilt.get("compile_s")
                log(f"{v.name}: {v.status} ({v.error})")
                save()
                continue
        else:
            left = args.compile_deadline - time.time()
            # a helper is stopped at the compile deadline, so it may start on half the estimate
            need = v.est_s * (0.5 if args.prebuild_only else 0.8 if v.group == "autotune" else 1.0)
            if left < need:
                v.status = "cut"
                v.error = f"not started: {left:.0f} s left before the compile deadline, estimate {v.est_s:.0f} s"
                log(f"{v.name}: cut ({v.error})")
                if args.prebuild_only:
                    write_atomic(args.run_dir / f"{spec.name}.{v.tag}.prebuilt",
                                 {"status": v.status, "error": v.error, "compile_s": None})
                continue
        if v.thread:
            v.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kp-{v.tag}",
                                            initializer=_thread_setup)
        graphs0 = counters["stats"]["unique_graphs"]
        breaks0 = sum(counters["graph_break"].values())
        cache0 = {k: counters["inductor"][k] for k in ("fxgraph_cache_hit", "fxgraph_cache_miss")}
        cache0["autograd_cache_hit"] = counters["aot_autograd"]["autograd_cache_hit"]
        t0 = time.perf_counter()
        try:
            model = copy.deepcopy(base)
            inp = x
            if v.layout == "channels_last":
                model = model.to(memory_format=torch.channels_last)
                inp = x.contiguous(memory_format=torch.channels_last)
            wrapped = fresh_wrapper(model, v.tag)
            kwargs: dict[str, Any] = {"mode": v.mode} if v.mode else {"options": dict(v.options or {})}
            v.fn, v.inp = torch.compile(wrapped, **kwargs), inp

            def first_calls(v: Variant = v) -> Any:
                with torch.inference_mode(), variant_context(v):
                    out = None
                    for _ in range(3):  # compile; CUDA graphs: warm-up run, recording, first replay
                        out = call(v)
                    sync()
                    return out.float().clone()

            with cache_scope(scope) if (prebuilt or args.prebuild_only) else contextlib.nullcontext():
                out = on(v, first_calls)
            v.compile_s = round(time.perf_counter() - t0, 1)
            v.cos = cos(out)
            v.status = "ok"
            if v.cost == 1.0 and v.group != "autotune":
                plain_s.append(v.compile_s)
        except Exception as exc:  # one variant failing must not lose the others
            v.compile_s = round(time.perf_counter() - t0, 1)
            v.status, v.error = "failed", last_line(exc)
            v.fn = None
            print("".join(traceback.format_exception(exc)[-6:]), file=sys.stderr, flush=True)
        v.graphs = counters["stats"]["unique_graphs"] - graphs0
        v.graph_breaks = sum(counters["graph_break"].values()) - breaks0
        if prebuilt or args.prebuild_only:
            v.cache = {k: counters["inductor"][k] - n for k, n in cache0.items() if k.startswith("fxgraph")}
            aot_hits = counters["aot_autograd"]["autograd_cache_hit"]
            v.cache["autograd_cache_hit"] = aot_hits - cache0["autograd_cache_hit"]
        if prebuilt:
            v.load_s, v.compile_s = v.compile_s, prebuilt["compile_s"]
            if v.status == "ok" and not (v.cache.get("fxgraph_cache_hit") or v.cache.get("autograd_cache_hit")):
                v.error = "loading the helper's compile missed the cache: this process compiled it again"
        if args.prebuild_only:
            write_atomic(args.run_dir / f"{spec.name}.{v.tag}.prebuilt",
                         {"status": v.status, "error": v.error, "compile_s": v.compile_s, "cos": v.cos})
        log(f"{v.name}: {v.status} in {v.compile_s} s (graphs {v.graphs}, breaks {v.graph_breaks}, "
            f"cos {v.cos if v.cos is None else f'{v.cos:.2e}'}, load {v.load_s} s, cache {v.cache}) {v.error}")
        save()
    if args.prebuild_only:
        return 0

    # ---- barrier: everyone has compiled (or the barrier deadline), then one model at a time on the GPU
    state["compile_end_s"] = round(time.time() - args.t0, 1)
    (args.run_dir / f"{spec.name}.compiled").write_text("done")
    state["phase"] = "barrier"
    save()
    t_wait = time.time()
    helpers_gone = args.run_dir / "helpers.gone"  # the parent's: no helper process is running any more
    while time.time() < args.barrier_deadline:
        if all((args.run_dir / f"{p}.compiled").exists() for p in args.peers) and helpers_gone.exists():
            break
        time.sleep(0.5)
    state["barrier_wait_s"] = round(time.time() - t_wait, 1)
    state["helpers_gone_at_barrier_end"] = helpers_gone.exists()
    ready = [v for v in variants if v.status == "ok"]
    with open(args.lock, "w") as lock:
        t_lock = time.time()
        got = False
        while time.time() < args.stop_at - 15:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                got = True
                break
            except BlockingIOError:
                time.sleep(0.2)
        state["lock_wait_s"] = round(time.time() - t_lock, 1)
        if not got:
            state["phase"] = "not timed: no lock before the stop time"
            save()
            log(state["phase"])
            return 0
        state["peers_still_compiling_at_timing"] = [p for p in args.peers
                                                    if not (args.run_dir / f"{p}.compiled").exists()]
        state["timing_start_s"] = round(time.time() - args.t0, 1)
        state["phase"] = "timing"
        state["orders"] = []
        t_time = time.perf_counter()

        def warm(v: Variant, n: int) -> None:
            with torch.inference_mode(), variant_context(v):
                for _ in range(n):
                    call(v)
                sync()

        def turn(v: Variant) -> float:
            with torch.inference_mode(), variant_context(v):
                for _ in range(args.warmup):
                    call(v)
                sync()
                if cuda:
                    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                              for _ in range(args.iters)]
                    for start, end in events:
                        start.record()
                        call(v)
                        end.record()
                    torch.cuda.synchronize()
                    times = [s.elapsed_time(e) for s, e in events]
                else:
                    times = []
                    for _ in range(args.iters):
                        t = time.perf_counter()
                        call(v)
                        times.append((time.perf_counter() - t) * 1e3)
            return float(statistics.median(times))

        for v in ready:
            try:
                on(v, lambda v=v: warm(v, 10))
            except Exception as exc:
                v.status, v.error = "failed", f"at warm-up: {last_line(exc)}"
        ready = [v for v in ready if v.status == "ok"]
        round_s = 0.0
        for r in range(args.rounds):
            if time.time() + 1.5 * round_s > args.stop_at - 5:
                state["rounds_cut"] = f"stopped after {r} rounds: stop time"
                break
            t_round = time.perf_counter()
            order = list(ready)
            random.Random(1000 + r).shuffle(order)
            state["orders"].append([v.name for v in order])
            for v in ready:
                v.slots.append(None)
            for v in order:
                if v.status != "ok":
                    continue
                try:
                    v.slots[-1] = on(v, lambda v=v: turn(v))
                except Exception as exc:
                    v.status, v.error = "failed", f"at timing: {last_line(exc)}"
            round_s = time.perf_counter() - t_round
            state["rounds"] = r + 1
            state["timing_s"] = round(time.perf_counter() - t_time, 1)
            save()
        state["phase"] = "done"
        state["timing_s"] = round(time.perf_counter() - t_time, 1)
        state["wall_s"] = round(time.time() - t_begin, 1)
        save()
    log(f"timed {state.get('rounds', 0)} rounds in {state['timing_s']} s")
    for v in variants:
        if v.executor is not None:
            v.executor.shutdown(wait=False)
    return 0


def summarize(spec: ModelSpec, variants: list[Variant], env: dict[str, Any], attn: Any,
              state: dict[str, Any]) -> dict[str, Any]:
    med = {v.name: statistics.median([s for s in v.slots if s is not None])
           for v in variants if any(s is not None for s in v.slots)}
    named = [n for n in ("reduce-overhead#1", "max-autotune") if n in med]
    best = min(named, key=lambda n: med[n]) if named else None
    draws = [n for n in ("reduce-overhead#1", "reduce-overhead#2", "reduce-overhead#3", "max-autotune") if n in med]
    best_draw = min(draws, key=lambda n: med[n]) if draws else None
    by_name = {v.name: v for v in variants}

    def ratio(ref: str | None, v: Variant) -> dict[str, Any] | None:
        if ref is None or v.name not in med:
            return None
        pairs = [a / b for a, b in zip(by_name[ref].slots, v.slots, strict=False) if a is not None and b is not None]
        m, lo, hi = median_interval(pairs)
        return {"median": m, "ci95": [lo, hi], "rounds": len(pairs), "vs": ref}

    out_variants = {}
    for v in variants:
        out_variants[v.name] = {
            "setting": v.setting, "group": v.group, "mode": v.mode, "options": v.options, "context": v.context,
            "layout": v.layout, "own_thread": v.thread, "status": v.status, "error": v.error,
            "compile_s": v.compile_s, "compile_estimate_s": v.est_s, "cos_vs_eager": v.cos,
            "cos_flag": v.cos is not None and v.cos > COS_FLAG, "inductor_graphs": v.graphs,
            "graph_breaks": v.graph_breaks,
            "compiled_in_helper_process": v.load_s is not None,
            "load_s": v.load_s,
            "cache_counters": v.cache, "median_ms": med.get(v.name), "turns_ms": v.slots,
            "ratio_vs_best_named_mode": ratio(best, v), "ratio_vs_best_named_draw": ratio(best_draw, v)}
    ro = [med[n] for n in ("reduce-overhead#1", "reduce-overhead#2", "reduce-overhead#3") if n in med]
    spread = ({"draws_ms": ro, "min_ms": min(ro), "max_ms": max(ro), "max_over_min": max(ro) / min(ro)}
              if ro else None)
    return {"model": spec.name, "kind": spec.kind, "input": spec.dims, "attn_implementation": attn, "env": env,
            "best_named_mode": best, "best_named_mode_ms": med.get(best) if best else None,
            "best_named_draw": best_draw, "reduce_overhead_spread": spread, "state": state,
            "variants": out_variants}


# ---------------------------------------------------------------------------------------------- parent


def fmt_ratio(r: dict[str, Any] | None) -> str:
    if not r:
        return "-"
    hi = "inf" if math.isinf(r["ci95"][1]) else f"{r['ci95'][1]:.3f}"
    return f"{r['median']:.3f} ({r['ci95'][0]:.3f}-{hi})"


def table(results: list[dict[str, Any]], header: str) -> str:
    lines = [header, ""]
    knob_ratios: dict[str, list[float]] = {}
    for res in results:
        if "variants" not in res:
            lines += [f"### {res['model']}: no result ({res.get('error', '')})", ""]
            continue
        st = res["state"]
        sp = res.get("reduce_overhead_spread")
        lines.append(f"### {res['model']} input {res['input']} ({res['env'].get('dtype')}; attention: "
                     f"{res.get('attn_implementation')}) — best named mode: {res.get('best_named_mode')} "
                     f"({(res.get('best_named_mode_ms') or math.nan):.3f} ms)")
        lines.append(f"timed {st.get('rounds', 0)} rounds from {st.get('timing_start_s')} s "
                     f"(compile done at {st.get('compile_end_s')} s; still compiling when it timed: "
                     f"{st.get('peers_still_compiling_at_timing')}); {st.get('rounds_cut', '')}")
        if sp:
            lines.append(f"reduce-overhead draws: {', '.join(f'{d:.3f}' for d in sp['draws_ms'])} ms; spread "
                         f"max/min = {sp['max_over_min']:.3f}")
        lines += ["", "| variant | setting | ms | vs best named mode (95% CI) | vs best of 4 named draws | "
                  "compile s | cos dist | status |", "|---|---|---|---|---|---|---|---|"]
        for name, v in res["variants"].items():
            ms = f"{v['median_ms']:.3f}" if v.get("median_ms") is not None else "-"
            cosd = "-" if v.get("cos_vs_eager") is None else f"{v['cos_vs_eager']:.1e}" + (
                " FLAG" if v.get("cos_flag") else "")
            status = v["status"] + (f": {v['error']}" if v.get("error") else "")
            lines.append(f"| {name} | {v['setting']} | {ms} | {fmt_ratio(v.get('ratio_vs_best_named_mode'))} | "
                         f"{fmt_ratio(v.get('ratio_vs_best_named_draw'))} | {v.get('compile_s')} | {cosd} | "
                         f"{status.replace('|', '/')} |")
            r = v.get("ratio_vs_best_named_mode")
            if r and v["group"] in ("knob", "runtime", "autotune", "mode"):
                knob_ratios.setdefault(name, []).append(r["median"])
        lines.append("")
    lines += ["### geomean over models of each variant's ratio to the best named mode (> 1: faster)", "",
              "| variant | geomean | models |", "|---|---|---|"]
    for name, rs in knob_ratios.items():
        lines.append(f"| {name} | {geomean(rs):.3f} | {len(rs)} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/knobprobe")))
    ap.add_argument("--models", nargs="*", help="default: the recipe's five (or the two tiny ones)")
    ap.add_argument("--budget", type=float, default=560.0, help="seconds for the whole run")
    ap.add_argument("--timing-reserve", type=float, default=100.0,
                    help="seconds before the end of the budget at which compiling stops starting variants")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="self-check on two small plain-torch models")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even where a GPU is")
    ap.add_argument("--no-max-autotune", action="store_true")
    ap.add_argument("--no-tma", action="store_true", help="leave out max-autotune + persistent TMA matmul")
    ap.add_argument("--no-prebuild", dest="prebuild", action="store_false",
                    help="compile the max-autotune variants in the timing process itself, last (default: in a "
                    "helper process per model from the start, in a fresh cache folder of their own, and load them "
                    "from that FX graph cache at the end)")
    ap.add_argument("--only", nargs="*", help="only variants whose name contains one of these (plus eager and "
                    "reduce-overhead #1); =NAME: that name exactly; MODEL/TAG: for that model alone")
    ap.add_argument("--helper-nice", type=int, default=0,
                    help="os.nice increment of the max-autotune helper processes (and their compile workers), so "
                    "the timing processes' own compiles come first on the cores")
    # worker arguments (set by the parent)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--compile-deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--barrier-deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--stop-at", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--lock", help=argparse.SUPPRESS)
    ap.add_argument("--peers", nargs="*", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--prebuild-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--prebuild-variant", help=argparse.SUPPRESS)
    ap.add_argument("--plan", choices=("probe", "confirm", "extra"), default="probe",
                    help="probe: every knob once (first call); confirm: the CNN candidates again, twice each; "
                    "extra: the settings of issue 17 the probe did not try (default models: the three "
                    "transformers)")
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    t0 = time.time()
    names = args.models or (["tiny-cnn", "tiny-attn"] if args.tiny else list(EXTRA_MODELS) if args.plan == "extra"
                            else ["convnext-tiny", "vit-base", "resnet50", "bert-base", "gpt2"])
    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = Path(f"/tmp/knobprobe-{os.getpid()}")
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = f"/tmp/knobprobe-{os.getpid()}.lock"
    stop_at = t0 + args.budget - 10
    compile_deadline = t0 + args.budget - args.timing_reserve
    barrier_deadline = t0 + args.budget - 0.6 * args.timing_reserve
    print(f"torch_knob_probe: models {names}, budget {args.budget:.0f} s, compile deadline "
          f"+{compile_deadline - t0:.0f} s, barrier +{barrier_deadline - t0:.0f} s, stop +{stop_at - t0:.0f} s",
          flush=True)
    passthrough = ["--rounds", str(args.rounds), "--iters", str(args.iters), "--warmup", str(args.warmup),
                   "--plan", args.plan]
    passthrough += ["--helper-nice", str(args.helper_nice)]
    for flag in ("tiny", "cpu", "no_max_autotune", "no_tma"):
        if getattr(args, flag):
            passthrough.append("--" + flag.replace("_", "-"))
    if not args.prebuild or args.no_max_autotune:
        passthrough.append("--no-prebuild")
    if args.only:
        passthrough += ["--only", *args.only]
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []
    helpers: list[tuple[str, subprocess.Popen[bytes]]] = []
    for name in names:
        (args.out / f"knobprobe-{name}.json").unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "--worker", name, "--out", str(args.out), "--t0", str(t0),
               "--compile-deadline", str(compile_deadline), "--barrier-deadline", str(barrier_deadline),
               "--stop-at", str(stop_at), "--run-dir", str(run_dir), "--lock", lock, "--peers", *names,
               *passthrough]
        procs.append((name, subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                             start_new_session=True)))
        if "--no-prebuild" not in passthrough:  # one helper per max-autotune variant, from the start
            kind = "cnn" if name in CNNS else "transformer"
            for v in plan_variants(ModelSpec(name, kind, lambda: None, []), not args.no_tma, args.plan):
                if v.group == "autotune" and (not args.only or only_match(args.only, name, v.name)):
                    helpers.append((f"{name} {v.tag}", subprocess.Popen(
                        [*cmd, "--prebuild-only", "--prebuild-variant", v.tag],
                        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)))

    def stop(name: str, p: subprocess.Popen[bytes], why: str) -> None:
        print(f"[{name}] {why}: killed", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, 9)  # its own session: the worker and the compile workers it started
        p.wait()

    gone = run_dir / "helpers.gone"
    while any(p.poll() is None for _, p in procs) and time.time() < stop_at + 5:
        # the model's process stops waiting for a helper at the compile deadline, so a later result is unused;
        # stop it at once, or its autotuning benchmarks would share the GPU with the first timed rounds
        if time.time() > compile_deadline + 1:
            for name, h in helpers:
                if h.poll() is None:
                    stop(f"{name} helper", h, "max-autotune helper still compiling after the compile deadline")
        if not gone.exists() and all(h.poll() is not None for _, h in helpers):
            gone.write_text(f"{time.time() - t0:.1f}")  # the workers' barrier waits for this too
            print(f"torch_knob_probe: no helper process left at +{time.time() - t0:.1f} s", flush=True)
        time.sleep(0.5)
    for name, h in helpers:
        if h.poll() is None:
            stop(f"{name} helper", h, "helper still running at the end")
    results = []
    for name, p in procs:
        if p.poll() is None:
            stop(name, p, "still running at the stop time (its JSON keeps what it had)")
        path = args.out / f"knobprobe-{name}.json"
        if path.is_file():
            res = json.loads(path.read_text())
            res.setdefault("state", {})["exit"] = p.returncode
            path.write_text(json.dumps(res, indent=1, default=str))
        else:
            res = {"model": name, "error": f"worker exit {p.returncode}, no JSON"}
        results.append(res)
    env = next((r["env"] for r in results if "env" in r), {})
    header = (f"## torch_knob_probe ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))}, "
              f"wall {time.time() - t0:.0f} s)\n\nenvironment: {json.dumps(env)}\n\n"
              f"ratio = best named mode's ms / variant's ms per round (> 1: the variant is faster); median of "
              f"{args.rounds} rounds, 95% order-statistic interval; best named mode = faster of reduce-overhead#1 "
              f"and max-autotune; turns of {args.warmup} warm-up + {args.iters} CUDA-event-timed calls, median.")
    text = table(results, header)
    (args.out / "knobprobe-table.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
