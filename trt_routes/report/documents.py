"""The JSON contract as pydantic models: one per ``--json`` output (``report/formats.py`` names them).

Each document is checked against its model when it is written (a key the model lacks, a missing key or a
wrong type is a bug here, not output), and ``trt-routes schema --format NAME`` prints the schema pydantic
generates from the same model: the output and its schema cannot drift apart. Every object is closed (no key
but those named) and lists every key, ``null`` or empty where nothing applies, except the records a document
passes through as they are stored (a lock entry, a decision history, a signature's fields, a trial's facts),
which are open objects. Where a report already is a typed value (the cache maintenance and sharing reports),
the model is that value's own dataclass.

Imported only when a document is written or a schema printed: ``schema --format list`` and ``--help`` do not
pay for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trt_routes.jobs import PlanAction

if TYPE_CHECKING:  # imported by model(), only for the cache formats: share/ takes a third of a second
    from trt_routes.share.merge import MergeReport

Count = Annotated[int, Field(ge=0)]
#: a number that may be null: a non-finite float is written as null (formats.strict)
Num = float | None
Record = dict[str, Any]  # passed through as stored: open


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


# -- error, validate ---------------------------------------------------------------------------------
class Where(Doc):
    message: str
    file: str | None
    line: int | None
    column: int | None
    hint: str | None


class ErrorJson(Where):
    code: Annotated[int, Field(ge=1)]
    error: str
    problems: list[Where]


class ValidatedJob(Doc):
    job: str
    backend: str
    blocked: str | None


class ValidateJson(Doc):
    manifest: str
    ok: Literal[True]
    models: Count
    jobs: list[ValidatedJob]


# -- plan, apply -------------------------------------------------------------------------------------
class JobPlanJson(Doc):
    job: str
    action: PlanAction
    reasons: list[str]
    to_build: list[str]
    reused: Count
    pending: str | None
    candidates: Count
    at_most: int | None


class PlanJson(Doc):
    jobs: list[JobPlanJson]
    removed: list[str]
    counts: dict[str, Count]
    builds: Count
    has_work: bool


class AppliedJob(Doc):
    """A job of a search apply: trials built and reused, and the entry locked (null if none was)."""

    job: str
    action: PlanAction
    built: Count
    reused: Count
    error: str | None
    lock: Record | None


class FrozenJobJson(Doc):
    """A job of ``apply --frozen``: the locked route rebuilt (or reused) and checked against the lock."""

    job: str
    route: str
    built: Count
    reused: bool
    locked_sha256: str
    engine_sha256: str
    engine_path: str
    digest: str
    signature_drift: list[str]
    checks: list[str]
    median_ms: Num
    locked_ms: Num
    error: str | None


class Skipped(Doc):
    job: str
    reason: str


class ApplyJson(Doc):
    exit_code: Count
    built: Count
    dry_run: bool
    frozen: bool
    jobs: list[AppliedJob | FrozenJobJson]
    lock_written: bool = False
    plan: PlanJson | None = None  # the plan applied (null with --frozen)
    skipped: list[Skipped] = []  # --frozen: jobs without hardware here, blocked
    record: str | None = None  # --frozen: the record file written
    routes: dict[str, list[str]] | None = None  # --dry-run: the routes each job would build


# -- status, explain, layers, profile, report --------------------------------------------------------
class StatusRow(Doc):
    job: str
    state: Literal["ok", "no-lock", "invalid-lock", "missing-engine", "digest-mismatch", "stale",
                   "not-in-cache", "blocked", "orphan-lock"]
    detail: str
    route: str | None


class StatusJson(Doc):
    ok: bool
    jobs: list[StatusRow]


class Speedup(Doc):
    speedup: Num
    interval: list[Num] | None
    confirmed: bool
    basis: Literal["side-by-side", "raw-medians"]


class Baseline(Doc):
    route: str | None
    source: str | None
    median_ms: Num
    speedup: Num


class MarginJson(Doc):
    route: str
    ratio: Num
    ci: list[Num]
    method: str


class ExplainedTrial(Doc):
    route: str
    status: str
    median_ms: Num
    ci_ms: list[Num]
    losses: dict[str, dict[str, Num]]
    build_s: Num
    error: str | None
    created_at: str
    host: str
    source: str
    verdict: str
    facts: Record


class Dominated(Doc):
    by: str
    reason: str


class ParetoJson(Doc):
    axes: list[str]
    front: list[str]
    dominated: dict[str, Dominated]


class ExplainJson(Doc):
    job: str
    rule: str | None
    summary: str
    decision: list[str]
    winner: str | None
    default_ms: Num
    chosen_ms: Num
    speedup: Speedup | None
    baseline: Baseline
    margin: MarginJson | None
    tolerance: Record
    trials: list[ExplainedTrial]
    signature: dict[str, str] | None
    provenance: Record
    lock: Record | None
    history: list[Record]
    decided: Record
    trials_under_other_signatures: Count
    older_groups: list[Record]
    objective: Record | None
    pareto: ParetoJson | None


class Side(Doc):
    median_ms: Num
    layers_ms: float
    wall_ms: Num
    runs: Count
    note: str


class LayerRowJson(Doc):
    name: str
    winner_name: str | None
    op: str
    default_ms: Num
    winner_ms: Num
    diff_ms: float
    share: Num
    paired_by: str | None
    default_where: str | None
    winner_where: str | None


class LayersJson(Doc):
    job: str
    default_route: str
    winner_route: str
    why: str
    same_layers: bool
    gain_ms: float
    default: Side
    winner: Side
    rows: list[LayerRowJson]
    notes: list[str]


class LayerJson(Doc):
    name: str
    op: str
    where: str
    ms: float


class ProfileJson(Doc):
    job: str
    backend: str
    route: str
    runs: Count
    wall_ms: Num
    layers_ms: float
    dropped: Count
    note: str
    layers: list[LayerJson]


class ReportJson(Doc):
    html: str
    jobs: Count
    with_trials: Count


# -- lock, knobs, trials -----------------------------------------------------------------------------
class LockShowJson(Doc):
    job: str
    entry: Record  # the tuning.lock entry as written: a newer trt-routes may have added keys
    serving: Record


class Mismatch(Doc):
    job: str
    kind: str
    details: list[str]


class LockCheckJson(Doc):
    matches: bool
    notes: list[str]
    mismatches: list[Mismatch]


class KnobJson(Doc):
    option: str
    values: list[Any] | None  # null: an open knob (any value of its type)
    default: Any
    help: str | None
    phase: str


class KnobsJson(Doc):
    backend: str
    version: str
    tuner_version: str | None
    knobs: list[KnobJson]


class TrialRow(Doc):
    """One trial, flat: each loss is its own ``loss:OUTPUT:METRIC`` key (``api.Trial.to_dict``)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Num] = Field(init=False)

    job: str
    route: str
    status: str
    median_ms: Num
    ci_low_ms: Num
    ci_high_ms: Num
    mean_ms: Num
    stdev_ms: Num
    build_s: Num
    measure_s: Num
    backend: str
    signature: str
    engine_sha256: str
    error: str
    source: str
    host: str
    created_at: str
    id: str


