"""The busy-host verdict from a trial's recorded noise context (trt_routes/evidence/noise.py)."""

from __future__ import annotations

from trt_routes.evidence.meta import TrialMeta
from trt_routes.evidence.noise import busy_reason, busy_summary
from trt_routes.manifest.schema import Busy, Measurement

M = TrialMeta.from_json


def test_a_quiet_trial_has_no_verdict() -> None:
    assert busy_reason(M({"cpu_busy_others": 0.1, "loadavg": 0.4, "cpu_count": 2}), Busy()) is None


def test_a_busy_trial_says_how_busy_against_the_limit() -> None:
    reason = busy_reason(M({"cpu_busy_others": 0.78, "loadavg": 9.5, "cpu_count": 2}), Busy())
    assert reason is not None
    assert "78% of the CPUs" in reason and "limit 25%" in reason and "load 9.5 on 2 CPUs" in reason


def test_ignore_and_missing_readings_give_no_verdict() -> None:
    assert busy_reason(M({"cpu_busy_others": 0.9}), Busy(action="ignore")) is None
    assert busy_reason(M({}), Busy()) is None
    assert TrialMeta.from_json({"cpu_busy_others": True}).cpu_busy_others is None  # never a bool read as a share


def test_the_summary_counts_the_busy_trials_of_a_job() -> None:
    metas = [M({"cpu_busy_others": x}) for x in (0.1, 0.3, 0.65, 0.2)]
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

    from trt_routes.evidence.noise import JUDGE_TICKS
    from trt_routes.execute.protocol import NoiseContext

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
    assert busy_reason(M(meta), Busy(max_others=0.25)) is not None, meta


def test_a_trial_too_short_to_judge_alone_is_judged_with_the_jobs_other_short_trials() -> None:
    """/proc/stat's 10 ms ticks: one stray tick in a 4-tick window reads 25%. Such a trial is not judged
    alone; a job's short trials add their ticks up, and together they say whether the host was busy."""
    from trt_routes.evidence.noise import JUDGE_TICKS, Pooled

    stray = {"cpu_busy_others": 0.25, "cpu_ticks": 4}
    assert busy_reason(M(stray), Busy()) is None  # 1 tick of 4: not evidence
    quiet = Pooled()
    for meta in [stray] + [{"cpu_busy_others": 0.0, "cpu_ticks": 4}] * 5:
        quiet.add(M(meta))
    assert quiet.total >= JUDGE_TICKS and quiet.reason(Busy(), M(stray)) is None  # 1 tick of 24: quiet
    busy = Pooled()
    for _ in range(6):
        busy.add(M({"cpu_busy_others": 0.5, "cpu_ticks": 4}))
    reason = busy.reason(Busy(), M({"cpu_count": 1, "loadavg": 2.0}))
    assert reason is not None and "50%" in reason and "6 short trials" in reason
    assert Pooled().reason(Busy(), M({})) is None  # nothing to judge yet
    short, long = M({"cpu_busy_others": 0.5, "cpu_ticks": 4}), M({"cpu_busy_others": 0.0, "cpu_ticks": 40})
    line = busy_summary([short] * 6 + [long], Busy())
    assert line is not None and "6 trials too short to judge alone" in line


def test_a_pinned_worker_reads_only_its_own_cores() -> None:
    """Real processes: a worker pinned to one core while a burner spins on the other (a pool's sibling
    worker) reads its core as quiet; the burner on its own core is noise."""
    import os
    import subprocess
    import sys
    import time

    from trt_routes.execute.protocol import NoiseContext

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        import pytest

        pytest.skip("needs two cores")
    mine, other = cores[0], cores[1]
    saved = os.sched_getaffinity(0)

    def measure(burn_on: int | None) -> dict:
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass" if burn_on is not None else ""])
        if burn_on is not None:
            os.sched_setaffinity(burner.pid, {burn_on})
        os.sched_setaffinity(0, {mine})
        try:
            time.sleep(0.3)
            ctx = NoiseContext()
            time.sleep(0.3)  # asleep: this process uses nothing; only others can fill the core
            return ctx.finish()
        finally:
            os.sched_setaffinity(0, saved)
            burner.kill()
            burner.wait()

    # other processes of this machine (another test worker) may fill the core for a moment: the sibling
    # reading is taken again, a few times, until the core was quiet around it
    for _ in range(5):
        quiet = measure(None)["cpu_busy_others"] <= 0.3
        sibling = measure(other)
        if quiet and sibling["cpu_busy_others"] <= 0.3:
            break
    else:
        import pytest

        pytest.skip("this machine keeps the core busy: the test needs a quiet moment to show the difference")
    same = measure(mine)
    assert sibling["cpu_count"] == 1 == same["cpu_count"]
    # the burner on this core fills it (this process sleeps); on the other core it is not seen at all (what
    # remains is whatever else this machine runs)
    assert same["cpu_busy_others"] > 0.8 and same["cpu_busy_others"] > sibling["cpu_busy_others"] + 0.3, (
        same, sibling)
    assert busy_reason(M(same), Busy()) is not None
