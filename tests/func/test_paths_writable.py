"""A ``paths:`` folder that cannot be written is a manifest error at its line before apply writes anything (under
/proc it was a FileNotFoundError traceback from the project lock's mkdir, after validate and plan said ok)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _project import cli, edit_manifest, make_project


@pytest.mark.parametrize(("field", "value", "said"), [
    ("cache", "/proc/nonexistent/c.sqlite", "cannot be created under /proc"),
    ("out", "a-file/engines", "is not a folder"),
])
def test_an_unwritable_path_is_refused_at_its_line_and_nothing_is_written(
        tmp_path: Path, tiny_models: dict[str, Path], field: str, value: str, said: str) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    (manifest.parent / "a-file").write_text("not a folder\n")
    edit_manifest(manifest, lambda d: d.setdefault("paths", {}).update({field: value}))
    before = sorted(p.name for p in manifest.parent.iterdir())
    code, out = cli("apply", "-m", str(manifest))
    assert code == 2, out
    assert f"paths.{field}: " in out and said in out and "tuning.yaml:" in out and "Traceback" not in out
    assert sorted(p.name for p in manifest.parent.iterdir()) == before  # no cache, lock or engine folder
