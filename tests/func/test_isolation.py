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
