"""docs/api.md: every ```python block runs, in order and in one namespace, in a fresh folder; the trials
come out as records, CSV and (with pandas) a DataFrame; `trt-routes trials --csv` prints the same CSV."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from _project import cli

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "api.md"


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)


@pytest.fixture(scope="module")
def documented(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """Run the page's examples in a fresh folder; return the folder and the namespace they left."""
    root = tmp_path_factory.mktemp("docs")
    namespace: dict[str, object] = {"__name__": "docs_api"}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        for i, block in enumerate(_blocks()):
            exec(compile(block, f"{DOC}:block{i + 1}", "exec"), namespace)
    return root, namespace


@pytest.mark.slow
def test_every_example_of_docs_api_runs(documented: tuple[Path, dict[str, object]]) -> None:
    assert len(_blocks()) >= 5
    root, ns = documented
    assert (root / "mine" / "tuning.lock").is_file()
    from trt_routes.errors import UsageError

    assert isinstance(ns["refused"], UsageError)  # the last block's refusal


@pytest.mark.slow
def test_trials_records_csv_and_cli_agree(documented: tuple[Path, dict[str, object]]) -> None:
    from trt_routes import api

    root, _ = documented
    project = api.open_project(root / "mine" / "tuning.yaml")
    rows = api.trials(project)
    assert rows and {t.job for t in rows} == {"resnet-like/dynamic/cpu"}
    assert any(t.route == "" and t.status == "ok" for t in rows)  # the default route is always measured
    ok = [t for t in rows if t.status == "ok"]
    assert all(t.median_ms and t.median_ms > 0 and "logits:cos" in t.losses for t in ok)
    assert api.trials(project, job="nothing/*") == []
    text = api.trials_csv(project)
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [r["id"] for r in parsed] == [t.id for t in rows]
    assert "loss:logits:cos" in parsed[0] and "loss:logits:lInf" in parsed[0]
    code, out = cli("trials", "--csv", "-m", str(root / "mine" / "tuning.yaml"))
    assert code == 0 and out == text
    code, out = cli("trials", "-m", str(root / "mine" / "tuning.yaml"))
    assert code == 0 and f"{len(rows)} trial(s)" in out


@pytest.mark.slow
def test_trials_frame(documented: tuple[Path, dict[str, object]]) -> None:
    pd = pytest.importorskip("pandas")
    from trt_routes import api

    root, _ = documented
    project = api.open_project(root / "mine" / "tuning.yaml")
    frame = api.trials_frame(project)
    assert isinstance(frame, pd.DataFrame)
    assert list(frame["id"]) == [t.id for t in api.trials(project)]
    assert {"route", "median_ms", "loss:logits:cos"} <= set(frame.columns)


def test_trials_without_a_cache_is_empty(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    from _project import make_project

    from trt_routes import api

    project = api.open_project(make_project(tmp_path, tiny_models))
    assert api.trials(project) == []
    assert api.trials_csv(project).startswith("job,route,status,")
    assert not project.cache_path.exists()  # reading trials creates no cache
