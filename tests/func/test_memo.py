"""The memo of derived facts (trt_routes.files.memo): an installed ONNX Runtime's catalog and a model's graph, kept
across projects in the user's cache so that the coordinator plans without importing onnx or onnxruntime.
Real ONNX Runtime installs, real files, real subprocesses; each process gets its own TRT_ROUTES_MEMO."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from _project import make_project

from trt_routes.files import memo

REPO = Path(__file__).resolve().parents[2]

#: Prints what the coordinator knows of ONNX Runtime and the models, and whether it imported them.
PROBE = """
import json, sys
from pathlib import Path
from trt_routes.files import memo
from trt_routes.backends import registry
from trt_routes.files.model_files import read_model_files
backend = registry.get("onnxruntime")
catalog = backend.catalog()
graph = read_model_files(Path(sys.argv[1]))
out = {"digest": catalog.digest, "catalog": catalog.to_record(), "software": backend.software(),
       "unavailable": backend.unavailable_reason(),
       "inputs": [[t.name, t.dtype, list(t.dims or [])] for t in graph.inputs or ()],
       "outputs": [[t.name, t.dtype, list(t.dims or [])] for t in graph.outputs or ()],
       "digest_model": graph.digest,
       "imported": sorted(m for m in ("onnx", "onnxruntime") if m in sys.modules)}
if "--save" in sys.argv:
    memo.save()
