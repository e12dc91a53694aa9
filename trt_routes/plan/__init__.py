"""Planning: the pure diff of manifest jobs x trial cache x lockfile x environment (diff) and saved plans for
``plan --out`` / ``apply --plan`` (saved), and each job's decision as a value, stored by apply and rendered by
explain (decision). Builds nothing; imports no backend and no executor."""

from trt_routes.plan.diff import JobPlan, Plan, make_plan, outcomes, stale_reasons

__all__ = ["JobPlan", "Plan", "make_plan", "outcomes", "stale_reasons"]
