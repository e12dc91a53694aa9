"""A job's search as configured: its strategy with warm-start routes frozen in the cache, and a budget
(``max_builds``, ``max_minutes``) that counts only new builds, across applies.

The first apply of a job group records the warm-start routes it gave the strategy (winners of related
jobs: same model at other shapes or targets, then other models on the same target) and, when the
search ends, whether it finished or stopped at its budget. ``plan`` reads the same row, so it proposes
exactly what ``apply`` would and is empty after it; raising the budget lets a stopped search go on."""

from __future__ import annotations

__all__ = ["JobSearch", "finish_search", "job_search", "save_progress", "selection_key", "takes_priors"]

import time
from collections.abc import Callable, Collection, Mapping

from trt_routes import canonical
from trt_routes.cache import side_tables
from trt_routes.cache.store import CacheStore
from trt_routes.jobs import Job
from trt_routes.routes import DEFAULT_ROUTE, route_dict
from trt_routes.search import Outcome, Search, cached_search
from trt_routes.search.priors import MAX_RELATED, failed_values, related_names

#: At most this many warm-start routes (each one costs a build).
MAX_WARM = 3


def strategy_key(job: Job) -> str:
    """What a search state belongs to: every strategy parameter except those it declares outside the search
    (``Strategy.NOT_SEARCH_STATE``: the budget, so a raised budget continues the same search and its count, and
    the selection rule), and the switch group's expression."""
    s = job.strategy
    params = {k: v for k, v in s.model_dump().items() if k not in s.NOT_SEARCH_STATE}
    return canonical.digest({**params, "expression": job.expression.text() if job.expression else ""}, 16)


def selection_key(job: Job) -> str:
    """What the selection rule depends on beyond trials and tolerance: the confirmation settings and the
    baseline a winner must beat (the default route adds nothing, so keys from before baselines hold) and the
    objective (not part of any trial's key: changing either is a reselect). Without a baseline or an
    objective the key is what it was before they existed, so older locks stay up to date."""
    confirm = job.strategy.confirm
    rule = confirm.model_dump() if confirm is not None else None
    parts: dict[str, object] = {"confirm": rule}
    if job.baseline_choices:  # best of presets: the listed routes, in order (ties go to the first)
        parts["baseline"] = list(job.baseline_routes)
    elif job.baseline != DEFAULT_ROUTE:
        parts["baseline"] = job.baseline
    if job.objective is not None:
        parts["objective"] = job.objective.model_dump()
    return canonical.digest(parts if len(parts) > 1 else rule, 16)


def takes_priors(cache: CacheStore, job: Job) -> bool:
    """``job``'s search has not started and will read related jobs' winners as it starts (``adaptive`` with
    ``warm_start``): apply starts it after the related jobs it runs, and plan says so (``waits_for``)."""
    return job.strategy.mode == "adaptive" and bool(job.strategy.warm_start) and \
        side_tables.search_state(cache, job.group_key, strategy_key(job)) is None


