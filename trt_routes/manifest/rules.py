"""How tuning.yaml says a winner is chosen: accuracy checks and tolerances, side-by-side confirmation,
objectives and strategies (pydantic models, extra='forbid'; ``manifest.schema`` composes them into the
manifest)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from trt_routes.canonical import l0_key
from trt_routes.manifest.schema_base import Int, Metric, Number, Strict


class Check(Strict):
    """One accuracy gate: ``metric`` loss must stay strictly below ``threshold``."""

    metric: Metric
    # a loss is never strictly below 0: a zero threshold would fail every route, the default's too
    threshold: Number = Field(gt=0)
    atol: Number | None = Field(default=None, ge=0, description="l0 only (default 1e-5)")
    rtol: Number | None = Field(default=None, ge=0, description="l0 only (default 1e-5)")

    @model_validator(mode="after")
    def _l0_only(self) -> Check:
        if self.metric != "l0" and (self.atol is not None or self.rtol is not None):
            raise ValueError(f"atol and rtol apply to metric l0 only, not {self.metric}")
        return self

    @property
    def key(self) -> str:
        """The loss key this check reads (l0 is parameterized by atol/rtol)."""
        if self.metric != "l0":
            return self.metric
        return l0_key(*self.l0_params)

    @property
    def l0_params(self) -> tuple[float, float]:
        """(atol, rtol) with trtexec's defaults of 1e-5."""
        return (self.atol if self.atol is not None else 1e-5, self.rtol if self.rtol is not None else 1e-5)




class Tolerance(Strict):
    """Named accuracy gate: checks for every output, optionally replaced per output."""

    checks: list[Check] = Field(min_length=1, max_length=64)
    outputs: dict[str, list[Check]] = Field(default_factory=dict)

    def checks_for(self, output: str) -> list[Check]:
        return self.outputs.get(output, self.checks)


class Confirm(Strict):
    """Side-by-side confirmation of a non-default winner (the selection rule; not part of any trial key).

    The best ``candidates`` eligible routes are re-measured interleaved with the default route (B A C,
    D A B, C A D ...: one default turn between two challenger turns) in one worker, up to ``rounds`` times
    ``iterations`` timed runs each. A route wins
    only when its time ratio to the default (the median of the per-round ratios) is below 1 - ``margin``
    and the upper end of its ``confidence`` interval is below 1: it beats the default by more than the
    margin and by more than the measured noise. A locked winner is replaced the same way only."""

    candidates: Int = Field(default=3, ge=1, le=16, description="challengers re-measured against the default")
    margin: Number = Field(default=0.02, ge=0, lt=1, description="required gain over the default (0.02: 2%)")
    rounds: Int = Field(default=15, ge=3, le=1000, description="interleaved rounds")
    iterations: Int = Field(default=10, ge=1, le=100_000, description="timed runs per route per round (at "
                            "least)")
    slot_ms: Number = Field(default=0.0, ge=0, le=60_000, description="each route's turn in a round lasts "
                            "at least this long (0: sized to the noise alone, see max_slot_ms)")
    max_slot_ms: Number = Field(default=20.0, ge=0, le=60_000, description="turns are sized to the noise seen: "
                                "enough runs that a turn's median is within margin/sqrt 2 of the truth (from "
                                "the baseline's spread), at most this long (0: not sized, iterations and slot_ms "
                                "alone)")
    confidence: Number = Field(default=0.95, gt=0.5, lt=1, description="of the ratio's bootstrap interval, "
                              "split over the challengers (Bonferroni)")


#: The facts a trial records beside its samples (``trt_routes.evidence.facts``): what objectives rank by and limit.
FACTS = ("latency.p50", "latency.p90", "latency.p99", "throughput", "device_memory_mb", "engine_mb", "build_s",
         "energy")


def _fact_name(v: object, where: str) -> str:
    import difflib

    if not isinstance(v, str):
        raise ValueError(f"expected a fact name in {where}, got {type(v).__name__}")
    if v not in FACTS:
        close = difflib.get_close_matches(v, FACTS, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"unknown fact '{v}'{hint} (facts: {', '.join(FACTS)})")
    return v


class Objective(Strict):
    """A named objective: ``rank`` is the fact that orders the eligible routes (lower is better, but
    ``throughput``: higher), ``limits`` are upper bounds on facts (a route over one is not eligible; a route
    that lacks the fact is not eligible either). Like a tolerance, not part of any trial's key."""

    rank: str = Field(default="latency.p50", description="one fact: " + ", ".join(FACTS))
    limits: dict[str, Number] = Field(default_factory=dict, description="fact -> upper bound")

    @field_validator("rank", mode="before")
    @classmethod
    def _rank_fact(cls, v: object) -> object:
        return _fact_name(v, "rank")

    @field_validator("limits", mode="before")
    @classmethod
    def _limit_facts(cls, v: object) -> object:
        if isinstance(v, Mapping):
            for key in v:
                _fact_name(key, "limits")
        return v

    @property
    def facts(self) -> tuple[str, ...]:
        """Every fact the objective reads: the rank first, then the limits."""
        return tuple(dict.fromkeys([self.rank, *sorted(self.limits)]))


def switchable_section(v: object) -> object:
    """A section that can also be written as a switch: ``false`` turns it off (None), ``true`` means its
    defaults."""
    if v is False:
        return None
    return {} if v is True else v


class Strategy(Strict):
    """A named search strategy. ``fast``/``full``/``mixed`` follow trtexec's semantics (which routes are
    built); ``adaptive`` (the default) screens knobs one at a time, keeps the ones whose gain exceeds the
    noise, then searches combinations of those, warm-started from related jobs' winners."""

    #: Fields that do not shape the search's path and so stay out of its state's key (``search.job.strategy_key``):
    #: the budget (a raised budget continues the same search) and the selection rule. Every other field, a new
    #: one included, is part of the key, so a changed parameter never reuses another search's state.
    NOT_SEARCH_STATE: ClassVar[frozenset[str]] = frozenset({"max_builds", "max_minutes", "confirm"})

    mode: Literal["adaptive", "fast", "full", "mixed"] = "adaptive"
    max_builds: Int | None = Field(default=None, ge=1, le=1_000_000, description="new builds the search may spend in "
                                   "total (cached trials are free); raise it to let a stopped search go on")
    max_minutes: Number | None = Field(default=None, gt=0, le=7 * 24 * 60,
                                       description="search time it may spend in total")
    min_gain: Number = Field(default=0.01, ge=0, lt=1, description="adaptive: a knob is positive when its "
                            "one-knob route beats the default by more than this and by more than the noise")
    warm_start: bool = Field(default=True, description="adaptive: also try routes that won for related "
                             "jobs (same model at other shapes or targets, other models on this target)")
    confirm: Confirm | None = Field(default_factory=Confirm, description="false: trtexec's rule, the lowest "
                                    "median wins with a strict <")

    _confirm_switch = field_validator("confirm", mode="before")(switchable_section)

    @model_validator(mode="after")
    def _adaptive_only(self) -> Strategy:
        extra = sorted({"min_gain", "warm_start"} & self.model_fields_set)
        if self.mode != "adaptive" and extra:
            raise ValueError(f"{' and '.join(extra)}: only mode adaptive takes it, not mode {self.mode}")
        return self
