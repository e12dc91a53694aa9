"""The busy-host verdict from a trial's recorded noise context (trt_routes/noise.py)."""

from __future__ import annotations

from trt_routes.manifest.schema import Busy, Measurement
from trt_routes.noise import busy_reason, busy_summary, others_share


def test_a_quiet_trial_has_no_verdict() -> None:
    assert busy_reason({"cpu_busy_others": 0.1, "loadavg": 0.4, "cpu_count": 2}, Busy()) is None


def test_a_busy_trial_says_how_busy_against_the_limit() -> None:
    reason = busy_reason({"cpu_busy_others": 0.78, "loadavg": 9.5, "cpu_count": 2}, Busy())
    assert reason is not None
    assert "78% of the CPUs" in reason and "limit 25%" in reason and "load 9.5 on 2 CPUs" in reason


def test_ignore_and_missing_readings_give_no_verdict() -> None:
    assert busy_reason({"cpu_busy_others": 0.9}, Busy(action="ignore")) is None
    assert busy_reason({}, Busy()) is None
    assert others_share({"cpu_busy_others": True}) is None  # never a bool read as a share


def test_the_summary_counts_the_busy_trials_of_a_job() -> None:
    metas = [{"cpu_busy_others": x} for x in (0.1, 0.3, 0.65, 0.2)]
    line = busy_summary(metas, Busy())
    assert line is not None and line.startswith("2 of 4 trials") and "up to 65%" in line
    assert busy_summary(metas, Busy(max_others=0.7)) is None


def test_the_manifest_takes_a_word_or_a_mapping_and_keeps_it_out_of_the_key() -> None:
    m = Measurement.model_validate({"busy": "refuse"})
    assert m.busy.action == "refuse" and m.busy.max_others == 0.25
    assert Measurement.model_validate({"busy": {"max_others": 0.5}}).busy.action == "warn"
    assert "busy" not in m.key_fields()
