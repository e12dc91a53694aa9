"""Property: after apply, plan is empty — for random switch groups, strategies and tolerances,
with real ONNX Runtime builds."""

from __future__ import annotations

import tempfile
from pathlib import Path

from _project import make_project
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trt_routes.project import open_project
from trt_routes.tune.apply import apply, compute_plan

KNOBS = {
    "-graph_optimization_level": ["disabled", "basic", "extended", "all"],
    "-intra_op_num_threads": ["1", "2"],
    "-allow_spinning": ["0", "1"],
    "-disable:NchwcTransformer": ["off", "on"],
    "-disable:ConvBNFusion": ["off", "on"],
    "-enable_mem_pattern": ["0", "1"],
}


@st.composite
def switch_groups(draw: st.DrawFn) -> str:
    names = draw(st.lists(st.sampled_from(sorted(KNOBS)), min_size=1, max_size=3, unique=True))
    tokens = []
    for name in names:
        values = draw(st.lists(st.sampled_from(KNOBS[name]), min_size=1, max_size=3, unique=True))
        tokens.append(f"{name}={values[0]}" if len(values) == 1 and draw(st.booleans())
                      else f"{name}=[{'|'.join(values)}]")
    return " ".join(tokens)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(group=switch_groups(), mode=st.sampled_from(["fast", "full", "mixed", "adaptive"]),
       threshold=st.sampled_from([1e-12, 1e-4]))
def test_apply_then_plan_is_empty(tiny_models: dict[str, Path], group: str, mode: str, threshold: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        manifest = make_project(Path(tmp) / "p", tiny_models, group=group, mode=mode,
                                tolerance={"checks": [{"metric": "cos", "threshold": threshold}]},
                                measurement={"warmup": 0, "iterations": 2, "repeats": 1, "timeout_s": 60})
        result = apply(open_project(manifest), )
        # with a 1e-12 cosine gate some routes (even all but the default) may fail: apply still locks a winner
        assert result.exit_code in (0, 4)
        project = open_project(manifest)
        with project.open_cache() as cache:
            plan = compute_plan(project, cache, project.read_lock())
        if result.exit_code == 0:
            assert not plan.has_work, [(j.job.name, j.action, j.reasons) for j in plan.jobs]
        else:
            assert all(j.action in ("up-to-date", "reselect") and not j.to_build for j in plan.jobs)
