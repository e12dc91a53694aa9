"""The one speedup a job reports: the side-by-side confirmed ratio with its interval where a confirmation
ran, else the raw ratio of the two trials' medians, labelled so. The summary table, the report and explain
all show this, never the raw ratio under the confirmed name (they disagreed: 3.75x raw, 1.38x side by side)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trt_routes.routes import DEFAULT_ROUTE
from trt_routes.selection.rank import Selection


@dataclass(frozen=True)
class Headline:
    speedup: float | None  # default time / chosen time (> 1: the winner is faster)
    low: float | None  # the interval of the confirmed ratio, as a speedup (None: raw)
    high: float | None
    confirmed: bool  # measured side by side against the default in one worker

    def text(self) -> str:
        if self.speedup is None:
            return "-"
        if not self.confirmed:
            return f"{self.speedup:.2f}x (raw medians, not confirmed side by side)"
        if self.low is not None and self.high is not None and math.isfinite(self.high):
            return f"{self.speedup:.2f}x [{self.low:.2f}-{self.high:.2f}] (side by side)"
        return f"{self.speedup:.2f}x (side by side)"

    def lock_fields(self) -> dict[str, Any]:
        """The lock timing's ``speedup_basis`` and ``speedup_ci`` (null unless confirmed); nothing without a
        speedup."""
        if self.speedup is None:
            return {}
        return {"speedup_basis": "side-by-side" if self.confirmed else "raw-medians",
                "speedup_ci": [self.low, self.high] if self.confirmed and self.low is not None else None}

    def to_json(self) -> dict[str, Any]:
        return {"speedup": self.speedup, "interval": [self.low, self.high] if self.confirmed else None,
                "confirmed": self.confirmed, "basis": "side-by-side" if self.confirmed else "raw-medians"}


def _result_for(confirmation: dict[str, Any], route: str) -> dict[str, Any] | None:
    for key in ("vs_default",):
        block = confirmation.get(key) or {}
        for r in block.get("results") or []:
            if isinstance(r, dict) and r.get("route") == route:
                return r
    return None


def headline(sel: Selection | None) -> Headline:
    """``sel``'s speedup over the default route, confirmed where a confirmation measured the winner."""
    if sel is None or sel.winner is None:
        return Headline(None, None, None, False)
    conf = sel.confirmation or {}
    if sel.winner == DEFAULT_ROUTE:  # confirmed when challengers were re-measured against it and lost
        return Headline(1.0, None, None, bool(conf.get("vs_default")))
    result = _result_for(conf, sel.winner) if conf else None
    ratio = result.get("ratio") if result else None
    if isinstance(ratio, (int, float)) and ratio > 0:
        lo, hi = (result or {}).get("ci") or [None, None]
        low = 1 / hi if isinstance(hi, (int, float)) and hi > 0 and math.isfinite(hi) else None
        high = 1 / lo if isinstance(lo, (int, float)) and lo > 0 else None
        return Headline(1 / ratio, low, high, True)
    return Headline(sel.speedup, None, None, False)
