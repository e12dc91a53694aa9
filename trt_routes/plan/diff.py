"""plan(): a pure diff of manifest jobs x trial cache x lockfile x environment -> Plan.

It builds nothing and writes nothing. Every job gets one action and the reasons for it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trt_routes import canonical
from trt_routes.cache import side_tables
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.errors import Exit
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.facts import batch_of
from trt_routes.files.artifacts import BlobStore, file_digest
from trt_routes.jobs import Job, PlanAction
from trt_routes.lockfile import LockEntry, Lockfile
from trt_routes.manifest.schema import Check, Tolerance
from trt_routes.plan.advice import no_eligible_advice
from trt_routes.plan.settled import Settled
from trt_routes.project import LossLookupFromBlobs, Project
from trt_routes.routes import count_text, describe, product_size
from trt_routes.search import Outcome, cached_search, make_search
from trt_routes.search.job import JobSearch, avoid_sentence, job_search, selection_key, takes_priors, warm_sources
from trt_routes.search.priors import related_names
from trt_routes.selection.final import describe_requests, final_selection
from trt_routes.selection.rank import DEFAULT_ROUTE, LossLookup, gate, trial_facts


def blocked_exit(kinds: Iterable[str | None]) -> Exit | None:
    """The exit code of jobs blocked here (``Job.block_kind``), the same for apply, ``plan --check`` and
    ``status``: 3 when a backend cannot load on this machine, 2 when a job cannot work as written (a model
    file missing, a backend that does not serve the target), None when nothing is blocked. Jobs whose
    hardware is absent here ("absent": a GPU target on a CPU runner) are skipped, not blocked."""
    found = set(kinds)
    if "unavailable" in found:
        return Exit.UNAVAILABLE
    if "invalid" in found:
        return Exit.USAGE
    return None


@dataclass(frozen=True)
class JobPlan:
    job: Job
    action: PlanAction
    reasons: tuple[str, ...]
    to_build: tuple[str, ...] = ()
    reused: int = 0
    pending: str | None = None
    candidates: tuple[str, ...] = ()
    #: an upper bound on the builds the job's search may still ask for in all (``to_build`` is its next step)
    at_most: int | None = None
    #: the fingerprint under which apply may store this plan as settled (``plan.settled``): set when the plan
    #: was derived in full, found nothing to do but perhaps the engine, and read nothing outside its inputs
    settle: str | None = None
    #: taken from a settled plan (only the engine was checked)
    from_settled: bool = False
    #: the winner's engine is not in the blob store: apply fetches it or builds it again (``_engine_gone``)
    engine_gone: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job.name, "action": self.action, "reasons": list(self.reasons),
                "to_build": list(self.to_build), "reused": self.reused, "pending": self.pending,
                "candidates": len(self.candidates), "at_most": self.at_most}


@dataclass
class Plan:
    jobs: list[JobPlan]
    removed: list[str] = field(default_factory=list)

    @property
    def has_work(self) -> bool:
        work = (PlanAction.TUNE, PlanAction.RESELECT, PlanAction.MATERIALIZE)
        return bool(self.removed) or any(j.action in work for j in self.jobs)

    @property
    def blocked(self) -> list[JobPlan]:
        """Jobs that cannot run here: not up to date, whatever else the plan says."""
        return [j for j in self.jobs if j.action == PlanAction.BLOCKED]

    @property
    def blocked_exit(self) -> Exit | None:
        return blocked_exit(j.job.block_kind for j in self.blocked)

    def check_exit(self) -> Exit:
        """``plan --check``: a job blocked here first (3 or 2, see ``blocked_exit``), then 1 for work to do."""
        return self.blocked_exit or (Exit.WORK if self.has_work else Exit.OK)

    @property
    def builds(self) -> int:
        return sum(len(j.to_build) for j in self.jobs)

    @property
    def engines_gone(self) -> int:
        """Reselections whose winner's engine apply fetches or builds again."""
        return sum(1 for j in self.jobs if j.engine_gone)

    @property
    def at_most(self) -> int:
        """The builds every job's search may ask for in all (``builds`` is their next step)."""
        return sum(max(j.at_most or 0, len(j.to_build)) for j in self.jobs)

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for j in self.jobs:
            counts[j.action] = counts.get(j.action, 0) + 1
        return {"jobs": [j.to_json() for j in self.jobs], "removed": self.removed, "counts": counts,
                "builds": self.builds, "has_work": self.has_work}


