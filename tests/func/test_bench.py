"""Every bench script runs end to end on tiny inputs, as a subprocess, and prints its table or last line.

GPU-only scripts run where a CUDA GPU (and torch) is present and are skipped, saying why, elsewhere;
``probes/probe_startup.py`` and ``scale.py --backend torch-inductor --device cpu`` are their CPU-capable paths."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from _paths import REPO

pytestmark = pytest.mark.slow  # runs every benchmark script: CPU-burning

BENCH = REPO / "bench"
LANDSCAPES = BENCH / "landscapes"
#: one knob with two values, the catalog default among them: the default route and one other
ORT_ONE_KNOB = "-graph_optimization_level=[basic|all]"


def bench(script: str, *args: str, cwd: Path, timeout: float = 300) -> str:
    """Run ``bench/<script>`` with ``args``; its stdout (stderr shown if it fails)."""
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script} exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@cache
def gpu_names() -> tuple[str, ...]:
    """The CUDA GPUs ``nvidia-smi -L`` lists (none without a driver)."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line for line in out.splitlines() if line.startswith("GPU "))


def cuda_gpus() -> int:
    return len(gpu_names())


def has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def needs_gpu(count: int = 1) -> None:
    if cuda_gpus() < count:
        pytest.skip(f"GPU-only bench: needs {count} CUDA GPU(s), found {cuda_gpus()} (nvidia-smi -L); "
                    "it has no CPU path")
    if not has_torch():
        pytest.skip("GPU-only bench: needs torch (pip install 'trt-routes[torch]')")


