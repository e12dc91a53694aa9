"""Failures that name their cause: the progress line says which check a trial fails, and "no eligible
route" lists the failing checks (tests/unit/test_select.py has the rule itself)."""

from __future__ import annotations

from pathlib import Path

from _project import cli, edit_manifest, make_project


def test_the_progress_line_names_the_check_a_trial_fails(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    import numpy as np
    import onnx

    manifest = make_project(tmp_path / "p", tiny_models, group="-graph_optimization_level=[basic|all]",
                            tolerance={"checks": [{"metric": "cos", "threshold": 1e-4}]})
    graph = onnx.load(str(manifest.parent / "models" / "cnn.onnx")).graph
    rng = np.random.default_rng(0)
    np.savez(manifest.parent / "in.npz", input=rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    # reference outputs that no engine gives: every route fails the gate, the default's too
    np.savez(manifest.parent / "out.npz", **{o.name: rng.standard_normal((1, 10)).astype(np.float32)
                                             for o in graph.output})

    def edit(data: dict) -> None:
        data["models"]["cnn"]["shapes"] = {"bs1": data["models"]["cnn"]["shapes"]["bs1"]}
        data["models"]["cnn"]["reference"] = {"inputs": "in.npz", "outputs": "out.npz"}
        data["strategies"]["s"]["confirm"] = False

    edit_manifest(manifest, edit)
    code, out = cli("apply", "-m", str(manifest))
    assert code == 4, out  # nothing passes against outputs no engine gives
    assert "accuracy-failed (cos " in out and ">= 0.0001)" in out
    assert "no eligible route: " in out and "failed the accuracy gate" in out
