"""Layer evidence on a model exported by torch.onnx.export: `trt-routes profile` and `explain --layers`. A route
that turns a graph transformer off changes which layers run; a thread-count route changes only their times.
(Structure is asserted, never which route is faster.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _project import FAST, cli, write_manifest
from _real_models import export

from trt_routes.audit.layers import profile_job
from trt_routes.evidence.layers import MAX_PROFILE_BYTES, Layer, LayerProfile, compare
from trt_routes.project import open_project
from trt_routes.tune.apply import ApplyOptions, apply


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    model = export("resnet", root / "models", dynamo=False)
    manifest = write_manifest(root, {
        "schema_version": 1, "measurement": FAST,
        "switch_groups": {"g": "-disable:NchwcTransformer=[off|on] -intra_op_num_threads=[0|1]"},
        "strategies": {"s": {"mode": "full"}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"backend": "onnxruntime", "switch_group": "g", "strategy": "s", "tolerance": "t"},
        "models": {"resnet": {"path": f"models/{model.name}", "shapes": {"bs2": {"input": [2, 3, 32, 32]}}}}})
    result = apply(open_project(manifest), ApplyOptions())
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    return manifest


def test_a_transformer_route_changes_the_layers_and_a_thread_route_only_their_times(exported: Path) -> None:
    project = open_project(exported)
    _, default = profile_job(project, "resnet/bs2/cpu", "")
    _, no_nchwc = profile_job(project, "resnet/bs2/cpu", "-disable:NchwcTransformer=on")
    _, one_thread = profile_job(project, "resnet/bs2/cpu", "-intra_op_num_threads=1")
    assert default.layers and all(layer.ms >= 0 and layer.where == "CPUExecutionProvider" for layer in default.layers)
    nchwc = [layer for layer in default.layers if layer.op.startswith("Reorder")]
    assert nchwc  # the NCHWc transform's boundary ops, in the default (level all) engine
    off = compare(default, no_nchwc)
    assert not off.same_layers and {x.name for x in nchwc} <= {r.name for r in off.only_default}
    assert not any(r.op.startswith("Reorder") for r in off.only_winner)
    threads = compare(default, one_thread)
    assert threads.same_layers and not threads.only_default and not threads.only_winner
    assert {r.name for r in threads.rows} == {layer.name for layer in default.layers}
    # stored beside the cache: the second call reads it back unchanged
    assert profile_job(open_project(exported), "resnet/bs2/cpu", "")[1] == default


def test_explain_layers_text_and_json(exported: Path) -> None:
    code, out = cli("explain", "resnet/bs2/cpu", "--layers", "-m", str(exported))
    assert code == 0, out
    assert "default against" in out and "largest differences" in out
    code, text = cli("explain", "resnet/bs2/cpu", "--layers", "--json", "-m", str(exported))
    assert code == 0, text
    doc = json.loads(text)
    assert doc["format"] == "trt-routes/layers@1" and doc["rows"]
    assert abs(sum(r["diff_ms"] for r in doc["rows"]) - doc["gain_ms"]) < 1e-6
    assert doc["default"]["layers_ms"] > 0 and doc["winner_route"] != ""
    code, text = cli("profile", "resnet/bs2/cpu", "--route", "", "--json", "-m", str(exported))
    assert code == 0, text
    prof = json.loads(text)
    assert prof["format"] == "trt-routes/profile@1" and prof["route"] == "" and prof["layers"]


def test_a_route_never_measured_is_a_clear_error(exported: Path) -> None:
    code, out = cli("profile", "resnet/bs2/cpu", "--route", "-execution_mode=parallel", "-m", str(exported))
    assert code == 2 and "no measured trial of route -execution_mode=parallel" in out and "routes measured" in out


def test_an_engine_gone_from_the_store_is_rebuilt_for_its_profile(exported: Path) -> None:
    """A cache carried without its engines (a pull, a copied trials.sqlite): the profile builds the route again.
    A rebuild with the trial's bytes goes back into the store and the profile is the trial's; ONNX Runtime names
    the nodes its layout pass inserts from a counter (``ReorderOutput`` in one process, ``ReorderOutput_token_11``
    in another: ``trt_routes/backends/onnx_identity.py``), so the rebuild's bytes may differ, and then the
    profile's note says it is a rebuild. Either way it has the same layers (independent ones may run in
    another order)."""
    project = open_project(exported)
    job, before = profile_job(project, "resnet/bs2/cpu", "-intra_op_num_threads=1")
    with project.read_cache() as cache:
        engine = cache.group(job.group_key)["-intra_op_num_threads=1"].engine_sha256
    blobs = sorted(p.name for p in project.store.root.glob("??/*") if p.is_file())
    assert engine and blobs
    for name in blobs:
        project.store.path(name).unlink()
    for stored in (project.cache_path.parent / "profiles").glob("*.json"):
        stored.unlink()
    _, after = profile_job(open_project(exported), "resnet/bs2/cpu", "-intra_op_num_threads=1")
    def names(profile: LayerProfile) -> list[str]:
        return sorted(re.sub(r"_token_\d+", "", x.name) for x in profile.layers)

    assert names(after) == names(before)
    if project.store.has(engine):  # the same bytes as the trial's engine, back in the store
        assert "rebuilt" not in after.note
    else:
        assert "engine rebuilt for this profile" in after.note and "the rebuild's bytes differ" in after.note
    assert [p.name for p in project.store.root.glob("??/*") if p.is_file()] != []


def test_a_profile_over_the_cap_drops_its_smallest_layers_and_says_so() -> None:
    layers = tuple(Layer(f"node_{i:06d}_" + "x" * 200, "Conv", "CPUExecutionProvider", float(i)) for i in range(8000))
    text = LayerProfile("onnxruntime", "", 10, 1.0, layers).dumps()
    assert len(text.encode()) <= MAX_PROFILE_BYTES
    back = LayerProfile.from_json(json.loads(text))
    assert back.dropped > 0 and len(back.layers) + back.dropped == len(layers)
    assert min(layer.ms for layer in back.layers) > max(range(back.dropped))  # the fastest went first


def test_apply_profiles_the_finalists_and_explain_reads_them(exported: Path, tmp_path: Path) -> None:
    """apply takes one profile of the default and of the winner (or the closest challenger when the default was
    kept), in a worker; explain --layers then reads those, taking none; --no-profile takes none."""
    import shutil

    from _project import copy_project

    fresh = copy_project(exported, tmp_path / "fresh")
    for name in ("caches", "engines"):
        shutil.rmtree(fresh.parent / name, ignore_errors=True)
    (fresh.parent / "tuning.lock").unlink()
    folder = open_project(fresh).profiles_dir
    code, out = cli("apply", "--no-profile", "-m", str(fresh))
    assert code == 0, out
    assert not list(folder.glob("*.json"))
    (fresh.parent / "tuning.lock").unlink()  # decided again (every trial cached): the finalists are profiled
    code, out = cli("apply", "-m", str(fresh))
    assert code == 0, out
    profiles = sorted(p.name for p in folder.glob("*.json"))
    assert len(profiles) == 2, profiles
    code, out = cli("explain", "resnet/bs2/cpu", "--layers", "-m", str(fresh))
    assert code == 0, out
    assert sorted(p.name for p in folder.glob("*.json")) == profiles