def related_winners(cache: CacheStore, job: Job, limit: int = MAX_WARM,
                    winners: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Routes that won for related jobs, nearest first: the same model at another shape on this target,
    the same model on another target, then other models on this target. The default route is left out.
    ``winners``: ``side_tables.current_winners(cache)`` if the caller has it already (a plan over many jobs)."""
    winners = side_tables.current_winners(cache) if winners is None else winners
    routes = [winners[name] for name in related_names(job.name, job.model, job.target, winners)
              if winners[name] != DEFAULT_ROUTE]
    return tuple(dict.fromkeys(routes))[:limit]


def related_failures(cache: CacheStore, job: Job, winners: Mapping[str, str]) -> tuple[str, ...]:
    """Values of this job's varied knobs that failed for the nearest related jobs that have a winner
    (``trt_routes.search.priors``)."""
    assert job.expression is not None
    varied = {t.option: set(t.values) for t in job.expression.tokens if len(t.values) > 1}
    names = related_names(job.name, job.model, job.target, winners)[:MAX_RELATED]
    failed = failed_values(t for name in names for t in cache.trials_for_job(name))
    return tuple(u for u in failed if (o := u.split("=", 1))[0] in varied and o[1] in varied[o[0]])


def avoid_sentence(avoid: tuple[str, ...]) -> str | None:
    """Plan and explain name the failed values a search screens last."""
    if not avoid:
        return None
    shown = ", ".join(avoid[:4]) + (f" and {len(avoid) - 4} more" if len(avoid) > 4 else "")
    return f"{len(avoid)} value(s) that failed for related jobs screened last: {shown}"


def warm_sources(cache: CacheStore, job: Job, warm: tuple[str, ...],
                 winners: Mapping[str, str] | None = None) -> list[str]:
    """The warm-start routes in words, each with the related jobs it won for (plan and explain name the
    priors a search starts from): ``-k=1 (won for resnet50/bs8/h200)``."""
    winners = side_tables.current_winners(cache) if winners is None else winners
    out = []
    for route in warm:
        jobs = sorted(name for name, won in winners.items() if won == route and name != job.name)
        out.append(f"{route} (won for {', '.join(jobs[:3])}{', ...' if len(jobs) > 3 else ''})" if jobs
                   else f"{route} (a related job's winner when this search started)")
    return out


class JobSearch(Search):
    """A strategy under a budget of new builds and minutes, carried over from earlier applies.

    New builds are the routes known now that were not known when this search object was made
    (``initial``), plus ``spent_builds`` from earlier applies; the next batch is cut to what is left.
    ``baselines`` (the job's, when it names any: one route, or every listed preset's) are always
    measured: they lead the first batch whatever the strategy or budget, and they are always candidates."""

    def __init__(self, inner: Search, warm: tuple[str, ...], initial: frozenset[str], max_builds: int | None,
                 max_minutes: float | None, spent_builds: int = 0, spent_seconds: float = 0.0,
                 clock: Callable[[], float] | None = None, baselines: tuple[str, ...] = (),
                 cost: Callable[[str], float] | None = None) -> None:
        self.inner = inner
        self.baselines = tuple(r for r in baselines if r != DEFAULT_ROUTE)
        self.name = inner.name
        self.static = inner.static
        self.keeps_proposals = inner.keeps_proposals
        self.warm = warm
        self.initial = initial
        self.spent_builds = spent_builds
        self.spent_seconds = spent_seconds
        self.max_builds = max_builds
        self.max_seconds = max_minutes * 60.0 if max_minutes else None
        self.clock = clock
        self.started = clock() if clock else 0.0
        self.cost = cost or (lambda route: 1.0)
        self.short: str | None = None  # why a route did not fit in the time left (``fits``)
        self.avoid: tuple[str, ...] = ()  # values that failed for related jobs, screened last (``job_search``)

    def builds(self, known: Collection[str]) -> int:
        """Builds spent: earlier applies' and the routes known now that were not when this search was made."""
        return self.spent_builds + sum(1 for r in known if r not in self.initial)

    def seconds(self) -> float:
        return self.spent_seconds + ((self.clock() - self.started) if self.clock else 0.0)

    def exhausted(self, known: Mapping[str, Outcome]) -> str | None:
        """Why the budget allows no more builds, or None."""
        if self.max_builds is not None and self.builds(known) >= self.max_builds:
            return f"max_builds {self.max_builds} spent"
        if self.max_seconds is not None and self.seconds() >= self.max_seconds:
            return f"max_minutes {self.max_seconds / 60:g} spent"
        return self.short

    def unit_routes(self) -> tuple[str, ...]:
        """The routes whose build time ``unit_s`` reads, in order."""
        baseline = getattr(self.inner, "baseline", None)
        return (baseline, DEFAULT_ROUTE) if isinstance(baseline, str) else (DEFAULT_ROUTE,)

    def unit_s(self, known: Mapping[str, Outcome]) -> float | None:
        """What a route's ``cost`` multiplies: the build time of the search's baseline (the switch group's
        pinned knobs, the varied ones at their defaults), else of the default route; None before either
        is built."""
        for route in self.unit_routes():
            outcome = known.get(route)
            if outcome is not None and outcome.build_s:
                return outcome.build_s
        return None

    def fits(self, route: str, unit_s: float | None) -> bool:
        """Whether building ``route`` now is within ``max_minutes``: time is left, and the route's estimated
        build time, its ``cost`` times the baseline's build time (``unit_s``), is not more than what is
        left. Before the baseline or default is built only the time left counts. A route that does not fit ends the
        search at its budget (``exhausted`` says why), in plan and apply alike."""
        if self.max_seconds is None:
            return True
        left = self.max_seconds - self.seconds()
        need = self.cost(route) * (unit_s or 0.0)
        if left > 0 and need > left:
            self.short = (f"max_minutes {self.max_seconds / 60:g}: {left / 60:.1f} min left, the next build "
                          f"({route or 'default'}) needs about {need / 60:.1f}")
        return left > 0 and need <= left

    def candidates(self, known: Mapping[str, Outcome]) -> list[str]:
        inner = self.inner.candidates(known)
        if not self.baselines:
            return inner
        return list(dict.fromkeys([*self.baselines, *inner]))

    def next_batch(self, known: Mapping[str, Outcome]) -> list[str]:
        batch = self.inner.next_batch(known)
        lead = [r for r in self.baselines if r not in known]
        if not batch or self.exhausted(known):
            return lead
        if self.max_builds is not None:
            batch = batch[: max(0, self.max_builds - self.builds(known) - len(lead))]
        if self.max_seconds is not None:
            unit = self.unit_s(known)
            fitting = 0
            while fitting < len(batch) and (batch[fitting] in lead or self.fits(batch[fitting], unit)):
                fitting += 1
            batch = batch[:fitting]
        return list(dict.fromkeys([*lead, *batch]))

    def pending(self, known: Mapping[str, Outcome]) -> str | None:
        return None if self.exhausted(known) else self.inner.pending(known)

    def note(self, known: Mapping[str, Outcome]) -> str | None:
        return self.inner.note(known)

    def unfinished(self, known: Mapping[str, Outcome]) -> bool:
        """The strategy wanted more than the budget allowed (a build estimated past ``max_minutes``
        included: ``next_batch`` finds it)."""
        if self.max_seconds is not None:
            self.next_batch(known)  # what it finds past the time left sets ``short``
        return bool(self.inner.next_batch(known)) and self.exhausted(known) is not None


def job_search(job: Job, cache: CacheStore, known: Collection[str], *, running: bool = False,
               winners: Callable[[], Mapping[str, str]] | None = None) -> JobSearch:
    """``job``'s search, given the routes ``known`` now. ``running`` (apply): the clock runs, and a new
    job group's warm-start routes are recorded before the first build. ``winners``: where to get the
    related jobs' winners (a plan reads them once for all its jobs)."""
    assert job.expression is not None and job.catalog is not None
    key = strategy_key(job)
    row = side_tables.search_state(cache, job.group_key, key)
    if row is not None:
        warm, avoid = tuple(row["warm"]), tuple(row["avoid"])
    elif job.strategy.mode == "adaptive" and job.strategy.warm_start:
        won = winners() if winners is not None else side_tables.current_winners(cache)
        warm, avoid = related_winners(cache, job, winners=won), related_failures(cache, job, won)
    else:
        warm, avoid = (), ()
    if running and row is None:
        side_tables.put_search_state(cache, job.group_key, key, job.name, list(warm), "running", 0, 0.0,
                                     avoid=list(avoid))
    budgeted = job.strategy.mode in ("adaptive", "mixed")  # the budget shapes what these propose
    inner = cached_search(job.strategy.mode, job.expression, job.catalog, warm, job.strategy.min_gain,
                          job.strategy.max_builds if budgeted else None, avoid,
                          job.strategy.max_minutes if budgeted else None)
    catalog = job.catalog
    search = JobSearch(inner, warm, frozenset(known), job.strategy.max_builds, job.strategy.max_minutes,
                       int(row["builds"] or 0) if row else 0,
                       float(row["seconds"] or 0.0) if row else 0.0, time.monotonic if running else None,
                       baselines=job.baseline_routes, cost=lambda r: catalog.route_cost(route_dict(r)))
    search.avoid = avoid
    return search


def finish_search(cache: CacheStore, job: Job, search: JobSearch, known: Mapping[str, Outcome]) -> None:
    """Record what this apply's search spent and whether it stopped at its budget."""
    _record(cache, job, search, "budget" if search.unfinished(known) else "complete", known)


def save_progress(cache: CacheStore, job: Job, search: JobSearch, routes: Collection[str]) -> None:
    """Record what the search has spent so far, as each trial is stored: an apply stopped mid-search (Ctrl-C,
    ``kill -9``) resumes with what is left of ``max_builds`` and ``max_minutes``, not with all of it again
    (the trials it left are known then, so they no longer count as new builds)."""
    _record(cache, job, search, "running", routes)


def _record(cache: CacheStore, job: Job, search: JobSearch, state: str, routes: Collection[str]) -> None:
    side_tables.put_search_state(cache, job.group_key, strategy_key(job), job.name, list(search.warm), state,
                                 search.builds(routes), round(search.seconds(), 3), avoid=list(search.avoid))


def search_note(search: Search, known: Mapping[str, Outcome]) -> str | None:
    """A sentence for plan/explain when a search stopped at its budget."""
    if isinstance(search, JobSearch) and search.unfinished(known):
        return f"search stopped at its budget ({search.exhausted(known)}); raise it to search further"
    return None
