"""What plan advises for a job whose cached trials hold no eligible route: the advice follows the cause
(all crashed, all failed the accuracy gate, or a mix), so a crash is never answered with "loosen tolerance"."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from trt_routes.cache.store import TrialRecord
from trt_routes.evidence import TrialStatus

#: statuses a retry may change (the machine or a flaky run), as opposed to build errors and accuracy results
RETRYABLE = (TrialStatus.CRASHED, TrialStatus.TIMEOUT)


def no_eligible_advice(job: str, tolerance: str, trials: Mapping[str, TrialRecord], candidates: tuple[str, ...]) -> str:
    """One line: why no cached route is eligible and what to do about it."""
    statuses = Counter(trials[r].status for r in candidates if r in trials)
    failed_runs = sum(statuses[s] for s in (*RETRYABLE, TrialStatus.BUILD_ERROR))
    counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    head = f"no eligible route among {len(candidates)} cached trials ({counts})"
    if failed_runs and failed_runs == sum(statuses.values()):
        first = next((trials[r] for r in candidates if r in trials and trials[r].status != TrialStatus.OK), None)
        error = f"; first error: {first.error.splitlines()[0][:200]}" if first is not None and first.error else ""
        if any(statuses[s] for s in RETRYABLE):
            return (f"{head}: none ran to the end{error}; fix the cause, then run `trt-routes apply --retry-failed "
                    f"--only {job}`")
        return f"{head}: every route failed to build{error}; change the switch group or the build settings"
    if failed_runs:
        return (f"{head}: the routes that ran failed the accuracy gate: loosen tolerance '{tolerance}' or change "
                f"the switch group; `trt-routes apply --retry-failed --only {job}` re-runs the crashed ones")
    return f"{head}: loosen tolerance '{tolerance}' or change the switch group"