print(json.dumps(out))
"""


def probe(model: Path, memo_dir: Path, *, save: bool = False, site: Path | None = None) -> dict[str, Any]:
    path = os.pathsep.join(str(p) for p in (site, REPO) if p is not None)
    env = {**os.environ, "TRT_ROUTES_MEMO": str(memo_dir), "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(model), *(["--save"] if save else [])],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def entries(memo_dir: Path) -> list[str]:
    return sorted(p.relative_to(memo_dir).as_posix() for p in memo_dir.rglob("*.json"))


def test_remembered_facts_equal_the_probed_ones_and_spare_the_imports(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    memo_dir = tmp_path / "memo"
    cold = probe(tiny_models["resnet_like"], memo_dir)
    assert cold["imported"] == ["onnx", "onnxruntime"] and not memo_dir.exists()  # no save: nothing written
    first = probe(tiny_models["resnet_like"], memo_dir, save=True)
    assert len(entries(memo_dir)) == 2  # the install's facts and the model's graph
    warm = probe(tiny_models["resnet_like"], memo_dir)
    assert warm["imported"] == []
    for got in (first, warm):
        assert {k: v for k, v in got.items() if k != "imported"} == {k: v for k, v in cold.items() if k != "imported"}
    import onnxruntime

    assert warm["software"]["backend_version"] == onnxruntime.__version__ == warm["catalog"]["version"]


def fake_install(site: Path, version: str) -> None:
    """A second install of the real ONNX Runtime under ``site``: its files linked to the real ones, but for
    the version file, which says ``version``."""
    import onnxruntime

    real = Path(onnxruntime.__file__).parent
    pkg = site / "onnxruntime"
    (pkg / "capi").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name not in ("capi", "__pycache__"):
            (pkg / entry.name).symlink_to(entry)
    for entry in (real / "capi").iterdir():
        if entry.name == "build_and_package_info.py":
            (pkg / "capi" / entry.name).write_text(
                entry.read_text().replace(f"'{onnxruntime.__version__}'", f"'{version}'"))
        elif entry.name != "__pycache__":
            (pkg / "capi" / entry.name).symlink_to(entry)


def test_another_onnxruntime_install_is_probed_anew_and_changes_the_catalog_hash(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    memo_dir = tmp_path / "memo"
    real = probe(tiny_models["resnet_like"], memo_dir, save=True)
    site = tmp_path / "site"
    fake_install(site, "9.9.9")
    other = probe(tiny_models["resnet_like"], memo_dir, save=True, site=site)
    assert "onnxruntime" in other["imported"]  # the remembered catalog is not this install's
    assert other["software"]["backend_version"] == other["catalog"]["version"] == "9.9.9"
    assert other["digest"] != real["digest"]
    assert len(entries(memo_dir)) == 3  # one more install entry; the model's graph is shared
    again = probe(tiny_models["resnet_like"], memo_dir, site=site)
    assert again["imported"] == [] and again["digest"] == other["digest"]
    # the same install, one file rewritten in place (same bytes, new mtime and inode): probed anew
    info = site / "onnxruntime" / "capi" / "build_and_package_info.py"
    text = info.read_text()
    info.unlink()
    info.write_text(text)
    assert "onnxruntime" in probe(tiny_models["resnet_like"], memo_dir, site=site)["imported"]
    assert probe(tiny_models["resnet_like"], memo_dir)["imported"] == []  # the real install's entry still holds


def test_a_changed_model_is_parsed_anew_and_a_corrupt_entry_is_a_miss(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    memo_dir = tmp_path / "memo"
    model = tmp_path / "m.onnx"
    shutil.copy(tiny_models["resnet_like"], model)
    before = probe(model, memo_dir, save=True)
    shutil.copy(tiny_models["transformer_block"], model)  # same path, other bytes
    other = probe(model, memo_dir, save=True)
    assert "onnx" in other["imported"] and other["inputs"] != before["inputs"]
    assert other["inputs"] == probe(tiny_models["transformer_block"], memo_dir)["inputs"]
    for entry in memo_dir.rglob("*.json"):
        record = json.loads(entry.read_text())
        record["value"]["tampered"] = True  # the checksum no longer matches: not used
        entry.write_text(json.dumps(record))
    fresh = probe(model, memo_dir)
    assert fresh["imported"] == ["onnx", "onnxruntime"] and fresh["inputs"] == other["inputs"]
    for entry in memo_dir.rglob("*.json"):
        entry.write_text("{torn")
    assert probe(model, memo_dir)["imported"] == ["onnx", "onnxruntime"]


def test_only_apply_writes_the_memo_and_plan_then_imports_neither(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """On a fresh checkout and an empty memo, plan and a dry run write nothing there either; apply does, and
    a later plan of another project with the same models resolves its jobs without onnx or onnxruntime."""
    memo_dir = tmp_path / "memo"
    env = {**os.environ, "TRT_ROUTES_MEMO": str(memo_dir), "PYTHONPATH": str(REPO)}
    manifest = make_project(tmp_path / "p", tiny_models, group="-graph_optimization_level=[basic|all]",
                            measurement={"warmup": 1, "iterations": 2, "repeats": 1, "timeout_s": 60})
    run = [sys.executable, "-c", "from trt_routes.cli.app import main; main()"]
    for args in (["plan"], ["apply", "--dry-run"]):
        proc = subprocess.run([*run, *args, "-m", str(manifest)], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not memo_dir.exists()
    proc = subprocess.run([*run, "apply", "-m", str(manifest)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds = [e.split("/")[0] for e in entries(memo_dir)]  # ONNX Runtime's facts and the one model's graph
    assert len(kinds) == 2, kinds
    second = make_project(tmp_path / "q", tiny_models, group="-graph_optimization_level=[basic|all]")
    code = ("import sys\nfrom trt_routes.cli.app import app\n"
            "try:\n    app(['plan', '--json', '-m', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            "print('IMPORTED', sorted(m for m in ('onnx', 'onnxruntime') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(second)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "IMPORTED []", proc.stdout[-2000:]
    plan = json.loads("\n".join(proc.stdout.splitlines()[:-1]))
    assert {j["action"] for j in plan["jobs"]} == {"tune"}
    assert memo.MEMO_VAR == "TRT_ROUTES_MEMO"


def test_the_memo_lives_in_the_users_cache_folder_and_off_turns_it_off(
        tmp_path: Path, tiny_models: dict[str, Path], monkeypatch: Any) -> None:
    """README: ``$XDG_CACHE_HOME/trt-routes/memo``, else ``~/.cache/trt-routes/memo``; ``TRT_ROUTES_MEMO=DIR``
    moves it, ``=off`` turns it off (nothing written, everything probed again)."""
    monkeypatch.delenv("TRT_ROUTES_MEMO", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert memo.folder() == tmp_path / "xdg" / "trt-routes" / "memo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert memo.folder() == tmp_path / "home" / ".cache" / "trt-routes" / "memo"
    monkeypatch.setenv("TRT_ROUTES_MEMO", str(tmp_path / "moved"))
    assert memo.folder() == tmp_path / "moved"
    monkeypatch.setenv("TRT_ROUTES_MEMO", "off")
    assert memo.folder() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # saved, then again: with the memo off the second process probes as the first did
        got = probe(tiny_models["resnet_like"], Path("off"), save=True)
        assert got["imported"] == ["onnx", "onnxruntime"]
    assert not list(tmp_path.rglob("*.json"))  # nothing written anywhere (nor a folder named "off")