def quickstart(dest: Path) -> Path:
    """A copy of the repository's quickstart project (tuning.yaml and its models): nothing in the repo is written."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "tuning.yaml", dest / "tuning.yaml")
    shutil.copytree(REPO / "recipes" / "quickstart", dest / "recipes" / "quickstart",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "tuning.yaml"


def test_search_bench_prints_a_row_per_landscape_and_strategy_and_the_summary(tmp_path: Path) -> None:
    out = bench("search.py", "--seeds", "2", "--strategies", "adaptive,fast,fast-trtexec", cwd=tmp_path)
    lands = sorted(p.stem for p in LANDSCAPES.glob("*.json"))
    assert f"# bench/search.py: {len(lands)} landscapes x 3 strategies x 2 seeds" in out
    rows = re.findall(r"^\| (\S+) \| (\S+) \| ([\d.]+) \| (\d+)% \| ([\d.]+|inf) \| ([\d.]+|inf) \| (\d+)% \| "
                      r"([\d.]+)% \|$", out, re.M)
    assert {(r[0], r[1]) for r in rows} == {(land, s) for land in lands for s in ("adaptive", "fast", "fast-trtexec")}
    assert all(float(r[2]) >= 1 for r in rows)  # the default route is always built
    summary = dict(re.findall(r"^(\S+): mean builds share (\d+)%, worst regret<=1\.03 share \d+%, "
                              r"worst wrong-winner rate [\d.]+%$", out, re.M))
    assert set(summary) == {"adaptive", "fast", "fast-trtexec"}
    assert 0 < int(summary["fast"]) <= 100


def test_make_landscapes_writes_reproducible_valid_files(tmp_path: Path) -> None:
    from trt_routes.backends.landscape import load

    shutil.copy(LANDSCAPES / "ort-resnet-bs8.json", tmp_path / "ort-resnet-bs8.json")
    out = bench("make_landscapes.py", "--out", str(tmp_path), cwd=tmp_path)
    written = re.findall(r"^wrote (.+)$", out, re.M)
    names = {"launch-bound-gpu.json", "aa-launch-bound.json", "aa-ort-resnet-bs8.json"}
    assert {Path(w).name for w in written} == names
    for name in names:
        assert load(tmp_path / name).data.routes  # valid trt-routes/landscape@1
    # seeded: the first file does not depend on which recorded landscapes are beside it
    assert (tmp_path / "launch-bound-gpu.json").read_bytes() == (LANDSCAPES / "launch-bound-gpu.json").read_bytes()


def test_record_landscape_records_the_quickstart_into_a_file(tmp_path: Path) -> None:
    from trt_routes.backends.landscape import load

    manifest = quickstart(tmp_path / "project")
    out_file = tmp_path / "recorded.json"
    out = bench("record_landscape.py", "-m", str(manifest), "--job", "resnet-like/bs1/cpu", f"--group={ORT_ONE_KNOB}",
                "--rounds", "2", "--iterations", "3", "--out", str(out_file), cwd=tmp_path)
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"wrote (.+): (\d+) routes \((\d+) ok\), ([\d.]+) s", last)
    assert m, last
    assert Path(m[1]) == out_file and int(m[2]) == 2 and int(m[3]) == 2
    land = load(out_file)
    for route in ("", "-graph_optimization_level=basic"):
        rec = land.get(route)
        assert rec is not None and rec.status == "ok"
        assert len(rec.samples_ms) == 2 * 3  # every round re-measures every route that built
    assert not (tmp_path / "project" / "caches").exists() or not any((tmp_path / "project" / "caches").iterdir())


def test_plan_overhead_prints_its_table_with_ratios(tmp_path: Path) -> None:
    out = bench("plan_overhead.py", "--models", "1", "--shapes", "1", "--only", "resnet-like/bs1/cpu",
                f"--group={ORT_ONE_KNOB}", cwd=tmp_path)
    assert re.search(r"^machine: .+; synthetic cache filled in [\d.]+ s; \d+ cached routes per job$", out, re.M)
    plan = re.search(r"^no-op plan, (\d+) trials / 1 jobs\s+([\d.]+) s\s+1 s\s+([\d.]+)$", out, re.M)
    assert plan, out
    assert int(plan[1]) > 100  # the full strategy's routes of one job, all cached
    assert float(plan[3]) == pytest.approx(float(plan[2]), abs=0.01)  # ratio = result / 1 s target
    assert re.search(r"^no-op apply, same cache\s+[\d.]+ s\s+1 s\s+[\d.]+$", out, re.M)
    per_trial = re.search(r"^quickstart overhead per trial \(median of (\d+) trials\)\s+(-?[\d.]+)% .+\s+5%\s+"
                          r"(-?[\d.]+)$", out, re.M)
    assert per_trial, out
    assert int(per_trial[1]) >= 2
    assert float(per_trial[3]) == pytest.approx(float(per_trial[2]) / 5, abs=0.02)
    assert re.search(r"^quickstart whole run incl\. start-up and references\s+[\d.]+% of [\d.]+ s", out, re.M)


def test_malformed_manifests_tallies_one_class(tmp_path: Path) -> None:
    """One small class of the corpus (encoding) through validate, plan and apply of a freshly tuned project."""
    out = bench("malformed_manifests.py", "--classes", "encoding", cwd=tmp_path)
    cols = ["clean", "tracebacks", "wrote", "accepted", "unclear"]
    assert re.search(r"^class +tried +" + " +".join(cols) + "$", out, re.M), out
    rows = {name: [int(x) for x in nums.split()] for name, nums in
            re.findall(r"^(encoding|total) +((?:\d+ +){5}\d+)$", out, re.M)}
    assert set(rows) == {"encoding", "total"} and rows["encoding"] == rows["total"], out
    tried, *counts = rows["total"]
    assert tried >= 4 and sum(counts) == tried  # every case lands in exactly one column
    last = re.fullmatch(r"tried=(\d+) clean=(\d+) tracebacks=(\d+) wrote=(\d+) accepted=(\d+)",
                        out.strip().splitlines()[-1])
    assert last and [int(x) for x in last.groups()] == [tried, *counts[:4]], out
    assert counts[1] == counts[2] == 0  # no traceback escaped, no file of the project changed


def test_scale_onnxruntime_prints_the_ratio_of_two_workers_to_one(tmp_path: Path) -> None:
    out = bench("scale.py", "--backend", "onnxruntime", "--group=-enable_mem_pattern=[0|1]", "--workers", "2,1",
                "--json", str(tmp_path / "scale.json"), cwd=tmp_path)
    rows = {int(w): (int(t), float(tps)) for w, t, tps in
            re.findall(r"^\s+([12]) +(\d+) +[\d.]+ +([\d.]+) +[\d.]+x", out, re.M)}
    assert set(rows) == {1, 2} and rows[1][0] == rows[2][0] == 4  # two jobs x (default + one route)
    ratio = re.search(r"^2 workers vs 1: ([\d.]+)x \(target >= 1\.8x with two GPUs\)$", out, re.M)
    assert ratio, out
    assert float(ratio[1]) == pytest.approx(rows[2][1] / rows[1][1], abs=0.01)
    assert re.findall(r"^  workers=([12]): exit 0, statuses \['ok'\]", out, re.M) == ["2", "1"]
    import json

    assert json.loads((tmp_path / "scale.json").read_text())["ratio_2_vs_1"] == pytest.approx(float(ratio[1]), abs=0.01)


#: opt-in for scale.py's torch-inductor CPU path where no GPU is present: two Inductor builds of its MLP take
#: ~3.5 minutes on 2 busy cores, more than this whole file's budget
TORCH_CPU_VAR = "TRT_ROUTES_BENCH_TORCH_CPU"


def test_scale_torch_inductor(tmp_path: Path) -> None:
    """scale.py's torch-inductor path, one worker, two routes: on the GPU where there is one, else on its CPU
    target (``--device cpu``) when asked for with TRT_ROUTES_BENCH_TORCH_CPU=1."""
    if not has_torch():
        pytest.skip("scale.py --backend torch-inductor needs torch (pip install 'trt-routes[torch]')")
    device = "gpu" if cuda_gpus() else "cpu"
    if device == "cpu" and os.environ.get(TORCH_CPU_VAR) != "1":
        pytest.skip(f"no CUDA GPU; the CPU path (--device cpu) takes minutes of Inductor builds: {TORCH_CPU_VAR}=1 "
                    "runs it")
    out = bench("scale.py", "--backend", "torch-inductor", "--device", device, "--group=-freezing=[0|1]",
                "--workers", "1", cwd=tmp_path, timeout=600)
    row = re.search(r"^\s+1 +(\d+) +[\d.]+ +([\d.]+) +1\.00x", out, re.M)
    assert row and int(row[1]) == 2, out
    assert re.search(r"^2 workers vs 1: nanx", out, re.M)  # no two-worker run asked for
    assert re.search(rf"^  workers=1: exit 0, statuses \['ok'\], winners \{{'mlp/bs64/{device}': ", out, re.M), out


def test_probe_startup_prints_each_step_twice(tmp_path: Path) -> None:
    """Its CPU path: detection and the GPUs' local cores run anywhere; without CUDA the child step says why."""
    out = bench("probes/probe_startup.py", cwd=tmp_path)
    steps = re.findall(r"^(first|second) (detect\(\)|gpu_local_cpus|child process): ([\d.]+) s(.*)$", out, re.M)
    assert [(a, s) for a, s, _, _ in steps] == [(a, s) for a in ("first", "second")
                                                for s in ("detect()", "gpu_local_cpus", "child process")]
    child = steps[2][3]
    if cuda_gpus() and has_torch():
        assert re.search(r"import torch [\d.]+ s, CUDA context [\d.]+ s", child), child
    else:
        assert child.startswith(" (failed: "), child


