"""Was a trial measured on a busy host? The verdict from the noise context every trial records
(``execute/protocol.py``: the share of its CPUs other processes kept busy while it was timed, over
``cpu_ticks`` clock ticks of /proc/stat), against the manifest's ``measurement.busy``. Pure: used by apply
(warn or refuse), explain and the report.

/proc/stat counts whole 10 ms ticks: a trial of a few milliseconds on one pinned core reads 0%, 25% or 50%
as one stray tick lands in its window or not. A trial is judged alone when its window held ``JUDGE_TICKS``
ticks (``refuse`` stretches short windows to that, ``execute/protocol.py``); shorter ones are judged
together (``Pooled``): their ticks add up, and the job's trials that were too short to tell alone say
together whether the host was busy."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: a worker imports this module (JUDGE_TICKS) and needs no manifest
    from trt_routes.evidence.meta import TrialMeta
    from trt_routes.manifest.schema import Busy

#: Clock ticks (all the trial's CPUs together) a window needs for its share to be judged alone: one tick
#: is then at most 5% of it.
JUDGE_TICKS = 20


def judged_alone(meta: TrialMeta) -> bool:
    """Whether the trial's own window is long enough to judge it (older trials, without ticks: yes)."""
    return meta.cpu_ticks is None or meta.cpu_ticks >= JUDGE_TICKS


def _reason(share: float, busy: Busy, meta: TrialMeta, what: str) -> str:
    load, cores = meta.loadavg, meta.cpu_count
    extra = f", load {load:g} on {cores} CPUs" if load is not None and cores else ""
    return f"other processes kept {share:.0%} of the CPUs busy while {what} (limit {busy.max_others:.0%}{extra})"


def busy_reason(meta: TrialMeta, busy: Busy) -> str | None:
    """Why the trial's timing is suspect, or None when the host was quiet enough, busy checks are off, or its
    window was too short to judge alone (``Pooled`` judges those)."""
    share = meta.cpu_busy_others
    if busy.action == "ignore" or share is None or share <= busy.max_others or not judged_alone(meta):
        return None
    return _reason(share, busy, meta, "it was timed")


@dataclass
class Pooled:
    """The trials too short to judge alone, added up (per job): busy and total ticks of their windows."""

    others: float = 0.0
    total: float = 0.0
    trials: int = 0

    def add(self, meta: TrialMeta) -> None:
        share, n = meta.cpu_busy_others, meta.cpu_ticks
        if share is not None and n is not None and n < JUDGE_TICKS:
            self.others += share * n
            self.total += n
            self.trials += 1

    @property
    def share(self) -> float | None:
        """Their others' share, once their ticks together are enough to judge."""
        return self.others / self.total if self.total >= JUDGE_TICKS else None

    def reason(self, busy: Busy, meta: TrialMeta) -> str | None:
        share = self.share
        if busy.action == "ignore" or share is None or share <= busy.max_others:
            return None
        return _reason(share, busy, meta, f"its {self.trials} short trials were timed, together")


def busy_summary(metas: Iterable[TrialMeta], busy: Busy) -> str | None:
    """One line for a job: how many of its trials were measured on a busy host, and the worst share (the
    short trials judged together)."""
    alone: list[float] = []
    pooled = Pooled()
    for meta in metas:
        share = meta.cpu_busy_others
        if share is None:
            continue
        if judged_alone(meta):
            alone.append(share)
        else:
            pooled.add(meta)
    if busy.action == "ignore":
        return None
    over = [s for s in alone if s > busy.max_others]
    parts = []
    if over:
        parts.append(f"{len(over)} of {len(alone)} trials were timed while other processes kept more than "
                     f"{busy.max_others:.0%} of the CPUs busy (up to {max(over):.0%})")
    if pooled.share is not None and pooled.share > busy.max_others:
        parts.append(f"{pooled.trials} trials too short to judge alone were timed while other processes kept "
                     f"{pooled.share:.0%} of the CPUs busy, together (more than {busy.max_others:.0%})")
    if not parts:
        return None
    return "; ".join(parts) + (": their timings carry that noise; re-run on a quiet host, or set "
                               "measurement.busy: refuse")
