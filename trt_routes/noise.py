"""Was a trial measured on a busy host? The verdict from the noise context every trial records
(``execute/protocol.py``: the share of all CPUs other processes kept busy while it was timed), against
the manifest's ``measurement.busy``. Pure: used by apply (warn or refuse), explain and the report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trt_routes.manifest.schema import Busy


def others_share(meta: Mapping[str, Any]) -> float | None:
    """The share of all CPUs other processes kept busy while the trial was timed (None: not recorded)."""
    value = meta.get("cpu_busy_others")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def busy_reason(meta: Mapping[str, Any], busy: Busy) -> str | None:
    """Why the trial's timing is suspect, or None when the host was quiet enough (or busy checks are off)."""
    share = others_share(meta)
    if busy.action == "ignore" or share is None or share <= busy.max_others:
        return None
    load = meta.get("loadavg")
    cores = meta.get("cpu_count")
    extra = f", load {load:g} on {cores} CPUs" if isinstance(load, (int, float)) and cores else ""
    return (f"other processes kept {share:.0%} of the CPUs busy while it was timed (limit "
            f"{busy.max_others:.0%}{extra})")


def busy_summary(metas: Iterable[Mapping[str, Any]], busy: Busy) -> str | None:
    """One line for a job: how many of its trials were measured on a busy host, and the worst share."""
    shares = [s for s in (others_share(m) for m in metas) if s is not None]
    over = [s for s in shares if s > busy.max_others]
    if busy.action == "ignore" or not over:
        return None
    return (f"{len(over)} of {len(shares)} trials were timed while other processes kept more than "
            f"{busy.max_others:.0%} of the CPUs busy (up to {max(over):.0%}): their timings carry that noise; "
            "re-run on a quiet host, or set measurement.busy: refuse")
