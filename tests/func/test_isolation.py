"""Real subprocess isolation: segfaults, aborts, hangs, exceptions and NaN outputs in workers
become failed trials with their cause, and the run goes on. Uses tests/fault_backend.py."""

from __future__ import annotations

from pathlib import Path

from _paths import TESTS
from _project import make_project

from trt_routes.execute.local import LocalExecutor
from trt_routes.project import open_project
from trt_routes.tune.apply import ApplyOptions, apply

TESTS = TESTS




def test_every_fault_becomes_a_trial_and_the_run_goes_on(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(
        tmp_path / "p", tiny_models, backend="faulty",
        group="-fault=[segv|abort|hang|raise|nan|inf|nan-timing] -intra_op_num_threads=[1]",
        measurement={"warmup": 1, "iterations": 2, "repeats": 1, "timeout_s": 8},
    )
    starts: list[LocalExecutor] = []

    def factory() -> LocalExecutor:
        ex = LocalExecutor()
        starts.append(ex)
        return ex

    result = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]), executor_factory=factory)
    assert result.exit_code == 0
    (outcome,) = result.outcomes
    sel = outcome.selection
    assert sel is not None and sel.winner in ("", "-intra_op_num_threads=1")
    reasons = {v.route: (v.status, v.reason) for v in sel.verdicts}
    assert reasons["-fault=segv"][0] == "crashed" and "SIGSEGV" in reasons["-fault=segv"][1]
    assert reasons["-fault=abort"][0] == "crashed" and "SIGABRT" in reasons["-fault=abort"][1]
    assert reasons["-fault=hang"][0] == "timeout" and "8 s time limit" in reasons["-fault=hang"][1]
    assert reasons["-fault=raise"][0] == "build-error" and "injected build failure" in reasons["-fault=raise"][1]
    assert reasons["-fault=nan"][0] == "accuracy-failed" and "non-finite" in reasons["-fault=nan"][1]
    assert reasons["-fault=inf"][0] == "accuracy-failed"
    assert reasons["-fault=nan-timing"] == ("crashed",
                                            "crashed: the backend returned unusable timings (NaN or Inf samples)")
    assert outcome.failed == 7
    # the first worker served the reference and the default route; each of the 7 failures replaced
    # its worker, and the last replacement served the healthy route after them
    assert starts[0].workers_started == 1 + 7
    assert outcome.built == 9


def test_a_failing_default_route_still_selects_an_eligible_route(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty",
                            group="-fault=segv -intra_op_num_threads=[1|2]")
    result = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]))
    (outcome,) = result.outcomes
    # every route carries the pinned fault: nothing is eligible but the default route
    assert outcome.selection is not None and outcome.selection.winner == ""


def test_a_route_wrong_only_at_the_profile_max_is_ineligible_and_says_where(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    from _project import edit_manifest

    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-fault=[wrong-at-max]")
    edit_manifest(manifest, lambda d: d["models"]["cnn"].update(shapes={"dyn": {"input": {
        "min": [1, 3, 32, 32], "opt": [2, 3, 32, 32], "max": [4, 3, 32, 32]}}}))
    result = apply(open_project(manifest))
    (outcome,) = result.outcomes
    sel = outcome.selection
    assert sel is not None and sel.winner == ""
    verdict = sel.verdict("-fault=wrong-at-max")
    assert verdict is not None and not verdict.eligible
    assert "lInf 1 >= 0.01 at the profile's max" in verdict.reason, verdict.reason
    with open_project(manifest).open_cache() as cache:
        trials = {t.route: t for t in cache.all_trials()}
    bad, default = trials["-fault=wrong-at-max"], trials[""]
    assert bad.status == "ok" and bad.meta["loss_points"]["logits"]["lInf"] == "max"
    assert default.meta["profile_points"] == ["min", "opt", "max"]
    from trt_routes.audit.explain import explain

    text = str(explain(open_project(manifest), "cnn/dyn/cpu").to_json())
    assert "at the profile's max" in text, text
