"""Plans that tell the truth, per strategy: the builds of the next step, a bound on all of them that apply
never exceeds, and what a tightened tolerance costs (README: "What the cache buys you")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _project import cli, edit_manifest, make_project

GROUP = "-graph_optimization_level=[basic|all] -intra_op_num_threads=[1|2] -disable:NchwcTransformer=[off|on]"


def _plan(manifest: Path) -> dict:
    code, out = cli("plan", "--json", "-m", str(manifest))
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def _one_shape(data: dict) -> None:
    data["models"]["cnn"]["shapes"] = {"bs1": data["models"]["cnn"]["shapes"]["bs1"]}
    data["strategies"]["s"]["confirm"] = False


def _built(manifest: Path) -> int:
    from trt_routes.project import open_project

    with open_project(manifest).open_cache() as cache:
        return len(cache.all_trials())


@pytest.mark.parametrize("mode", ["fast", "full", "mixed", "adaptive"])
def test_apply_never_builds_more_than_the_plan_said_at_most(mode: str, tmp_path: Path,
                                                            tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, group=GROUP, mode=mode)
    edit_manifest(manifest, _one_shape)
    (job,) = _plan(manifest)["jobs"]
    now, at_most = len(job["to_build"]), job["at_most"]
    assert at_most is not None and at_most >= now
    if mode in ("mixed", "adaptive"):
        assert any("at most" in r for r in job["reasons"]) or at_most == now
    else:
        assert at_most == now  # a static strategy's plan is its whole list
    code, out = cli("apply", "-m", str(manifest))
    assert code == 0, out
    assert now <= _built(manifest) <= at_most


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_a_tightened_tolerance_builds_nothing_with_a_static_strategy(mode: str, tmp_path: Path,
                                                                     tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, group=GROUP, mode=mode)
    edit_manifest(manifest, _one_shape)
    assert cli("apply", "-m", str(manifest))[0] == 0
    before = _built(manifest)
    edit_manifest(manifest, lambda d: d["tolerances"]["t"]["checks"][0].__setitem__("threshold", 1e-6))
    (job,) = _plan(manifest)["jobs"]
    assert job["action"] == "reselect" and job["to_build"] == [] and job["at_most"] is None
    assert cli("apply", "-m", str(manifest))[0] in (0, 4)
    assert _built(manifest) == before


@pytest.mark.parametrize("mode", ["mixed", "adaptive"])
def test_a_tightened_tolerance_with_an_adaptive_strategy_builds_only_what_its_plan_bounds(
        mode: str, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """The screening's verdicts depend on the gate, so a new gate may make the search try other combinations:
    the plan says so (reselect when nothing new is needed, else tune with its bound), and apply keeps to it."""
    manifest = make_project(tmp_path / "p", tiny_models, group=GROUP, mode=mode)
    edit_manifest(manifest, _one_shape)
    assert cli("apply", "-m", str(manifest))[0] == 0
    before = _built(manifest)
    edit_manifest(manifest, lambda d: d["tolerances"]["t"]["checks"][0].__setitem__("threshold", 1e-6))
    (job,) = _plan(manifest)["jobs"]
    assert job["action"] in ("reselect", "tune")
    bound = job["at_most"] or 0
    assert cli("apply", "-m", str(manifest))[0] in (0, 4)
    assert _built(manifest) - before <= bound
