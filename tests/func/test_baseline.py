"""Baselines (``baseline:``): the route a job must beat is always measured, and confirmation, the lock,
explain and the summary compare against it, while still showing the default route. Replay backend: exact
landscapes through real workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_confirm_apply import landscape, replay_project, use

from trt_routes.audit.explain import explain
from trt_routes.backends import landscape as ls
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
    assert "eligible routes in the search, so none was re-measured side by side" in text  # none beat it
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
    assert entry.timing is not None and entry.timing.baseline_speedup == pytest.approx(1 / ratio, rel=1e-5)
    assert entry.timing.speedup == pytest.approx(1 / 0.7, rel=0.05)  # still shown against the default
    text = "\n".join(explain(open_project(manifest), "m/a/cpu").decision)
    # the headline is the measured side-by-side ratio (0.7/0.9 by construction, within the noise): 1.28-1.29x
    assert f"the winner is {entry.timing.baseline_speedup:.2f}x as fast (confirmed side by side)" in text
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


# -- best of presets (``baseline: {presets: [...]}``) --------------------------------------------------------

PRESETS = {"wrong": "-x=1 -y=1", "slow": "-y=1", "twin": "-y=1"}


def preset_landscape(path: Path, medians: dict[str, float], bad: tuple[str, ...] = ()) -> Path:
    """A replay landscape with stand-in presets (``meta.presets``, read by the replay backend); routes in
    ``bad`` lose accuracy (cos 0.1, above every tolerance here)."""
    landscape(path, medians)
    data = json.loads(path.read_text())
    data["meta"] = {"presets": PRESETS}
    for r in data["routes"]:
        if r["route"] in bad:
            r["losses"] = {"cos": 0.1, "lInf": 1.0}
    path.write_text(ls.dump(data))
    return path


def test_every_listed_preset_is_measured_and_the_fastest_eligible_is_the_baseline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the fastest preset (-x=1 -y=1, 0.4) fails the tolerance: the baseline is the next one, -y=1 (0.8);
    # the search's -x=1 (0.5) beats it side by side
    land = preset_landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.5, "-y=1": 0.8, "-x=1 -y=1": 0.4},
                            bad=("-x=1 -y=1",))
    manifest = replay_project(tmp_path / "p", land, mode="full")
    with_baseline(manifest, {"presets": ["wrong", "slow", "twin"]})  # type: ignore[dict-item]
    use(monkeypatch, manifest, land)
    job = open_project(manifest).jobs[0]
    # twin expands to slow's route: kept once, under the first name
    assert job.baseline_choices == (("-x=1 -y=1", "preset wrong"), ("-y=1", "preset slow"))
    result = apply(open_project(manifest))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    project = open_project(manifest)
    entry = Lockfile.read(manifest.parent / "tuning.lock").jobs["m/a/cpu"]
    assert entry.route == "-x=1"
    timing = entry.timing
    assert timing is not None and timing.baseline == "-y=1" and timing.baseline_source == "preset slow"
    assert timing.baseline_ms == pytest.approx(0.8, rel=0.05)
    assert timing.baseline_speedup == pytest.approx(0.8 / 0.5, rel=0.05)
    conf = entry.selection.confirmation if entry.selection else None
    assert conf is not None and conf["baseline"] == "-y=1" and conf["vs_baseline"]["winner"] == "-x=1"
    assert conf["baseline_source"] == "preset slow"
    race = {r["source"]: r for r in conf["baseline_presets"]}
    assert set(race) == {"preset wrong", "preset slow"}
    assert race["preset wrong"]["eligible"] is False
    assert race["preset wrong"]["median_ms"] == pytest.approx(0.4, rel=0.05)
    assert race["preset slow"]["eligible"] is True
    ex = explain(project, "m/a/cpu")
    assert ex.selection is not None
    summary = ex.selection.summary
    assert "baseline: preset slow, 0.79" in summary and "fastest eligible of 2" in summary, summary
    assert "(others: wrong not eligible)" in summary, summary
    text = "\n".join(ex.decision)
    assert "Baseline (preset slow): -y=1 (the fastest eligible of 2 presets: wrong 0.39" in text, text
    assert "], not eligible; slow 0.79" in text, text
    assert ex.to_json()["baseline"] == {**ex.to_json()["baseline"], "route": "-y=1", "source": "preset slow"}
    trials = {t["route"] for t in ex.to_json()["trials"]}
    assert {"", "-y=1", "-x=1 -y=1"} <= trials  # the default and both presets, whatever the budget


def test_a_preset_that_wins_is_kept_and_nothing_slower_replaces_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # -x=1 -y=1 (0.6) is outside mode fast's one-knob search: as the fastest preset it is the baseline,
    # and -x=1 (0.7), which would beat the default, does not replace it; a budget of one build skips
    # neither preset
    land = preset_landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.7, "-y=1": 0.9, "-x=1 -y=1": 0.6})
    manifest = replay_project(tmp_path / "p", land, mode="fast", max_builds=1)
    with_baseline(manifest, {"presets": ["slow", "wrong"]}, where="model")  # type: ignore[dict-item]
    use(monkeypatch, manifest, land)
    result = apply(open_project(manifest))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    entry = Lockfile.read(manifest.parent / "tuning.lock").jobs["m/a/cpu"]
    assert entry.route == "-x=1 -y=1"
    assert entry.timing is not None and entry.timing.baseline_source == "preset wrong"
    assert entry.timing.baseline_speedup == pytest.approx(1.0)
    trials = {t["route"] for t in explain(open_project(manifest), "m/a/cpu").to_json()["trials"]}
    assert {"-y=1", "-x=1 -y=1"} <= trials
    again = apply(open_project(manifest))
    assert again.exit_code == 0 and again.built == 0


def test_baseline_for_takes_the_fastest_eligible_preset_ties_in_list_order() -> None:
    from trt_routes.selection.final import baseline_for
    from trt_routes.selection.rank import Selection, Verdict

    def sel(*verdicts: tuple[str, bool, float | None]) -> Selection:
        return Selection(winner=None, default_ms=None, chosen_ms=None, summary="",
                         verdicts=tuple(Verdict(r, "ok", e, "", median_ms=ms) for r, e, ms in verdicts))

    class J:  # the two fields baseline_for reads
        baseline = "-a=1"
        baseline_choices = (("-a=1", "preset a"), ("-b=1", "preset b"), ("-c=1", "preset c"))
        baseline_routes = ("-a=1", "-b=1", "-c=1")

    job: Any = J()
    assert baseline_for(job, sel(("-a=1", True, 2.0), ("-b=1", True, 1.0), ("-c=1", True, 1.0))) == "-b=1"
    assert baseline_for(job, sel(("-a=1", True, 2.0), ("-b=1", False, 0.5), ("-c=1", True, 1.5))) == "-c=1"
    assert baseline_for(job, sel(("-a=1", False, 2.0))) == "-a=1"  # none eligible (or measured): the first


def test_bad_preset_lists_are_positioned_manifest_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    land = preset_landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.7})
    manifest = replay_project(tmp_path / "p", land)
    use(monkeypatch, manifest, land)
    for baseline, expected in (({"presets": ["slow", "nope"]}, "backend replay has no preset 'nope'"),
                               ({"presets": []}, "presets"),
                               ({"presets": ["slow"], "route": "-x=1"}, "give exactly one of 'route'")):
        with_baseline(manifest, baseline)  # type: ignore[arg-type]
        with pytest.raises(ManifestError) as info:
            open_project(manifest).jobs  # noqa: B018
        message = str(info.value)
        assert expected in message and "tuning.yaml:" in message, message
        if "nope" in expected:  # the error points at the listed name itself
            line = next(i for i, text in enumerate(manifest.read_text().splitlines(), 1) if "nope" in text)
            assert f"tuning.yaml:{line}:" in message, message
        assert not (manifest.parent / "tuning.lock").exists()
