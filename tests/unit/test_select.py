"""Selection is a pure function: eligibility by the accuracy gate, ranking by median, reasons."""

from __future__ import annotations

import math

from trt_routes.cache.store import TrialRecord
from trt_routes.manifest.schema import Check, Tolerance
from trt_routes.selection.rank import select

TOL = Tolerance(checks=[Check(metric="cos", threshold=1e-4), Check(metric="lInf", threshold=1e-2)])


def trial(route: str, median: float | None, cos: float = 0.0, linf: float = 0.0, status: str = "ok",
          error: str = "", out: str = "y") -> TrialRecord:
    return TrialRecord(id=f"id{route}", group_key="g", job="m/s/cpu", route=route, signature="s",
                       model_digest="m", shape_key="x", settings_key="y", protocol_key="p", reference_key="r",
                       backend="b", status=status, median_ms=median, losses={out: {"cos": cos, "lInf": linf}},
                       error=error)


def test_fastest_eligible_wins_and_losers_say_why() -> None:
    trials = {t.route: t for t in [
        trial("", 2.0), trial("-a=1", 1.0, cos=5e-4), trial("-b=1", 1.5), trial("-c=1", 1.8),
        trial("-d=1", None, status="crashed", error="worker died with signal SIGSEGV"),
        trial("-e=1", 0.5, linf=math.inf, status="accuracy-failed", error="non-finite values in output(s) y"),
    ]}
    sel = select(trials, list(trials), TOL)
    assert sel.winner == "-b=1"
    assert sel.default_ms == 2.0 and sel.chosen_ms == 1.5 and sel.speedup == 2.0 / 1.5
    v = {x.route: x for x in sel.verdicts}
    assert v["-a=1"].reason == "failed accuracy gate: y: cos 0.0005 >= 0.0001"
    assert v["-b=1"].reason.startswith("winner: fastest eligible route, 1.5 ms (1.33x vs default 2 ms)")
    assert v["-c=1"].reason == "slower: 1.8 ms, +20.0% vs winner"
    assert v["-d=1"].reason == "crashed: worker died with signal SIGSEGV"
    assert v["-e=1"].reason.startswith("accuracy failed: non-finite")
    assert "1.33x faster than the default route" in sel.summary


def test_threshold_is_strict_and_nan_losses_fail() -> None:
    trials = {"": trial("", 2.0), "-a=1": trial("-a=1", 1.0, cos=1e-4), "-b=1": trial("-b=1", 1.0, cos=math.nan)}
    sel = select(trials, list(trials), TOL)
    assert sel.winner == ""
    assert "cos 0.0001 >= 0.0001" in (sel.verdict("-a=1").reason)  # type: ignore[union-attr]
    assert "cos nan >= 0.0001" in (sel.verdict("-b=1").reason)  # type: ignore[union-attr]
    assert sel.summary.startswith("default route kept")


def test_ties_prefer_default_then_fewer_knobs() -> None:
    trials = {"": trial("", 1.0), "-a=1": trial("-a=1", 1.0), "-a=1 -b=1": trial("-a=1 -b=1", 1.0)}
    assert select(trials, list(trials), TOL).winner == ""
    del trials[""]
    trials[""] = trial("", 3.0)
    sel = select(trials, list(trials), TOL)
    assert sel.winner == "-a=1"
    assert "tie-break" in sel.verdict("-a=1 -b=1").reason  # type: ignore[union-attr]


def test_no_eligible_route() -> None:
    trials = {"": trial("", None, status="build-error", error="bad"), "-a=1": trial("-a=1", 1.0, cos=1.0)}
    sel = select(trials, list(trials), TOL)
    assert sel.winner is None and sel.speedup is None and "no eligible route" in sel.summary


def test_per_output_override_and_missing_routes() -> None:
    tol = Tolerance(checks=[Check(metric="cos", threshold=1e-4)],
                    outputs={"y": [Check(metric="cos", threshold=1e-1)]})
    trials = {"": trial("", 2.0), "-a=1": trial("-a=1", 1.0, cos=1e-2)}
    sel = select(trials, ["-a=1", "-b=1"], tol)
    assert sel.winner == "-a=1" and sel.missing == ("-b=1",)


def test_l0_at_new_parameters_comes_from_the_lookup() -> None:
    tol = Tolerance(checks=[Check(metric="l0", threshold=0.1, atol=1e-3, rtol=0.0)])
    trials = {"": trial("", 2.0), "-a=1": trial("-a=1", 1.0)}
    asked: list[tuple[str, str]] = []

    def lookup(t: TrialRecord, output: str, check: Check) -> float | None:
        asked.append((t.route, check.key))
        return 0.5 if t.route == "-a=1" else 0.0

    sel = select(trials, list(trials), tol, lookup)
    assert sel.winner == ""
    assert ("-a=1", "l0@atol=0.001,rtol=0") in asked
    sel = select(trials, list(trials), tol)  # without a lookup the loss is missing: not eligible
    assert sel.winner is None


def test_no_eligible_route_names_each_failing_check_and_the_threshold_that_admits_the_default() -> None:
    trials = {t.route: t for t in [trial("", 2.0, cos=3.1e-3), trial("-a=1", 1.0, cos=5e-3, linf=0.5),
                                   trial("-b=1", None, status="crashed", error="boom")]}
    sel = select(trials, list(trials), TOL)
    assert sel.winner is None
    assert "2 route(s) failed the accuracy gate" in sel.summary
    assert "default: y: cos 0.0031 >= 0.0001" in sel.summary
    assert "-a=1: y: cos 0.005 >= 0.0001; y: lInf 0.5 >= 0.01" in sel.summary
    assert "1 other route(s) crashed or failed to build" in sel.summary
    assert "the default route would pass with y cos < 0.0032 (now 0.0001)" in sel.summary


def test_a_default_unrelated_to_the_reference_gets_no_threshold_but_the_likely_cause() -> None:
    """A float16 model whose outputs underflow to zero has cos loss 1.0: no tolerance worth having admits it."""
    trials = {t.route: t for t in [trial("", 2.0, cos=1.0), trial("-a=1", 1.0, cos=1.0)]}
    sel = select(trials, list(trials), TOL)
    assert sel.winner is None
    assert "would pass with" not in sel.summary
    assert "default route's y is unrelated to the reference" in sel.summary and "underflow" in sel.summary


def test_no_eligible_route_when_every_route_crashed_gives_the_first_error_not_a_tolerance_hint() -> None:
    trials = {t.route: t for t in [trial("", None, status="crashed", error="External data path does not exist"),
                                   trial("-a=1", None, status="timeout", error="after 60 s")]}
    sel = select(trials, list(trials), TOL)
    assert sel.winner is None
    assert "all 2 route(s) crashed, timed out or failed to build" in sel.summary
    assert "External data path does not exist" in sel.summary and "--retry-failed" in sel.summary
    assert "tolerance" not in sel.summary and "would pass" not in sel.summary
