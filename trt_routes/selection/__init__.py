"""Selection: the pure ranking of a job's trials (rank), side-by-side confirmation against the default
route (confirm) and the final decision that combines them (final). Pure functions over trials: no backend, no
executor, no writes."""

from trt_routes.selection.confirm import Remeasurement, Request, resolve
from trt_routes.selection.rank import DEFAULT_ROUTE, Selection, gate, select
from trt_routes.selection.sequential import (
    Stopping,
    median_interval,
    run_sequential,
    schedule,
    spread_of,
    turn_size,
    turn_target,
)

__all__ = ["DEFAULT_ROUTE", "Remeasurement", "Request", "Selection", "Stopping", "gate",
           "median_interval", "resolve", "run_sequential", "schedule", "select", "spread_of", "turn_size",
           "turn_target"]
