"""A cache file the manifest chose (``paths.cache``) that is not a trial cache: the error names the file and the
tuning.yaml line that chose it, exits 2, and leaves the file as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

from _project import cli

REPO = Path(__file__).resolve().parents[2]


def test_a_damaged_cache_names_the_manifest_line_that_chose_it(tmp_path: Path) -> None:
    shutil.copy(REPO / "recipes" / "quickstart" / "resnet_like.onnx", tmp_path)
    (tmp_path / "tuning.yaml").write_text(
        "schema_version: 1\n"
        "paths: {cache: store/junk.sqlite}\n"
        "defaults: {backend: onnxruntime, switch_group: g, strategy: s, tolerance: t}\n"
        "switch_groups: {g: \"-intra_op_num_threads=[1|2]\"}\n"
        "strategies: {s: {mode: fast}}\n"
        "tolerances: {t: {checks: [{metric: cos, threshold: 1.0e-4}]}}\n"
        "models: {m: {path: resnet_like.onnx, shapes: {bs1: {input: [1, 3, 32, 32]}}}}\n")
    junk = tmp_path / "store" / "junk.sqlite"
    junk.parent.mkdir()
    junk.write_bytes(b"not sqlite at all " * 300)
    before = junk.read_bytes()
    for command in ("plan", "apply"):
        code, out = cli(command, "-m", str(tmp_path / "tuning.yaml"))
        assert code == 2 and "junk.sqlite" in out and "damaged" in out, out
        assert "(chosen by tuning.yaml:2:16, paths.cache)" in out and "Traceback" not in out
    assert junk.read_bytes() == before
