"""torch-inductor: torch.compile's named modes as baselines (expanded from the installed torch), build-cost
hints, and several compiled models of one class side by side in one process (the re-measurement worker)
without recompiling."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from trt_routes.backends import registry  # noqa: E402
from trt_routes.backends.base import BuildSpec  # noqa: E402
from trt_routes.backends.torch_inductor import TorchInductorBackend  # noqa: E402
from trt_routes.backends.torch_inductor.catalog import (  # noqa: E402
    catalog_digest,
    expand_preset,
    preset_table,
)
from trt_routes.errors import ManifestError, RouteError  # noqa: E402
from trt_routes.project import open_project  # noqa: E402

#: A ConvNeXt-like model as timm writes it: many blocks of one class (one forward code object shared by
#: all of them), depthwise conv, channels-last LayerNorm, MLP, layer scale, residual.
CONVNEXT = textwrap.dedent('''\
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, 4 * dim)
            self.fc2 = nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(torch.full((dim,), 0.5))

        def forward(self, x):
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.fc2(torch.nn.functional.gelu(self.fc1(y))) * self.gamma
            return x + y.permute(0, 3, 1, 2)


    class ConvNeXtTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 4, stride=4)
            self.stages = nn.Sequential(Block(16), Block(16), nn.Conv2d(16, 32, 2, stride=2), Block(32))
            self.head = nn.Linear(32, 10)

        def forward(self, image):
            return self.head(self.stages(self.stem(image)).mean((2, 3)))


    def convnext(shapes):
        return ConvNeXtTiny()
    ''')
SHAPE = [2, 3, 32, 32]


@pytest.fixture(scope="module")
def backend() -> TorchInductorBackend:
    return registry.get("torch-inductor")  # type: ignore[return-value]


#: The entry as a user writes it for timm: the factory in the manifest's folder, the model class from an
#: installed library, imported once per process (so every load shares the library's code objects).
ENTRY = textwrap.dedent('''\
    from timmlike_lib import ConvNeXtTiny


    def convnext(shapes):
        return ConvNeXtTiny()
    ''')


def spec(root: Path, route: dict[str, str] | None = None, kind: str = "cpu", **settings: Any) -> BuildSpec:
    (root / "timmlike.py").write_text(ENTRY, encoding="utf-8")
    return BuildSpec(model_path=str(root), route=route or {}, profile={"image": {"min": SHAPE, "opt": SHAPE,
                                                                                  "max": SHAPE}},
                     settings=settings, target={"kind": kind}, entry="timmlike:convnext")


# -- presets --------------------------------------------------------------------------------------------


def test_presets_are_the_installed_torchs_named_modes_as_knob_values(backend: TorchInductorBackend) -> None:
    from torch._inductor import list_mode_options

    table = backend.preset_table()
    assert set(backend.presets()) == {"reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"}
    for mode, route in table.items():
        expected = {f"-{k}": ("1" if v is True else "0" if v is False else str(v))
                    for k, v in list_mode_options(mode).items()}
        assert route == expected, mode
    # on a CPU, CUDA-only switches of a mode do nothing: the preset leaves them out, as torch.compile does
    cpu = expand_preset(table, "max-autotune", "jit", "cpu")
    gpu = expand_preset(table, "max-autotune", "jit", "cuda")
    assert "-triton.cudagraphs" not in cpu and gpu.get("-triton.cudagraphs") == "1"
    assert cpu["-max_autotune"] == "1" and gpu["-max_autotune"] == "1"
    assert "-triton.cudagraphs" not in expand_preset(table, "max-autotune", "aot", "cuda")
    with pytest.raises(RouteError, match="no preset 'fastest'"):
        expand_preset(table, "fastest", "jit", "cpu")


def test_a_mode_option_without_a_knob_is_refused_not_dropped(backend: TorchInductorBackend) -> None:
    table = preset_table(lambda mode: {"max_autotune": True, "some_new_switch": True}, backend.catalog())
    with pytest.raises(RouteError, match="some_new_switch=1, which trt-routes has no knob"):
        expand_preset(table, "max-autotune", "jit", "cuda")


def test_presets_enter_the_catalog_digest(backend: TorchInductorBackend) -> None:
    catalog = backend.catalog()
    table = backend.preset_table()
    other = {**table, "max-autotune": {"-max_autotune": "1"}}
    assert catalog_digest(catalog, table) != catalog_digest(catalog, other)
    assert backend.software()["catalog_digest"] == catalog_digest(catalog, table)


def manifest(root: Path, baseline: dict[str, str], kind: str = "cpu") -> Path:
    (root / "timmlike.py").write_text(CONVNEXT, encoding="utf-8")
    data: dict[str, Any] = {
        "schema_version": 1,
        "targets": {"t": {"kind": "cpu"} if kind == "cpu" else {"kind": "gpu", "name": "*H200*"}},
        "switch_groups": {"g": "-freezing=[0|1]"},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"backend": "torch-inductor", "switch_group": "g", "tolerance": "t", "baseline": baseline},
        "models": {"m": {"entry": "timmlike:convnext", "shapes": {"b2": {"image": SHAPE}}}},
    }
    path = root / "tuning.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_manifest_preset_becomes_the_jobs_baseline_route(tmp_path: Path) -> None:
    (job,) = open_project(manifest(tmp_path, {"preset": "max-autotune"})).jobs
    assert job.baseline == "-max_autotune=1" and job.baseline_source == "preset max-autotune"
    (gpu,) = open_project(manifest(tmp_path, {"preset": "reduce-overhead"}, kind="gpu")).jobs
    assert gpu.baseline == "-triton.cudagraphs=1"


def test_baseline_route_with_a_knob_that_does_not_act_here_is_a_positioned_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        open_project(manifest(tmp_path, {"route": "-triton.cudagraphs=1"})).jobs  # noqa: B018
    text = str(info.value)
    assert "tuning.yaml:" in text and "baseline" in text and "does not apply on cpu targets" in text


# -- build costs and cache honesty ------------------------------------------------------------------------


def test_build_cost_hints(backend: TorchInductorBackend) -> None:
    catalog = backend.catalog()
    assert catalog.route_cost({}) == 1.0
    assert catalog.route_cost({"-freezing": "0"}) == 1.0
    autotune = catalog.route_cost({"-max_autotune": "1"})
    assert autotune > 3 and catalog.route_cost({"-max_autotune": "1", "-coordinate_descent_tuning": "1"}) > autotune
    assert "build cost" in (catalog.get("-max_autotune").help or "")  # type: ignore[union-attr]


# -- side by side in one process -----------------------------------------------------------------------------


@pytest.mark.slow  # compiles and times several torch models: minutes of CPU
def test_several_compiled_models_of_one_class_time_side_by_side_without_recompiling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 14: the re-measurement worker loads every engine, then times them interleaved (A B A C ...).
    Models of a library class (timm's) share their forward code object; compiling B used to reset Dynamo,
    so A's next call recompiled: RecompileError (BACKEND_MATCH) and the confirmation crashed."""
    lib = tmp_path / "site"
    lib.mkdir()
    (lib / "timmlike_lib.py").write_text(CONVNEXT, encoding="utf-8")
    monkeypatch.syspath_prepend(str(lib))
    project = tmp_path / "project"
    project.mkdir()
    tmp_path = project
    builder = TorchInductorBackend()
    routes = [{}, {"-freezing": "1"}, {"-max_fusion_size": "8"}]
    paths = []
    for i, route in enumerate(routes):
        path = tmp_path / f"engine{i}.json"
        builder.build(spec(tmp_path, route), path)
        paths.append(path)
    worker = TorchInductorBackend()  # another process: recreates each engine from its recipe
    runners = [worker.load(p, spec(tmp_path, r)) for p, r in zip(paths, routes, strict=True)]
    feeds = {"image": np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)}
    # timed calls refuse to recompile (error_on_recompile), as in the re-measurement worker
    for runner in [runners[0], runners[1], runners[0], runners[2], runners[0], runners[1]]:
        assert len(runner.time(feeds, 0, 2, 1)) == 2
    eager = runners[0].run(feeds)["output"]
    for runner in runners[1:]:
        np.testing.assert_allclose(runner.run(feeds)["output"], eager, rtol=1e-3, atol=1e-4)