class TrialsJson(Doc):
    trials: list[TrialRow]


# -- cache -------------------------------------------------------------------------------------------
class VerifyJson(Doc):
    ok: bool
    integrity: str
    blobs_checked: Count
    corrupt_blobs: list[str]
    bad_rows: list[str]
    unshareable_rows: list[str]
    missing_lock_engines: list[str]


class ImportJson(Doc):
    reports: list[MergeReport]


MODELS: dict[str, type[Doc]] = {
    "error": ErrorJson, "validate": ValidateJson, "plan": PlanJson, "apply": ApplyJson, "status": StatusJson,
    "explain": ExplainJson, "layers": LayersJson, "profile": ProfileJson, "report": ReportJson,
    "lock-show": LockShowJson, "lock-check": LockCheckJson, "knobs": KnobsJson, "trials": TrialsJson,
    "cache-verify": VerifyJson,
}


def model(name: str) -> Any:
    """Format ``name``'s model: a model above, or a sharing report's own dataclass (checked the same way:
    ``share.AS_DOCUMENT``)."""
    if name in MODELS:
        return MODELS[name]
    from trt_routes.share.maintenance import GcReport, RecoverReport, Stats
    from trt_routes.share.merge import ExportReport, MergeReport
    from trt_routes.share.remote import PullReport, PushReport

    ImportJson.model_rebuild(_types_namespace={"MergeReport": MergeReport})
    return {"cache-stats": Stats, "cache-gc": GcReport, "cache-export": ExportReport, "cache-import": ImportJson,
            "cache-push": PushReport, "cache-pull": PullReport, "cache-recover": RecoverReport}[name]
