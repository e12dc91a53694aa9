"""Planning: the pure diff of manifest jobs x trial cache x lockfile x environment (diff) and saved plans for
``plan --out`` / ``apply --plan`` (saved). Builds nothing; imports no backend and no executor."""

from trt_routes.plan.diff import JobPlan, Plan, make_plan, outcomes, stale_reasons

__all__ = ["JobPlan", "Plan", "make_plan", "outcomes", "stale_reasons"]
