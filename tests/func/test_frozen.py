"""`apply --frozen` and `lock check`: rebuild exactly the locked routes from tuning.lock alone, with real
ONNX Runtime builds in real workers, and refuse a lockfile out of line with the manifest or the machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
import yaml
from _project import cli, edit_manifest

from trt_routes.canonical import file_sha256
from trt_routes.gitops.check import LockMismatch, in_search_space
from trt_routes.gitops.frozen import FrozenOptions, SignatureDrift, apply_frozen
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.signature import Environment, detect


def fresh_machine(tuned: Path, dest: Path) -> Path:
    """What a fresh checkout has: the manifest, the models and tuning.lock; no cache, no engines."""
    dest.mkdir(parents=True)
    shutil.copytree(tuned.parent / "models", dest / "models")
    shutil.copy(tuned, dest / "tuning.yaml")
    shutil.copy(tuned.parent / "tuning.lock", dest / "tuning.lock")
    return dest / "tuning.yaml"


def other_cpu() -> Environment:
    env = detect()
    return Environment(cpu={**env.cpu, "cpu_count": str(int(env.cpu["cpu_count"]) + 7)}, gpus=env.gpus)


def test_frozen_from_the_lockfile_alone_reproduces_the_engines(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    lock_text = (manifest.parent / "tuning.lock").read_text()
    lock = Lockfile.read(manifest.parent / "tuning.lock")
    result = apply_frozen(open_project(manifest))
    assert result.exit_code == 0, [j.error for j in result.jobs]
    assert result.built == 2  # one build per job, no search
    for j in result.jobs:
        entry = lock.jobs[j.job.name]
        assert j.route == entry["route"] and j.built == 1 and not j.reused
        engine = manifest.parent / entry["engine"]["path"]
        # this model's optimized graph is byte-deterministic: the rebuilt engine is the locked one, bit for bit
        # (tests/unit/test_onnx_identity.py has one that is not)
        assert file_sha256(engine) == entry["engine"]["sha256"] == j.engine_sha256
        assert j.digest == "identical"
        assert any(c.startswith("accuracy within tolerance 't'") for c in j.checks)
        assert any(c.startswith("timing ") and "vs locked" in c for c in j.checks)
    assert (manifest.parent / "tuning.lock").read_text() == lock_text  # never rewritten
    with open_project(manifest).open_cache() as cache:
        trials = cache.all_trials()
    assert sorted((t.job, t.route) for t in trials) == sorted((n, e["route"]) for n, e in lock.jobs.items())
    record = json.loads((manifest.parent / "engines" / "frozen.json").read_text())
    assert set(record["jobs"]) == set(lock.jobs)
    assert record["lockfile_sha256"] == file_sha256(manifest.parent / "tuning.lock")
    assert all(v["engine"]["sha256"] == lock.jobs[k]["engine"]["sha256"] for k, v in record["jobs"].items())

    again = apply_frozen(open_project(manifest))  # this machine's own trials now serve a re-run
    assert again.exit_code == 0 and again.built == 0 and all(j.reused for j in again.jobs)
    # the ordinary workflow agrees: status is clean (plan still wants the non-locked routes measured)
    code, out = cli("status", "-m", str(manifest))
    assert code == 0 and "digest-mismatch" not in out and "missing-engine" not in out


def test_frozen_cli_builds_only_the_selected_jobs(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    code, out = cli("apply", "--frozen", "--only", "cnn/bs4/*", "-m", str(manifest))
    assert code == 0, out
    assert "Frozen rebuild" in out and "cnn/bs4/cpu" in out and "tuning.lock unchanged" in out
    assert "[1] cnn/bs4/cpu" in out and "/0]" not in out  # no plan counts these builds: not "[1/0]"
    assert (manifest.parent / "engines" / "cnn" / "bs4" / "cpu.onnx").is_file()
    assert not (manifest.parent / "engines" / "cnn" / "bs1").exists()
    code, out = cli("apply", "--frozen", "--dry-run", "--json", "-m", str(manifest))
    data = json.loads(out)
    assert code == 0 and data["dry_run"] and data["built"] == 0 and len(data["jobs"]) == 2


def _mismatch(manifest: Path) -> str:
    code, out = cli("apply", "--frozen", "-m", str(manifest))
    assert code == 2, out
    assert not (manifest.parent / "engines").exists()  # refused before anything was built
    return out


def test_frozen_names_jobs_added_removed_and_changed(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")

    def edit(d: dict) -> None:  # type: ignore[type-arg]
        d["models"]["cnn"]["shapes"] = {"bs1": {"input": [1, 3, 32, 32]}, "bs2": {"input": [2, 3, 32, 32]}}
        d["tolerances"]["t"]["checks"][0]["threshold"] = 1e-6

    edit_manifest(manifest, edit)
    out = _mismatch(manifest)
    assert "tuning.lock does not match tuning.yaml (3 job(s))" in out
    assert "cnn/bs2/cpu: added: in the manifest but not in the lockfile" in out
    assert "cnn/bs4/cpu: removed: in the lockfile but no longer in the manifest" in out
    assert "cnn/bs1/cpu: changed: tolerance 't' changed: cos<0.0001, lInf<0.01 -> cos<1e-06, lInf<0.01" in out
    assert "Traceback" not in out and "hint: run `trt-routes apply` (without --frozen)" in out


def test_frozen_explains_each_changed_key(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    model_path = manifest.parent / "models" / "cnn.onnx"
    model = onnx.load(str(model_path))
    model.producer_name = "retrained"
    onnx.save(model, str(model_path))

    def edit(d: dict) -> None:  # type: ignore[type-arg]
        d["models"]["cnn"]["shapes"]["bs4"] = {"input": [2, 3, 32, 32]}
        d["measurement"]["repeats"] = 3
        d["strategies"]["s"]["mode"] = "full"

    edit_manifest(manifest, edit)
    out = _mismatch(manifest)
    assert "cnn/bs1/cpu: changed: model digest changed (models/cnn.onnx:" in out
    assert "shape profile changed: input.max [4, 3, 32, 32] -> [2, 3, 32, 32]" in out
    assert "measurement protocol changed (warmup, iterations, repeats or seed)" in out
    assert "strategy changed: 's' (fast) -> 's' (full)" in out


def test_frozen_refuses_a_changed_switch_group(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    edit_manifest(manifest, lambda d: d["switch_groups"].update(g="-graph_optimization_level=[basic|all]"))
    out = _mismatch(manifest)
    assert "candidate routes changed (switch group 'g' or strategy 's')" in out
    code, out = cli("lock", "check", "-m", str(manifest))
    assert code == 1 and "candidate routes changed" in out


def test_lock_check_passes_on_a_matching_lock(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    code, out = cli("lock", "check", "-m", str(manifest))
    assert code == 0 and "tuning.lock matches the manifest" in out
    code, out = cli("lock", "check", "--json", "-m", str(manifest))
    assert code == 0 and json.loads(out) == {"format": "trt-routes/lock-check@1", "matches": True, "notes": [],
                                             "mismatches": []}
    (manifest.parent / "tuning.lock").unlink()
    code, out = cli("lock", "check", "--json", "-m", str(manifest))
    assert code == 1 and {m["kind"] for m in json.loads(out)["mismatches"]} == {"added"}


def test_signature_drift_stops_unless_allowed(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    project = open_project(manifest, env=other_cpu())
    with pytest.raises(SignatureDrift) as info:
        apply_frozen(project)
    cores = detect().cpu["cpu_count"]
    assert f"cnn/bs1/cpu: cpu_count {cores} -> {int(cores) + 7}" in str(info.value)
    assert "--allow-signature-drift" in str(info.value)
    assert not (manifest.parent / "engines").exists()

    result = apply_frozen(open_project(manifest, env=other_cpu()), FrozenOptions(allow_signature_drift=True))
    assert result.exit_code == 0 and result.built == 2
    for j in result.jobs:
        assert j.drift == [f"cpu_count {cores} -> {int(cores) + 7}"]
        assert "timing" in j.checks[-1] and "not compared: signature differs" in j.checks[-1]
        assert j.digest == "identical"  # same ONNX Runtime: same bytes, whatever the core count


def test_signature_drift_from_the_cli(tuned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    monkeypatch.setattr("trt_routes.project.detect", other_cpu)
    code, out = cli("apply", "--frozen", "-m", str(manifest))
    assert code == 2 and "this machine differs from the one tuning.lock was made on" in out
    assert "cpu_count" in out


def test_backend_upgrade_is_drift_not_a_manifest_change(tuned: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The automatic reference embeds the backend version; a new version must read as signature drift."""
    from trt_routes.backends.onnxruntime import OnnxRuntimeBackend

    manifest = fresh_machine(tuned, tmp_path / "fresh")
    software = OnnxRuntimeBackend.software
    reference_version = OnnxRuntimeBackend.reference_version
    old = software(OnnxRuntimeBackend())["backend_version"]
    monkeypatch.setattr(OnnxRuntimeBackend, "software",
                        lambda self: {**software(self), "backend_version": "99.0.0"})
    monkeypatch.setattr(OnnxRuntimeBackend, "reference_version",
                        lambda self: reference_version(self).replace(old, "99.0.0"))
    with pytest.raises(SignatureDrift) as info:
        apply_frozen(open_project(manifest))
    assert f"backend_version {old} -> 99.0.0" in str(info.value)
    assert not isinstance(info.value, LockMismatch)


