"""The remaining-time estimate of an apply, from the measured wall time of its finished trials.

Rich's own estimate (TimeRemainingColumn) divides the work left by the completion rate seen in
the last 30 s: with builds that take longer than that (TensorRT) it shows nothing, it needs two
finished trials, and it mixes jobs whose trials cost very different times. Here each job's
trials are priced at that job's mean measured time (build + measure + worker overhead, timed
between reporter events), and jobs not started yet at the mean over everything measured."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from rich.progress import ProgressColumn, Task
from rich.text import Text


def clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class TrialClock:
    """Measured seconds per trial, per job, and the estimate of the time left they give."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.planned: dict[str, int] = {}
        self.caps: dict[str, float] = {}
        self.durations: dict[str, list[float]] = {}
        self.current: str | None = None
        self.last: float | None = None

    def plan(self, builds: Mapping[str, int], caps: Mapping[str, float] | None = None) -> None:
        """``builds``: each job's planned builds; ``caps``: the seconds a job's budget (``max_minutes``) allows
        at most, so its estimate never runs past the point where the budget stops its search."""
        self.planned = {job: n for job, n in builds.items() if n}
        self.caps = dict(caps or {})

    def job_start(self, job: str, builds: int) -> None:
        self.planned[job] = max(self.planned.get(job, 0), builds)
        if self.current is None or not self._left(self.current):
            self.last = self.now()  # the time between jobs is no trial's
        # else it starts beside a job whose trials still run (apply overlaps jobs on free workers): the
        # clock keeps running for the trial in flight
        self.current = job

    def trial_done(self, job: str) -> float | None:
        """Record one finished trial; returns its measured seconds (None before any job_start)."""
        t = self.now()
        seconds = None if self.last is None else t - self.last
        if seconds is not None:
            self.durations.setdefault(job, []).append(seconds)
        self.last = t
        return seconds

    def _left(self, job: str) -> int:
        return max(self.planned.get(job, 0) - len(self.durations.get(job, [])), 0)

    def remaining(self) -> float | None:
        """Seconds left, counting down between trials; None until a trial has been measured."""
        every = [s for ds in self.durations.values() for s in ds]
        if not every:
            return None
        overall = sum(every) / len(every)

        def cost(job: str) -> float:
            ds = self.durations.get(job)
            return sum(ds) / len(ds) if ds else overall

        def left_s(job: str) -> float:
            full = self._left(job) * cost(job)
            if job in self.caps:  # max_minutes stops the job's search: no estimate beyond it
                full = min(full, max(self.caps[job] - sum(self.durations.get(job, [])), 0.0))
            return full

        total = sum(left_s(job) for job in self.planned)
        if self.current is not None and self.last is not None and self._left(self.current):
            # the trial now running: its expected cost less the time it has already run
            running = cost(self.current)
            total += max(running - (self.now() - self.last), 0.0) - running
        return max(total, 0.0)


class EtaColumn(ProgressColumn):
    """'ETA h:mm:ss' from a TrialClock."""

    def __init__(self, clock: TrialClock) -> None:
        super().__init__()
        self.clock = clock

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("ETA 0:00:00", style="progress.remaining")
        return Text(f"ETA {clock_text(self.clock.remaining())}", style="progress.remaining")
