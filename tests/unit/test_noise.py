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


def test_a_window_too_short_to_judge_is_stretched_when_the_verdict_refuses() -> None:
    """Real processes: CPU burners on every CPU, then a 5 ms busy loop under a NoiseContext. /proc/stat
    counts 10 ms ticks: ``judge=True`` (measurement.busy: refuse) reads until there are enough to tell."""
    import os
    import subprocess
    import sys
    import time

    from trt_routes.execute.protocol import JUDGE_TICKS, NoiseContext

    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(len(os.sched_getaffinity(0)))]
    try:
        time.sleep(0.3)  # the burners are spinning
        ctx = NoiseContext()
        t = time.perf_counter()
        while time.perf_counter() - t < 0.005:
            pass
        meta = ctx.finish(judge=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert meta["cpu_ticks"] >= JUDGE_TICKS, meta
    assert busy_reason(meta, Busy(max_others=0.25)) is not None, meta


def test_a_quiet_window_is_not_stretched_into_a_busy_verdict() -> None:
    import time

    from trt_routes.execute.protocol import JUDGE_TICKS, NoiseContext

    ctx = NoiseContext()
    time.sleep(0.002)
    meta = ctx.finish(judge=True)
    assert meta["cpu_ticks"] >= JUDGE_TICKS
    assert busy_reason(meta, Busy(max_others=0.25)) is None, meta