def test_a_new_measurement_protocol_is_drift_not_a_manifest_change(tuned: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A trt-routes upgrade that changes how trials are measured invalidates the timings (drift); the
    manifest's own measurement settings changing is a mismatch (see test_frozen_explains_each_changed_key)."""
    import trt_routes

    manifest = fresh_machine(tuned, tmp_path / "fresh")
    old = trt_routes.PROTOCOL_VERSION
    monkeypatch.setattr("trt_routes.jobs.PROTOCOL_VERSION", old + "-next")
    monkeypatch.setattr("trt_routes.signature.PROTOCOL_VERSION", old + "-next")
    with pytest.raises(SignatureDrift) as info:
        apply_frozen(open_project(manifest))
    assert f"cnn/bs1/cpu: protocol {old} -> {old}-next" in str(info.value)
    code, out = cli("lock", "check", "-m", str(manifest))
    assert code == 0, out


def test_a_hand_edited_engine_identity_fails_verification(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    lock_path = manifest.parent / "tuning.lock"
    data = yaml.safe_load(lock_path.read_text())
    data["jobs"]["cnn/bs1/cpu"]["engine"]["sha256"] = "0" * 64
    data["jobs"]["cnn/bs1/cpu"]["engine"]["identity"] = "onnx-graph/1:" + "0" * 64
    lock_path.write_text(yaml.safe_dump(data))
    result = apply_frozen(open_project(manifest), FrozenOptions(keep_going=True))
    assert result.exit_code == 4
    bad = next(j for j in result.jobs if j.job.name == "cnn/bs1/cpu")
    assert bad.error and "the rebuilt engine's graph differs from the locked one" in bad.error
    assert "against 000000000000" in bad.error
    assert not (manifest.parent / "engines" / "cnn" / "bs1").exists()  # never materialized
    good = next(j for j in result.jobs if j.job.name == "cnn/bs4/cpu")
    assert good.ok and (manifest.parent / "engines" / "cnn" / "bs4" / "cpu.onnx").is_file()


def test_a_digest_edited_by_hand_with_the_structure_intact_is_recorded_anew(tuned: Path, tmp_path: Path) -> None:
    """Bytes are not what ONNX Runtime reproduces (see test_onnx_identity): the structure is; frozen says so."""
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    lock_path = manifest.parent / "tuning.lock"
    data = yaml.safe_load(lock_path.read_text())
    data["jobs"]["cnn/bs1/cpu"]["engine"]["sha256"] = "0" * 64
    lock_path.write_text(yaml.safe_dump(data))
    result = apply_frozen(open_project(manifest), FrozenOptions(keep_going=True))
    assert result.exit_code == 0, [j.error for j in result.jobs]
    job = next(j for j in result.jobs if j.job.name == "cnn/bs1/cpu")
    assert job.digest == "differs in bytes, identical in structure"
    assert job.engine_sha256 != "0" * 64
    assert any("engine structure identical to the lock" in c for c in job.checks)


def test_timing_far_off_the_lock_fails_the_sanity_check(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    lock_path = manifest.parent / "tuning.lock"
    data = yaml.safe_load(lock_path.read_text())
    for entry in data["jobs"].values():  # as if the lock had been tuned on a far faster machine
        entry["timing"]["chosen_ms"] = 1e-6
        entry["timing"]["chosen_ci_ms"] = [1e-6, 2e-6]
    lock_path.write_text(yaml.safe_dump(data))
    code, out = cli("apply", "--frozen", "-m", str(manifest))
    assert code == 4, out
    assert "timing sanity check failed" in out and "3x the locked" in out


def test_frozen_needs_a_lockfile_and_matching_jobs(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    code, out = cli("apply", "--frozen", "--only", "nothing/*", "-m", str(manifest))
    assert code == 2 and "--only 'nothing/*' matches no job" in out
    (manifest.parent / "tuning.lock").unlink()
    code, out = cli("apply", "--frozen", "-m", str(manifest))
    assert code == 2 and "no lockfile at" in out and "--frozen builds only what tuning.lock records" in out
    code, out = cli("apply", "--frozen", "--plan", "x.json", "-m", str(manifest))
    assert code == 2 and "exclude each other" in out
    for extra in (["--workers", "2"], ["--executor", "ray"], ["--address", "auto"]):
        code, out = cli("apply", "--frozen", *extra, "-m", str(manifest))
        assert code == 2 and "do not apply to it" in out, out


def test_search_space_membership_for_adaptive_strategies(tuned: Path) -> None:
    job = open_project(tuned).jobs[0]
    assert job.expression is not None and job.catalog is not None
    assert in_search_space("", job.expression, job.catalog)
    assert in_search_space("-intra_op_num_threads=2", job.expression, job.catalog)
    assert in_search_space("-graph_optimization_level=basic -intra_op_num_threads=1", job.expression, job.catalog)
    assert not in_search_space("-intra_op_num_threads=3", job.expression, job.catalog)
    assert not in_search_space("-allow_spinning=0", job.expression, job.catalog)  # a knob the group does not vary
    # a one-knob route holds the other varied knobs at their defaults, listed or not (intra_op's 0 is not)
    assert in_search_space("-disable:NchwcTransformer=on", job.expression, job.catalog)
    assert in_search_space("-graph_optimization_level=basic", job.expression, job.catalog)


def test_lock_check_reports_a_changed_selection_rule(tuned: Path, tmp_path: Path) -> None:
    manifest = fresh_machine(tuned, tmp_path / "fresh")
    edit_manifest(manifest, lambda d: d["strategies"]["s"].update(confirm={"margin": 0.05, "confidence": 0.99}))
    code, out = cli("lock", "check", "-m", str(manifest))
    assert code == 1, out
    for name in ("cnn/bs1/cpu", "cnn/bs4/cpu"):
        assert f"{name}: changed: selection rule changed (strategy 's' confirm): confidence 0.95 -> 0.99, " \
               "margin 0.02 -> 0.05" in " ".join(out.split())
    code, out = cli("lock", "check", "--json", "-m", str(manifest))
    assert code == 1 and all("margin 0.02 -> 0.05" in " ".join(m["details"]) for m in json.loads(out)["mismatches"])
    edit_manifest(manifest, lambda d: d["strategies"]["s"].update(confirm=False))
    assert "side-by-side confirmation turned off (confirm: false)" in _mismatch(manifest)
    edit_manifest(manifest, lambda d: d["strategies"]["s"].pop("confirm"))  # back to the locked rule
    code, out = cli("lock", "check", "-m", str(manifest))
    assert code == 0, out