class GroupTrials(Mapping[str, TrialRecord]):
    """One job group's trials by route, each row fetched and decoded only when read (a dynamic search
    replayed over a full cache reads a few dozen of its hundreds of routes). Membership of a route name
    (``routes``) needs no row."""

    def __init__(self, cache: CacheStore, group_key: str) -> None:
        self.cache, self.group_key = cache, group_key
        self.rowids = cache.group_rowids(group_key)
        self.decoded: dict[str, TrialRecord | None] = {}

    @property
    def routes(self) -> set[str]:
        return set(self.rowids)

    def _decode(self, route: str) -> TrialRecord | None:
        got = self.cache.light_row(self.rowids[route])  # KeyError: no such route
        row = dict(zip(got[0], got[1], strict=True)) if got is not None else None
        if row is None or row.get("route") != route or row.get("group_key") != self.group_key:
            return None  # deleted since it was listed (its rowid perhaps reused by another trial): gone
        try:
            return TrialRecord.from_row(row)
        except (ValueError, TypeError) as exc:
            self.cache.warnings.append(f"corrupt trial row {row.get('id', '?')} skipped: {exc}")
            return None

    def __getitem__(self, route: str) -> TrialRecord:
        if route not in self.decoded:
            self.decoded[route] = self._decode(route)
        trial = self.decoded[route]
        if trial is None:
            raise KeyError(route)
        return trial

    def __contains__(self, route: object) -> bool:
        if route not in self.rowids:
            return False
        try:
            self[route]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return (r for r in list(self.rowids) if r in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class LazyOutcomes(Mapping[str, Outcome]):
    """``outcomes`` of a ``GroupTrials``, each computed (gate included) when read."""

    def __init__(self, trials: GroupTrials, tolerance: Tolerance, lookup: LossLookup | None = None) -> None:
        self.trials, self.tolerance, self.lookup = trials, tolerance, lookup
        self.memo: dict[str, Outcome] = {}

    def __getitem__(self, route: str) -> Outcome:
        if route not in self.memo:
            self.memo[route] = outcomes({route: self.trials[route]}, self.tolerance, self.lookup)[route]
        return self.memo[route]

    def __contains__(self, route: object) -> bool:
        return route in self.trials

    def __iter__(self) -> Iterator[str]:
        return iter(self.trials)

    def __len__(self) -> int:
        return len(self.trials)


def outcomes(trials: Mapping[str, TrialRecord], tolerance: Tolerance,
             lookup: LossLookup | None = None) -> dict[str, Outcome]:
    """What a search sees of cached trials: ok (built, finite, within tolerance) and the median."""
    return {
        route: Outcome(ok=t.status == TrialStatus.OK and t.median_ms is not None and not gate(t, tolerance, lookup),
                       median_ms=t.median_ms, ci_low=t.ci_low, ci_high=t.ci_high, build_s=t.build_s)
        for route, t in trials.items()
    }


SPACE_LISTED = 20_000  # routes of a switch group listed exactly for the bound; beyond, counted


def build_bound(job: Job, search: JobSearch, known: Mapping[str, Outcome], batch: list[str]) -> int:
    """An upper bound on the new builds ``job``'s search may still ask for, this step included: a static
    strategy's remaining list; for mixed and adaptive every route of the switch group's full product (and
    every warm-start route) not measured yet; either capped by what ``max_builds`` leaves."""
    assert job.expression is not None and job.catalog is not None
    if search.static:
        left = len((set(search.candidates(known)) | set(batch)) - set(known))
    else:
        size = product_size(job.expression.varied)
        if size <= SPACE_LISTED:
            space = set(make_search("full", job.expression, job.catalog).candidates({}))
            left = len((space | set(search.warm) | set(batch)) - set(known))
        else:
            left = size + len(search.warm)
    if search.max_builds is not None:
        left = min(left, max(len(batch), search.max_builds - search.builds(known)))
    return max(left, len(batch))


def candidates_key(candidates: list[str] | tuple[str, ...]) -> str:
    return canonical.digest(sorted(set(candidates)), 16)


def _checks_text(tol: dict[str, Any]) -> str:
    def one(checks: list[dict[str, Any]]) -> str:
        return ", ".join(f"{c['metric']}<{c['threshold']:g}" for c in checks)
    text = one(tol.get("checks", []))
    for out, checks in sorted((tol.get("outputs") or {}).items()):
        text += f"; {out}: {one(checks)}"
    return text


def tolerance_change(name: str, old: dict[str, Any] | None, new: Tolerance) -> str:
    new_d = canonical.normalize(new)
    if not old:
        return f"tolerance '{name}' not recorded in the lock"
    return f"tolerance '{name}' changed: {_checks_text(old)} -> {_checks_text(new_d)}"


def stale_reasons(job: Job, old: dict[str, Any], old_signature: dict[str, str] | None) -> list[str]:
    """Why trials recorded under ``old`` key parts do not serve ``job`` now, field by field."""
    reasons = []
    if old.get("model_digest") and old["model_digest"] != job.model_digest:
        reasons.append("model digest changed")
    if job.signature is not None and old_signature is not None and old_signature != job.signature.fields:
        reasons.append("stale: " + "; ".join(job.signature.diff(old_signature)))
    for key, text in (("shape_key", "shape profile changed"), ("settings_key", "build settings changed"),
                      ("protocol_key", "measurement protocol changed"),
                      ("reference_key", "reference data changed")):
        if old.get(key) and old[key] != getattr(job, key):
            if key == "reference_key" and job.reference_shas is None and \
                    any(r != "build settings changed" for r in reasons):
                continue  # an automatic reference follows the model, shapes, seed and backend: said already
            reasons.append(text)
    return reasons


def plan_job(job: Job, cache: CacheStore, lock: Lockfile, root: Path,
             lookup: LossLookup | None = None,
             winners: Callable[[], Mapping[str, str]] | None = None,
             settled: Settled | None = None, store: BlobStore | None = None) -> JobPlan:
    """``winners``: the related jobs' winners, read once per plan (``make_plan``). ``settled``: plans apply
    found up to date, by the fingerprint of their inputs (``plan.settled``)."""
    if job.blocked:
        return JobPlan(job, PlanAction.SKIPPED if job.block_kind == "absent" else PlanAction.BLOCKED, (job.blocked,))
    assert job.expression is not None and job.catalog is not None
    entry = lock.jobs.get(job.name)
    if settled is not None and entry is not None and (hit := settled.verdict(job)) is not None:
        return replace(_engine_check(job, entry, root, hit["reused"], tuple(hit["candidates"])),
                       from_settled=True)
    counted = _Counted(lookup)
    warned = len(cache.warnings)
    plan, decided = _plan_job(job, cache, entry, root, counted if lookup is not None else None, winners, store)
    # not settled: a plan that read a loss off the artifact store (it can be collected) or met a corrupt row
    if decided and settled is not None and not counted.calls and len(cache.warnings) == warned:
        plan = replace(plan, settle=settled.fingerprint(job))
    return plan


class _Counted:
    """A loss lookup that counts its calls."""

    def __init__(self, inner: LossLookup | None) -> None:
        self.inner, self.calls = inner, 0

    def __call__(self, trial: TrialRecord, output: str, check: Check) -> float | None:
        self.calls += 1
        return self.inner(trial, output, check) if self.inner is not None else None


def _plan_job(job: Job, cache: CacheStore, entry: LockEntry | None, root: Path, lookup: LossLookup | None,
              winners: Callable[[], Mapping[str, str]] | None,
              store: BlobStore | None = None) -> tuple[JobPlan, bool]:
    """``plan_job`` in full, and whether it found nothing left to do but perhaps the engine (such a plan may
    be settled)."""
    assert job.expression is not None and job.catalog is not None
    # a dynamic search reads rows (decoded as read: it replays over the routes it walks through, not the
    # whole group); a static one may need only the routes (one indexed SELECT route)
    lazy = None if cached_search(job.strategy.mode, job.expression, job.catalog).static else \
        GroupTrials(cache, job.group_key)
    routes = cache.routes(job.group_key) if lazy is None else lazy.routes
    search = job_search(job, cache, routes, winners=winners)
    if search.static and entry is not None and _keys_match(job, entry):
        static = tuple(search.verdict_routes({}))
        if entry.candidates_key == candidates_key(static) and routes >= set(static):
            # same trials, same rule, same candidates: the locked selection stands without re-deriving it
            return _engine_check(job, entry, root, len(static), static), True
    trials = lazy if lazy is not None else GroupTrials(cache, job.group_key)
    known = LazyOutcomes(trials, job.tolerance, lookup)
    batch = search.next_batch(known)
    if DEFAULT_ROUTE not in known and DEFAULT_ROUTE not in batch:
        batch = [DEFAULT_ROUTE, *batch]
    cands = tuple(dict.fromkeys([*search.verdict_routes(known), *batch]))
    pending = search.pending(known)
    reused = sum(1 for r in cands if r in trials)
    if batch or pending:
        reasons: list[str] = []
        if entry is not None:
            reasons = stale_reasons(job, entry.keys or {}, entry.signature_fields)
        elif (latest := cache.latest_for_job(job.name)) is not None and latest.group_key != job.group_key:
            reasons = stale_reasons(job, latest.__dict__, cache.signature_fields(latest.signature))
        if not reasons:
            if entry is None and not trials.rowids:
                reasons.append("new job: never tuned")
            else:
                shown = ", ".join(describe(r) for r in batch[:4]) + (", ..." if len(batch) > 4 else "")
                reasons.append(f"{len(batch)} route(s) not measured yet: {shown}" if batch else
                               "search continues")
        if pending:
            reasons.append(pending)
        if search.warm and not known.get(search.warm[0]):  # the priors this search starts from, named
            reasons.append("starts from related jobs' winners: " + "; ".join(
                warm_sources(cache, job, search.warm, winners() if winners is not None else None)))
        if avoided := avoid_sentence(search.avoid):
            reasons.append(avoided)
        bound = build_bound(job, search, known, batch)
        minutes = job.strategy.max_minutes
        if bound > len(batch):
            reasons.append(f"{len(batch)} build(s) now, at most {count_text(bound)} in all ({job.strategy.mode}: "
                           "later steps depend on what these measure)")
        if minutes:  # builds that take minutes (Inductor's autotuning presets) end the search before the count
            reasons.append(f"max_minutes {minutes:g}: the search stops once its builds have taken that long, "
                           "whatever the count")
        return JobPlan(job, PlanAction.TUNE, tuple(reasons), tuple(batch), reused, pending, cands, bound), False
    cands = tuple(r for r in cands if r in trials)  # what apply selects among (a budget can leave routes out)
    # an objective reads the trials' stored facts (in meta, which light rows leave out)
    chosen_from: Mapping[str, TrialRecord] = cache.group(job.group_key) if job.objective is not None else trials
    sel, requests = final_selection(job, chosen_from, list(cands), cache, entry, lookup)
    if entry is None:
        if sel.winner is None:
            advice = no_eligible_advice(job.name, job.tolerance_name, trials, cands)
            return JobPlan(job, PlanAction.RESELECT, (advice,), (), reused, None, cands), False
        gone = _engine_gone(trials, sel.winner, store)
        left = [note] if (note := search.note(known)) else []
        return JobPlan(job, PlanAction.RESELECT, (f"every route is cached ({len(cands)}): select and lock"
                                                  f"{', no builds' if not gone else ''}",
                                                  *([describe_requests(requests)] if requests else []), *left,
                                                  *gone),
                       (), reused, None, cands, engine_gone=bool(gone)), False
    reasons = []
    if entry.group_key != job.group_key:
        reasons += stale_reasons(job, entry.keys or {}, entry.signature_fields) or [
            "job keys changed"]
    if entry.tolerance_key != job.tolerance_key:
        reasons.append(tolerance_change(job.tolerance_name, entry.tolerance, job.tolerance))
    if entry.candidates_key != candidates_key(cands):
        reasons.append("candidate routes changed (switch group or strategy)")
    if not _same_strategy(job, entry):
        reasons.append(f"strategy changed to '{job.strategy_name}' ({job.strategy.mode})")
    objective_text = objective_change(job, entry)
    if objective_text:
        reasons.append(objective_text)
    elif (entry.selection.key if entry.selection else None) != selection_key(job):
        reasons.append("selection rule changed (confirmation settings)")
    if objective_text and (lacking := missing_facts(job, chosen_from, cands, lookup)):
        reasons.append(lacking)
    if requests:
        reasons.append(describe_requests(requests))
    elif (entry.route if entry.status == TrialStatus.OK else None) != sel.winner:
        reasons.append(f"winner changed: {describe(entry.route or '')} -> "
                       f"{describe(sel.winner) if sel.winner is not None else 'none'}")
    if reasons:
        gone = _engine_gone(trials, sel.winner, store)
        return JobPlan(job, PlanAction.RESELECT, ("reselect: " + "; ".join(reasons), *gone),
                       (), reused, None, cands, engine_gone=bool(gone)), False
    return _engine_check(job, entry, root, reused, cands), True


def _engine_gone(trials: Mapping[str, TrialRecord], winner: str | None, store: BlobStore | None) -> tuple[str, ...]:
    """A reselection's winner whose engine the blob store lacks (its trial imported from a bundle without
    engines) is built again by apply: the plan says so."""
    trial = trials.get(winner) if winner is not None else None
    if store is None or trial is None or not trial.engine_sha256 or store.has(trial.engine_sha256):
        return ()
    return (f"the engine of the winner, {describe(trial.route)}, is not in the blob store (its trial came without "
            "it): apply fetches it from a cache remote or builds it again (one build at most)",)


def _objective_text(name: str | None, rank: str | None, limits: dict[str, Any] | None) -> str:
    if not rank:
        return "none (lowest latency.p50)"
    bounds = ", ".join(f"{k} <= {v:g}" for k, v in sorted((limits or {}).items()))
    return f"'{name}' (rank {rank}{'; ' + bounds if bounds else ''})"


def objective_change(job: Job, entry: LockEntry) -> str | None:
    """"objective changed: old -> new" when the job's objective is not the one its lock entry was chosen by."""
    old = entry.objective
    old_text = _objective_text(old.name, old.rank, old.limits) if old is not None else _objective_text(None, None, None)
    new = job.objective
    new_text = _objective_text(job.objective_name, new.rank, dict(new.limits)) if new is not None else \
        _objective_text(None, None, None)
    return None if old_text == new_text else f"objective changed: {old_text} -> {new_text}"


def missing_facts(job: Job, trials: Mapping[str, TrialRecord], cands: tuple[str, ...],
                  lookup: LossLookup | None = None) -> str | None:
    """Which facts the job's objective needs that cached trials (passing the accuracy gate) lack, and why
    that matters: those routes are not eligible under it until they are measured again."""
    if job.objective is None:
        return None
    batch = batch_of(job.inputs)
    lacking: dict[str, int] = {}
    for route in cands:
        t = trials.get(route)
        if t is None or t.status != TrialStatus.OK or t.median_ms is None or gate(t, job.tolerance, lookup):
            continue
        have = trial_facts(t, batch)
        for fact in job.objective.facts:
            if fact not in have:
                lacking[fact] = lacking.get(fact, 0) + 1
    if not lacking:
        return None
    parts = ", ".join(f"{fact} ({n} trial(s))" for fact, n in sorted(lacking.items()))
    return (f"objective '{job.objective_name}' needs facts older trials lack: {parts}; they were measured before "
            "trt-routes recorded facts (or on a host that cannot measure them), so those routes are not eligible "
            "under this objective until measured again")


def _same_strategy(job: Job, entry: LockEntry) -> bool:
    locked = entry.strategy.to_data() if entry.strategy is not None else None
    return locked == {"name": job.strategy_name, "mode": job.strategy.mode}


def _keys_match(job: Job, entry: LockEntry) -> bool:
    return (entry.status == TrialStatus.OK and entry.group_key == job.group_key
            and entry.tolerance_key == job.tolerance_key and _same_strategy(job, entry)
            and (entry.selection.key if entry.selection else None) == selection_key(job))


def _engine_check(job: Job, entry: LockEntry, root: Path, reused: int,
                  cands: tuple[str, ...]) -> JobPlan:
    """Up to date, unless the materialized engine is missing or not the locked one: its size, then its
    sha256 (remembered by stat when trt-routes materialized it, so a no-op plan reads no engine)."""
    engine = entry.engine
    if engine is not None and engine.sha256:
        path = root / (engine.path or "")
        if not path.is_file():
            return JobPlan(job, PlanAction.MATERIALIZE, (f"engine missing at {engine.path}",), (), reused,
                           None, cands)
        if path.stat().st_size != (-1 if engine.size is None else engine.size):
            return JobPlan(job, PlanAction.MATERIALIZE, (f"engine at {engine.path} differs from the lock",),
                           (), reused, None, cands)
        try:
            got = file_digest(path)
        except OSError as exc:
            got = f"unreadable ({exc.strerror})"
        if got != engine.sha256:
            return JobPlan(job, PlanAction.MATERIALIZE, (f"engine at {engine.path} is corrupt or was changed: its "
                                                f"bytes hash to {got[:12]}, the lock says {engine.sha256[:12]}",),
                           (), reused, None, cands)
    return JobPlan(job, PlanAction.UP_TO_DATE, ("up to date",), (), reused, None, cands)


def make_plan(jobs: list[Job], cache: CacheStore, lock: Lockfile, root: Path,
              lookup: LossLookup | None = None, store: BlobStore | None = None) -> Plan:
    """The plan for every job; lock entries of jobs no longer in the manifest are listed as removed."""
    names = {j.name for j in jobs}
    memo: list[Mapping[str, str]] = []

    def winners() -> Mapping[str, str]:  # read once, only if a job needs it (a plan writes no decision)
        if not memo:
            memo.append(side_tables.current_winners(cache))
        return memo[0]

    settled = Settled(cache, jobs, lock, root, winners) if Settled.enabled() else None
    return Plan(jobs=waits_for([plan_job(j, cache, lock, root, lookup, winners, settled, store) for j in jobs],
                               cache),
                removed=sorted(set(lock.jobs) - names))


def waits_for(plans: list[JobPlan], cache: CacheStore) -> list[JobPlan]:
    """A search that takes related jobs' winners as priors starts after the related jobs this apply decides
    before it (``Applier.overlaps``): their winners are not known yet, so the plan names them."""
    out: list[JobPlan] = []
    for jp in plans:
        job = jp.job
        earlier = [p.job.name for p in out if p.action in (PlanAction.TUNE, PlanAction.RESELECT)]
        if jp.action == PlanAction.TUNE and (first := related_names(job.name, job.model, job.target, earlier)) \
                and takes_priors(cache, job):
            shown = ", ".join(first[:3]) + (", ..." if len(first) > 3 else "")
            jp = replace(jp, reasons=(*jp.reasons, f"starts after {shown}, decided earlier in this apply, and takes "
                                      "their winners as priors too"))
        out.append(jp)
    return out


def compute_plan(project: Project, cache: CacheStore, lock: Lockfile, only: list[str] | None = None) -> Plan:
    """The plan of ``project``'s jobs (those matching ``only``), losses a trial did not store computed from
    its stored outputs."""
    jobs = project.select_jobs(only)
    plan = make_plan(jobs, cache, lock, project.root, LossLookupFromBlobs(cache, project.store), project.store)
    if only:
        plan.removed = []  # a filtered run never drops other jobs' lock entries
    return plan


def settle(cache: CacheStore, plans: Iterable[JobPlan]) -> int:
    """Store the plans derived in full that found their job up to date (``JobPlan.settle``), so that later
    plans of the same inputs take them (``plan.settled``); how many were stored. Apply calls it once its lock
    is written."""
    rows = [(jp.settle, jp.job.name, {"reused": jp.reused, "candidates": list(jp.candidates)})
            for jp in plans if jp.settle]
    if rows:
        cache.put_settled(rows)
    return len(rows)
