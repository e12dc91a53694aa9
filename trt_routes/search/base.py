"""What every search strategy offers: the routes it wants measured, given what is already known.

Strategies are pure: they read outcomes and return canonical route strings; they never measure."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trt_routes.routes import DEFAULT_ROUTE


@dataclass(frozen=True)
class Outcome:
    """What a strategy needs to know about a measured route.

    ``ok``: the trial succeeded and passed the accuracy gate; ``median_ms``: its median time;
    ``ci_low``/``ci_high``: the median's bootstrap confidence interval (the measurement's noise);
    ``build_s``: how long its build took (budgets estimate other builds from the default route's)."""

    ok: bool
    median_ms: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    build_s: float | None = None

    def beats(self, other: Outcome) -> bool:
        """Strictly faster than ``other``, both successful (trtexec's rule, noise included)."""
        if not (self.ok and other.ok) or self.median_ms is None or other.median_ms is None:
            return False
        return self.median_ms < other.median_ms


class Search(ABC):
    """A search strategy over canonical routes."""

    name: str
    #: True when ``candidates`` does not depend on what is known (fast, full).
    static: bool = False
    #: True when every route ``next_batch`` proposes stays wanted whatever the routes being measured turn
    #: out to be (the search waits for all routes of a step before deciding the next): such routes may be
    #: queued before those results are in.
    keeps_proposals: bool = False

    @abstractmethod
    def candidates(self, known: Mapping[str, Outcome]) -> list[str]:
        """Every route proposed so far given ``known``, in order, deduplicated, known ones included."""

    def verdict_routes(self, known: Mapping[str, Outcome]) -> list[str]:
        """The routes a job's verdict is chosen among: the default route, then every candidate (the one
        definition plan, apply, lock check and explain share)."""
        return unique([DEFAULT_ROUTE, *self.candidates(known)])

    def next_batch(self, known: Mapping[str, Outcome]) -> list[str]:
        """Routes to measure next (none of them in ``known``); ``[]`` means the search is finished."""
        return [route for route in self.candidates(known) if route not in known]

    def pending(self, known: Mapping[str, Outcome]) -> str | None:
        """A sentence about work that cannot be listed yet, or None."""
        return None

    def note(self, known: Mapping[str, Outcome]) -> str | None:
        """A sentence for plan and explain about work the strategy left out, or None."""
        return None


def unique(routes: Iterable[str]) -> list[str]:
    """Routes in first-seen order, each once."""
    return list(dict.fromkeys(routes))