def test_gpu_speedup_on_one_small_model(tmp_path: Path) -> None:
    needs_gpu()
    if not any("H200" in name for name in gpu_names()):
        pytest.skip(f"recipes/torch-gpu targets an H200 (name: \"*H200*\"); this machine has {gpu_names()}")
    out = bench("gpu_speedup.py", "--work", str(tmp_path / "work"), "--parallel", "1", "--models", "mobilenet-v3",
                "--group", "jit=-freezing=[0|1]", "--measure", "warmup=2,iterations=5,repeats=2",
                "--deadline", "400", "--out", str(tmp_path / "out.json"), cwd=tmp_path, timeout=600)
    assert re.search(r"^mobilenet-v3 +jit +[\d.]+ +[\d.]+ +[\d.]+x ", out, re.M), out
    assert re.search(r"^geomean jit: [\d.]+x over 1/1 model\(s\); target >= 1\.5x", out, re.M), out
    assert re.search(r"^total wall \d+ s; \d+ build\(s\)$", out, re.M)


def test_compile_contention_two_gpus(tmp_path: Path) -> None:
    needs_gpu(2)
    out = bench("compile_contention.py", "--builds", "2", cwd=tmp_path, timeout=600)
    rows = re.findall(r"^(solo|pair|pair-pinned|solo-pinned) +([\d.]+) +([\d.]+)x", out, re.M)
    assert [r[0] for r in rows] == ["solo", "pair", "pair-pinned", "solo-pinned"], out
    assert float(rows[0][2]) == pytest.approx(1.0)


