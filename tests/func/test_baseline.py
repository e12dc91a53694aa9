"""Baselines (``baseline:``): the route a job must beat is always measured, and confirmation, the lock,
explain and the summary compare against it, while still showing the default route. Replay backend: exact
landscapes through real workers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_confirm_apply import landscape, replay_project, use

from trt_routes.audit.explain import explain
from trt_routes.errors import ManifestError
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.report.console import summary_table
from trt_routes.tune.apply import apply


def with_baseline(manifest: Path, baseline: dict[str, str], where: str = "defaults") -> None:
    data = yaml.safe_load(manifest.read_text())
    target = data["defaults"] if where == "defaults" else data["models"]["m"]
    target["baseline"] = baseline
    data["models"]["m"]["shapes"] = {"a": {"x": [1]}}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))


def test_baseline_outside_the_search_is_measured_and_kept_when_nothing_beats_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # mode fast builds one knob at a time: the two-knob baseline is not in its search, yet it is measured
    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.7, "-y=1": 0.9, "-x=1 -y=1": 0.6})
    manifest = replay_project(tmp_path / "p", land, mode="fast")
    with_baseline(manifest, {"route": "-y=1 -x=1"})
    use(monkeypatch, manifest, land)
    job = open_project(manifest).jobs[0]
    assert job.baseline == "-x=1 -y=1" and job.baseline_source == "route -y=1 -x=1"
    result = apply(open_project(manifest))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    entry = Lockfile.read(manifest.parent / "tuning.lock").jobs["m/a/cpu"]
    assert entry.route == "-x=1 -y=1"  # without the baseline, -x=1 (0.7) would have won against the default
    timing = entry.timing
    assert timing is not None and timing.baseline == "-x=1 -y=1"
    assert timing.default_ms == pytest.approx(1.0, rel=0.05) and timing.baseline_ms == pytest.approx(0.6, rel=0.05)
    assert timing.baseline_speedup == pytest.approx(1.0)
    ex = explain(open_project(manifest), "m/a/cpu")
    text = "\n".join(ex.decision)
    assert ex.selection is not None and ex.selection.summary.startswith("baseline -x=1 -y=1 kept")
    assert "Baseline (route -y=1 -x=1): -x=1 -y=1" in text and "the baseline itself is the winner" in text
    assert "no other eligible route" in text  # none could beat it: nothing to re-measure
    assert ex.to_json()["baseline"]["route"] == "-x=1 -y=1"
    headers = [c.header for c in summary_table(result).columns]
    assert "default ms" in headers and "baseline ms" in headers and "vs baseline" in headers


def test_winner_is_confirmed_against_the_baseline_and_its_ratio_is_the_headline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.7, "-y=1": 0.9, "-x=1 -y=1": 0.95})
    manifest = replay_project(tmp_path / "p", land, mode="full")
    with_baseline(manifest, {"route": "-y=1"}, where="model")
    use(monkeypatch, manifest, land)
    result = apply(open_project(manifest))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    entry = Lockfile.read(manifest.parent / "tuning.lock").jobs["m/a/cpu"]
    assert entry.route == "-x=1"
    conf = entry.selection.confirmation if entry.selection else None
    assert conf is not None and conf["baseline"] == "-y=1" and conf["vs_default"] is None
    assert conf["vs_baseline"]["baseline"] == "-y=1"
    assert conf["vs_baseline"]["winner"] == "-x=1"
    ratio = conf["baseline_ratio"]
    assert ratio == pytest.approx(0.7 / 0.9, rel=0.05)
    assert entry.timing is not None and entry.timing.baseline_speedup == pytest.approx(1 / ratio)
    assert entry.timing.speedup == pytest.approx(1 / 0.7, rel=0.05)  # still shown against the default
    text = "\n".join(explain(open_project(manifest), "m/a/cpu").decision)
    assert "the winner is 1.29x as fast (confirmed side by side)" in text
    # changing the baseline re-decides without building: same trials, another rule
    data = yaml.safe_load(manifest.read_text())
    data["models"]["m"]["baseline"] = {"route": "-x=1 -y=1"}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    again = apply(open_project(manifest))
    assert again.exit_code == 0 and again.built == 0
    timing = Lockfile.read(manifest.parent / "tuning.lock").jobs["m/a/cpu"].timing
    assert timing is not None and timing.baseline == "-x=1 -y=1"


@pytest.mark.parametrize(("baseline", "expected"), [
    ({"preset": "max-autotune"}, "backend replay has no preset 'max-autotune'"),
    ({"route": "-z=1"}, "-z"),
    ({"route": "-x=[0|1]"}, "a route gives each knob one value"),
    ({"route": "-x=1", "preset": "p"}, "give exactly one of 'route'"),
])
def test_bad_baselines_are_positioned_manifest_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      baseline: dict[str, str], expected: str) -> None:
    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.7})
    manifest = replay_project(tmp_path / "p", land)
    with_baseline(manifest, baseline)
    use(monkeypatch, manifest, land)
    with pytest.raises(ManifestError) as info:
        open_project(manifest).jobs  # noqa: B018
    assert expected in str(info.value) and "tuning.yaml:" in str(info.value)
    assert not (manifest.parent / "tuning.lock").exists()
