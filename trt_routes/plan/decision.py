"""A job's decision as a value (issue 34.3): the selection apply made (the winner, every candidate's verdict,
the side-by-side confirmation) and its search's notes (the budget, the warm start, the priors), with the job
group and the trials it was made from.

``apply`` stores one when it locks a job (``store``); ``explain`` and the report render the stored one
(``stored``) when the job's trials are still those it saw, and derive one from the trials (``derive``) only
where none matches, saying why: trials measured since, or a cache with none stored (trials pulled from a
teammate, a cache from an older trt-routes). So what explain shows is what apply decided, not what today's
code would decide from the same trials."""

from __future__ import annotations

__all__ = ["Decision", "decision", "derive", "inputs_digest", "store", "stored"]

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trt_routes import canonical
from trt_routes.cache import side_tables
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.jobs import Job
from trt_routes.lockfile import LockEntry
from trt_routes.plan.diff import outcomes
from trt_routes.search import Outcome, Search
from trt_routes.search.job import JobSearch, avoid_sentence, job_search, search_note, selection_key, warm_sources
from trt_routes.selection.confirm import Request
from trt_routes.selection.final import confirmation_lines, final_selection
from trt_routes.selection.rank import LossLookup, Selection


@dataclass(frozen=True)
class Decision:
    """What was decided for a job, and from what."""

    selection: Selection
    #: the confirmation in words (``selection.final.confirmation_lines``)
    confirmation: tuple[str, ...]
    #: the search's notes in words: stopped at its budget, warm-started from related winners, priors
    search: tuple[str, ...]
    group_key: str
    #: ``inputs_digest`` of the job group's trials and the selection rule when apply stored it ("" for one not
    #: read back from the cache: ``store`` takes the digest of what the cache holds then)
    trials: str
    #: when apply stored it ("" for one derived now)
    at: str = ""


def inputs_digest(job: Job, trials: Mapping[str, TrialRecord]) -> str:
    """What a decision was made from beyond the job group: each route's trial id and when it was measured (a
    route measured again, ``--retry-failed``, is another trial), the tolerance, and how the winner is chosen
    (``search.job.selection_key``: confirmation, baseline, objective)."""
    return canonical.digest({"trials": sorted((route, t.id, t.created_at) for route, t in trials.items()),
                             "tolerance": job.tolerance.model_dump(mode="json"), "selection": selection_key(job)}, 16)


def decision(job: Job, cache: CacheStore, sel: Selection, pending: Sequence[Request], search: Search | None,
             known: Mapping[str, Outcome]) -> Decision:
    """The decision ``sel`` as a value, with its search's notes."""
    notes: list[str] = []
    if search is not None and (budget := search_note(search, known)):
        notes.append(f"The {budget}.")
    if search is not None and (left := search.note(known)):
        notes.append(f"{left}.")
    if isinstance(search, JobSearch) and search.warm:
        notes.append("Warm start (priors): the search began with related jobs' winners: "
                     + "; ".join(warm_sources(cache, job, search.warm)) + ".")
    if isinstance(search, JobSearch) and (avoided := avoid_sentence(search.avoid)):
        notes.append(f"Priors: {avoided}.")
    return Decision(sel, tuple(confirmation_lines(sel, list(pending))), tuple(notes), job.group_key, "")


def derive(job: Job, cache: CacheStore, trials: Mapping[str, TrialRecord], entry: LockEntry | None,
           lookup: LossLookup | None) -> Decision | None:
    """The decision the trials give now (what apply would decide): the job's search, its candidates, the
    selection and what confirmation stored. None without trials or a switch group."""
    if not trials or job.expression is None or job.catalog is None:
        return None
    search = job_search(job, cache, trials)
    known = outcomes(trials, job.tolerance, lookup)
    sel, pending = final_selection(job, trials, search.verdict_routes(known), cache, entry, lookup)
    return decision(job, cache, sel, pending, search, known)


def store(cache: CacheStore, job: Job, d: Decision) -> None:
    """Keep ``d`` as the decision apply made for ``job``, against the trials the cache now holds for it."""
    data = {"selection": dataclasses.asdict(d.selection), "confirmation": list(d.confirmation),
            "search": list(d.search)}
    seen = inputs_digest(job, cache.group(job.group_key, light=True))
    side_tables.put_decision_record(cache, job.name, d.group_key, seen, json.dumps(data))


def stored(cache: CacheStore, job: Job) -> Decision | None:
    """The decision apply last stored for ``job`` (any job group: compare ``group_key`` and ``trials``); None
    when there is none or it does not read (a record from a newer trt-routes is derived again)."""
    row = side_tables.decision_record(cache, job.name)
    if row is None:
        return None
    try:
        data = json.loads(row["record"])
        return Decision(_selection(data["selection"]), tuple(data["confirmation"]), tuple(data["search"]),
                        row["group_key"], row["trials"], row["at"])
    except (ValueError, KeyError, TypeError):
        return None


def _selection(data: dict[str, Any]) -> Selection:
    from pydantic import TypeAdapter  # only explain reads records back

    return TypeAdapter(Selection).validate_python(data)