def test_torch_gpu_probe(tmp_path: Path) -> None:
    needs_gpu()
    proc = subprocess.run([sys.executable, str(BENCH / "probes" / "torch_gpu_probe.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    steps = re.findall(r"^== (.+): exit (-?\d+) in \d+ s$", proc.stdout, re.M)
    assert [s for s, _ in steps] == ["raw torch AOTInductor on cuda:0", "torch-inductor backend, mode aot",
                                     "jit with CUDA graphs, then AOTInductor, in one process"], proc.stdout
    assert proc.returncode == (0 if all(code == "0" for _, code in steps) else 1)  # its verdict: every step ran


def _load_bench(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), BENCH / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_vs_modes_table_reports_the_ratio_to_the_best_named_mode() -> None:
    """The table and its geomean line from per-model results (the GPU part runs on an H200 only, below)."""
    table = _load_bench("gpu_vs_modes.py").table
    results = [
        {"model": "cnn", "median_ms": {"eager": 4.0, "reduce-overhead": 2.0, "max-autotune": 1.8, "trt-routes": 1.5},
         "best_mode": "max-autotune", "speedup_vs_best_mode": {"median": 1.2, "ci95": [1.1, 1.3]},
         "compile_s": {"max-autotune": 200}, "tuned": {"route": "-a=1"}},
        {"model": "lm", "median_ms": {"eager": 3.0}, "best_mode": None, "errors": {"trt-routes": "no route"}},
    ]
    text = table(results, 123.0)
    assert re.search(r"^cnn .* max-autotune +1\.200x \(1\.100-1\.300\) ", text, re.M), text
    assert re.search(r"^lm .* no route", text, re.M), text
    assert "geomean tuned/best named mode: 1.200x over 1 of 2 models" in text and "tuning wall 123.0 s" in text


def test_gpu_vs_modes_on_one_model(tmp_path: Path) -> None:
    needs_gpu()
    if not any("H200" in name for name in gpu_names()):
        pytest.skip(f"recipes/torch-gpu/modes targets an H200; this machine has {gpu_names()}")
    out = bench("gpu_vs_modes.py", "--models", "resnet50", "--rounds", "3", "--iters", "5", cwd=tmp_path,
                timeout=900)
    assert re.search(r"^geomean tuned/best named mode: [\d.]+x over \d of 1 models", out, re.M), out


def test_gpu_objectives_on_one_model(tmp_path: Path) -> None:
    needs_gpu()
    if not any("H200" in name for name in gpu_names()):
        pytest.skip(f"bench/gpu_objectives.py targets an H200; this machine has {gpu_names()}")
    import json

    out = bench("gpu_objectives.py", "--work", str(tmp_path / "obj"), cwd=tmp_path, timeout=900)
    report = json.loads(out)
    assert report["apply_tail"]["code"] == 0 and report["apply_edge"]["doc"]["built"] == 0
    assert [j["action"] for j in report["plan_edge"]["jobs"]] == ["reselect"]
    assert all(t["facts"]["device_memory_mb"] > 0 for t in report["explain_tail"]["trials"])


def test_gpu_speedup_resume_keeps_the_shards_an_earlier_call_left(tmp_path: Path) -> None:
    """``--resume`` (a device call continuing the last one's search): shard folders already there keep their
    cache and lock; without it they are made afresh from the recipe."""
    prepare = _load_bench("gpu_speedup.py").prepare
    recipe = BENCH.parent / "recipes" / "torch-gpu" / "modes"
    work = tmp_path / "work"
    shards = [["convnext-tiny"], ["vit-base"]]
    folders = prepare(recipe, work, shards, {}, {}, {})
    assert [f.name for f in folders] == ["shard0", "shard1"]
    (folders[0] / "caches").mkdir()
    (folders[0] / "caches" / "trials.sqlite").write_text("earlier trials")
    (folders[0] / "tuning.lock").write_text("jobs: {}\n")
    again = prepare(recipe, work, shards, {"gpu": "-freezing=[0|1]"}, {}, {}, resume=True)
    assert again == folders and (folders[0] / "caches" / "trials.sqlite").read_text() == "earlier trials"
    assert "-freezing=[0|1]\n" not in (folders[0] / "tuning.yaml").read_text()  # the shard's manifest as it was
    fresh = prepare(recipe, work, shards, {}, {}, {})
    assert fresh == folders and not (folders[0] / "caches").exists() and not (folders[0] / "tuning.lock").exists()


def test_side_by_side_prints_both_variants_and_its_last_line(tmp_path: Path) -> None:
    """Kept sessions against one session loaded per turn, on A/A engines of the quickstart (the numbers are
    the benchmark's, recorded in RESULTS.md; here only that it runs and reports both)."""
    out = bench("side_by_side.py", "--rounds", "3", "--repeats", "1", "--iterations", "5", cwd=tmp_path)
    assert re.search(r"^\| kept \| ", out, re.M) and re.search(r"^\| reload \| ", out, re.M), out
    last = re.fullmatch(r"kept_off=(\S+) reload_off=(\S+) one_thread_alone=(\S+) one_thread_reload=(\S+) "
                        r"one_thread_kept=(\S+)", out.strip().splitlines()[-1])
    assert last, out
    kept_off, reload_off, *ratios = (float(v) for v in last.groups())
    assert 0 <= kept_off <= 1 and 0 <= reload_off <= 1 and all(r > 0 for r in ratios), last.groups()


def test_side_by_side_layouts_report_both_and_the_shared_layout_takes_fewer_turns(tmp_path: Path) -> None:
    """``--layouts`` (README's development commands): adjacent and shared baseline turns on real A/A engines;
    the shared layout takes 1.5 turns per ratio with three challengers open throughout, the adjacent one 2
    (plus its first baseline turn). The ratios are the benchmark's (RESULTS.md); here only that they exist."""
    out = bench("side_by_side.py", "--layouts", "--rounds", "4", "--repeats", "1", "--iterations", "5", cwd=tmp_path)
    assert re.search(r"^\| adjacent \| ", out, re.M) and re.search(r"^\| shared \| ", out, re.M), out
    last = dict(kv.split("=") for kv in out.strip().splitlines()[-1].split())
    assert float(last["shared_turns_per_ratio"]) == 1.5, last
    assert 2.0 < float(last["adjacent_turns_per_ratio"]) <= 2.1, last
    assert all(float(last[f"{name}_median"]) > 0 for name in ("adjacent", "shared")), last


def test_torch_knob_probe_tiny_runs_every_variant_and_writes_its_table(tmp_path: Path) -> None:
    """bench/probes/torch_knob_probe.py's self-check (two small plain-torch models; the CPU where no GPU): both
    models finish, every named-mode draw and variant is timed or reported, and the table names each model."""
    if not has_torch():
        pytest.skip("torch is not installed")
    out_dir = tmp_path / "kp"
    out = bench("probes/torch_knob_probe.py", "--tiny", "--budget", "240", "--rounds", "2", "--iters", "3", "--out",
                str(out_dir), cwd=tmp_path, timeout=420)
    table = (out_dir / "knobprobe-table.md").read_text()
    for model in ("tiny-cnn", "tiny-attn"):
        data = json.loads((out_dir / f"knobprobe-{model}.json").read_text())
        assert data["state"]["phase"] == "done" and data["state"]["exit"] == 0, data["state"]
        assert len(data["reduce_overhead_spread"]["draws_ms"]) == 3  # three independent compiles of one mode
        variants = data["variants"]
        assert {"eager", "reduce-overhead#1", "max-autotune"} <= set(variants)
        statuses = [v["status"] for v in variants.values()]
        assert all(s == "ok" or s.startswith(("failed", "cut", "skipped")) for s in statuses), statuses
        assert model in table and model in out


@pytest.mark.slow
def test_startup_ab_compares_two_trees_on_the_quickstart(tmp_path: Path) -> None:
    """bench/startup_ab.py, A/A (this tree against itself), one round of the quickstart: a row per workload and
    the last line the largest share saved."""
    out = bench("startup_ab.py", "--old", str(REPO), "--new", str(REPO), "--rounds", "1", "--only", "quickstart",
                cwd=tmp_path, timeout=600)
    rows = [line.split() for line in out.splitlines() if line.startswith("quickstart ")]
    assert len(rows) == 1 and float(rows[0][1]) > 0 and float(rows[0][2]) > 0, out
    assert re.fullmatch(r"max_saving_share=-?\d+\.\d{3}", out.splitlines()[-1]), out


def test_make_trt_landscapes_writes_valid_landscape_at_2_files(tmp_path: Path) -> None:
    """bench/make_trt_landscapes.py (docs/search-at-scale.md): small catalogs too; each file reads back as a
    landscape@2 model."""
    import json

    from trt_routes.backends.landscape_model import validate_model

    out = bench("make_trt_landscapes.py", "--seeds", "1", "--knobs", "20", "--related", "--out", str(tmp_path / "l"),
                cwd=tmp_path)
    written = sorted((tmp_path / "l").glob("*.json"))
    assert [p.name for p in written] == ["trt-20-s00-other.json", "trt-20-s00.json"], out
    for path in written:
        assert len(validate_model(json.loads(path.read_text()), str(path)).catalog.knobs) == 20


def test_search_scale_prints_its_table(tmp_path: Path) -> None:
    """bench/search_scale.py on one seed of a 30-knob model: a row per case, regret a positive number."""
    out = bench("search_scale.py", "--seeds", "1", "--knobs", "30", cwd=tmp_path)
    rows = {r[1].strip(): r for r in (line.split("|") for line in out.splitlines() if line.startswith("| "))}
    assert {"cold@60", "cold@120", "fast@60 (before)"} <= set(rows), out
    assert all(float(rows[case][3]) > 0 for case in ("cold@60", "cold@120", "fast@60 (before)")), out
    assert rows["cold, max_minutes 180 (3-minute builds)"][2:4] == rows["cold@60"][2:4], out  # the same 60 builds


def test_search_foreign_prints_a_row_per_kind_and_case(tmp_path: Path) -> None:
    """bench/search_foreign.py on one seed of 30-knob models: every kind of model is a valid landscape@2 file and
    gets a row per case, its regret a positive number."""
    out = bench("search_foreign.py", "--seeds", "1", "--knobs", "30", cwd=tmp_path)
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| ")][1:]
    kinds = ("laplace", "fewbig", "manysmall", "pairfails", "helpers")
    assert {(r[0], r[1].split("@")[0]) for r in rows} == {(k, m) for k in kinds for m in ("adaptive", "fast")}, out
    assert len(rows) == 4 * len(kinds) and all(float(r[3]) > 0 for r in rows), out


def test_search_foreign_adaptive_stays_ahead_of_the_cut_scan_on_every_kind(tmp_path: Path) -> None:
    """README's claim (1.3-2.6x ahead of trtexec's scan cut at 60 and 120 builds, 30 seeds in bench/RESULTS.md), on
    3 seeds of the 200-knob models: cold adaptive's median regret at least 1.2x below the cut scan's, every kind
    and budget (the 3 seeds give 1.29x and more)."""
    out = bench("search_foreign.py", "--seeds", "3", cwd=tmp_path)
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| ")][1:]
    median = {(r[0], r[1].split(" ")[0]): float(r[3]) for r in rows}
    for kind in {r[0] for r in rows}:
        for budget in (60, 120):
            assert median[(kind, f"fast@{budget}")] >= 1.2 * median[(kind, f"adaptive@{budget}")], (kind, out)


def test_search_foreign_models_are_seeded_and_valid() -> None:
    """The same kind and seed give the same model (the table can be reproduced); each reads as landscape@2."""
    sys.path.insert(0, str(BENCH))
    from search_foreign import KINDS, model

    from trt_routes.backends.landscape_model import validate_model

    for kind in KINDS:
        assert model(kind, 3, 40) == model(kind, 3, 40) != model(kind, 4, 40)
        assert len(validate_model(model(kind, 3, 40)).catalog.knobs) == 40


@pytest.mark.gpu
def test_gpu_search_runs_each_search_on_the_cuda_ep_and_times_its_winner(tmp_path: Path) -> None:
    """bench/gpu_search.py (issue 30 on a real GPU compiler): ResNet-50 exported by torchvision, every knob of
    the CUDA EP's catalog; the budgeted searches stay within their budget and every winner is timed."""
    needs_gpu()
    pytest.importorskip("torchvision")
    from trt_routes.backends import registry

    if registry.get("onnxruntime-cuda").unavailable_reason() is not None:
        pytest.skip("no usable CUDA execution provider here")
    out = bench("gpu_search.py", "--models", "resnet50", "--budget", "8", "--rounds", "2", "--iters", "5",
                cwd=tmp_path, timeout=900)
    rows = re.findall(r"^\| resnet50 \| \d+ \(\d+\) \| ([^|]+) \| (\d+) \| ([\d.]+)x \|", out, re.M)
    assert [name.strip() for name, _, _ in rows] == ["adaptive, max_builds 8", "fast, max_builds 8",
                                                     "adaptive, no budget"], out
    assert all(int(builds) <= 8 for _, builds, _ in rows[:2]) and all(float(up) > 0 for _, _, up in rows), out


@pytest.mark.gpu
def test_gpu_routes_times_each_named_route_against_the_default(tmp_path: Path) -> None:
    """bench/gpu_routes.py: the default and each named route built on the CUDA EP and timed side by side."""
    needs_gpu()
    pytest.importorskip("torchvision")
    from trt_routes.backends import registry

    if registry.get("onnxruntime-cuda").unavailable_reason() is not None:
        pytest.skip("no usable CUDA execution provider here")
    out = bench("gpu_routes.py", "--model", "resnet50", "--route", "fp16=-precision=fp16", "--rounds", "2",
                "--iters", "5", cwd=tmp_path, timeout=900)
    rows = re.findall(r"^\| (\w+): `([^`]+)` \| ([\d.]+) \| ([\d.]+)x \|$", out, re.M)
    assert [(label, route) for label, route, _, _ in rows] == [("default", "the default"),
                                                              ("fp16", "-precision=fp16")], out
    assert rows[0][3] == "1.00" and all(float(ms) > 0 for _, _, ms, _ in rows), out


def test_search_scale_bounds_prints_a_row_per_hidden_kind(tmp_path: Path) -> None:
    """--bounds: one row per set of hidden interaction kinds, each a regret against the model's best route."""
    out = bench("search_scale.py", "--bounds", "--seeds", "1", "--knobs", "30", cwd=tmp_path)
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| every")]
    assert len(rows) == 4 and "| (adaptive, cold, 120 builds, knowing nothing) | " in out, out
    assert all(float(median) > 0 for _, median, *_ in rows), out
    # a "helps-with" value gains nothing alone, so taking it out of the best route (seed 0's holds one) slows it
    less = re.search(r'^\| \(the best route less its "helps-with" values\) \| ([\d.]+) \|', out, re.M)
    assert less and float(less.group(1)) > 1.0, out


def test_search_scale_curve_prints_regret_against_the_budget(tmp_path: Path) -> None:
    """--curve: one row per search and budget, builds within the budget, regret a positive number."""
    out = bench("search_scale.py", "--curve", "--seeds", "1", "--knobs", "30", cwd=tmp_path)
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| adaptive")]
    assert len(rows) == 9, out
    for _, budget, builds, median, *_ in rows:
        assert budget == "none" or float(builds) <= int(budget), out
        assert float(median) > 0, out


def test_search_scale_cli_runs_the_cases_through_apply(tmp_path: Path) -> None:
    """--cli: cold@60, cold@120 and warm@60 through `trt-routes apply` in a subprocess, beside this process's run;
    each regret a number >= 1 (the model's best route is the reference)."""
    out = bench("search_scale.py", "--cli", "--seeds", "1", "--knobs", "30", cwd=tmp_path)
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines()
            if line.startswith(("| cold", "| warm"))]
    assert [r[0] for r in rows] == ["cold@60", "cold@120", "warm@60, winner and failed values"], out
    assert all(float(r[1]) >= 0.99 and float(r[3]) >= 0.99 for r in rows), out
