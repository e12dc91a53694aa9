"""A model file that changes while apply runs (a git pull, a re-export in another terminal): nothing built from
bytes the plan did not hash is cached under the old digest; the job fails saying so, and once the file stays put
the next apply tunes it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from _project import make_project, routes_and_statuses

from trt_routes.project import open_project
from trt_routes.tune.apply import ApplyOptions, apply


def test_a_model_replaced_during_apply_caches_nothing_and_fails_the_job(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("TRT_ROUTES_FAULT_GATES", str(gates))
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-sleep_ms=[4|2]")
    model = manifest.parent / "models" / "cnn.onnx"
    original = model.read_bytes()
    (gates / "cnn.waitfor").write_text("go")  # every build of cnn waits for gates/go
    results = []
    worker = threading.Thread(target=lambda: results.append(
        apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]))))
    worker.start()
    deadline = time.monotonic() + 60
    while not (gates / "cnn.started").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (gates / "cnn.started").exists()
    model.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # new bytes, written over the model
    (gates / "go").touch()
    worker.join(120)
    (result,) = results
    assert result.exit_code == 4
    (outcome,) = result.outcomes
    assert "changed while apply ran" in (outcome.error or "")
    assert routes_and_statuses(manifest).get("cnn/bs1/cpu", {}) == {}  # nothing cached under the old digest
    model.write_bytes(original)  # restored: the next apply tunes the job
    (gates / "cnn.waitfor").unlink()
    again = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]))
    assert again.exit_code == 0, [o.error for o in again.outcomes]
