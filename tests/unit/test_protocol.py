"""The measurement protocol (warm-up until settled, bounded), block-bootstrap intervals and the noise
context recorded with every trial (real ONNX Runtime trials in real workers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _project import make_project

from trt_routes.evidence.measure import _block_bootstrap_medians, timing_stats
from trt_routes.execute import protocol
from trt_routes.execute.protocol import NoiseContext, SettleSpec, settle, timed_samples
from trt_routes.manifest.schema import Measurement, Settle
from trt_routes.project import open_project
from trt_routes.tune.apply import apply


class Warming:
    """A runner whose runs get faster for its first ``cold`` runs, then stay at 1 ms."""

    def __init__(self, cold: int) -> None:
        self.cold = cold
        self.runs = 0

    def time(self, feeds: object, warmup: int, iterations: int, repeats: int) -> list[float]:
        out = []
        for _ in range(warmup + iterations * repeats):
            self.runs += 1
            out.append(1.0 + max(0, self.cold - self.runs) * 0.2)
        return out[warmup:]


def test_settle_runs_windows_until_two_medians_agree() -> None:
    runner = Warming(cold=12)
    meta = settle(lambda n: runner.time(None, 0, n, 1), SettleSpec(window=5, tolerance=0.02, max_runs=100))
    assert meta["settled"] and meta["settle_runs"] == 20  # windows at 1.4, 1.0 (runs 6-10: 1.4..1.0), 1.0
    assert settle(lambda n: [1.0] * n, SettleSpec()) == {}  # window 0: off


def test_settle_is_bounded() -> None:
    runs: list[int] = []

    def flapping(n: int) -> list[float]:  # every other window twice as slow: never settles
        runs.append(n)
        return [2.0 if len(runs) % 2 else 1.0] * n

    meta = settle(flapping, SettleSpec(window=5, tolerance=0.05, max_runs=30))
    assert not meta["settled"] and meta["settle_runs"] == 30 and sum(runs) == 30


def test_timed_samples_follow_the_warm_up() -> None:
    runner = Warming(cold=12)
    samples, meta = timed_samples(runner, {}, 2, 4, 3, SettleSpec(window=5, tolerance=0.02, max_runs=100))
    assert len(samples) == 12 and set(samples) == {1.0} and meta["settled"]


def test_settle_settings_enter_the_protocol_key() -> None:
    assert Measurement().key_fields()["settle"] == {"window": 5, "tolerance": 0.05, "max_runs": 200}
    assert Measurement(settle=False).key_fields()["settle"] is None  # type: ignore[arg-type]
    assert Measurement(settle=True).settle == Settle()  # type: ignore[arg-type]
    assert protocol.settle_spec(None) == SettleSpec() and protocol.settle_spec(Settle()).window == 5


def test_block_bootstrap_covers_differences_between_repeats() -> None:
    rng = np.random.default_rng(0)
    repeats = [1.0, 1.6, 1.1, 1.5, 1.2]  # session levels: the repeats disagree
    samples = [level * float(np.exp(rng.normal(0, 0.01))) for level in repeats for _ in range(20)]
    iid = timing_stats(samples)
    blocks = timing_stats(samples, block=20)
    assert blocks.median == iid.median
    assert blocks.ci_high - blocks.ci_low > 3 * (iid.ci_high - iid.ci_low)
    assert timing_stats(samples[:20], block=20) == timing_stats(samples[:20])  # one block: plain bootstrap


def test_few_blocks_give_the_exact_bootstrap_interval() -> None:
    """Five repeats have only 126 distinct resamples: the interval is read off their exact distribution
    (no draws, so no seed), and matches what very many seeded draws converge to."""
    rng = np.random.default_rng(1)
    samples = [level * float(np.exp(rng.normal(0, 0.02))) for level in (1.0, 1.3, 1.1, 1.2, 1.05) for _ in range(20)]
    exact = timing_stats(samples, block=20, seed=0)
    assert timing_stats(samples, block=20, seed=7) == exact
    draws = _block_bootstrap_medians(np.asarray(samples).reshape(5, 20), 200_000, 0)
    low, high = np.quantile(draws, [0.025, 0.975])
    assert exact.ci_low == pytest.approx(low, rel=2e-3) and exact.ci_high == pytest.approx(high, rel=2e-3)
    # seven repeats have 1716 distinct resamples, more than the 500 draws: seeded draws again
    seven = samples + samples[:40]
    assert timing_stats(seven, block=20, seed=0) != timing_stats(seven, block=20, seed=7)


def test_noise_context_without_a_gpu_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # import pynvml raises ImportError
    ctx = NoiseContext({"kind": "gpu", "device": {"device": "gpu"}})
    sum(range(100_000))
    meta = ctx.finish()
    assert "gpu" not in meta and meta["cpu_count"] >= 1
    assert 0.0 <= meta.get("cpu_busy", 0.0) <= 1.0 and 0.0 <= meta.get("cpu_busy_others", 0.0) <= 1.0


def test_trials_store_the_warm_up_and_the_noise_context(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, group="-intra_op_num_threads=[1]", mode="full",
                            measurement={"warmup": 1, "iterations": 4, "repeats": 2, "timeout_s": 60,
                                         "settle": {"window": 3, "tolerance": 0.5, "max_runs": 12}})
    assert apply(open_project(manifest)).exit_code == 0
    project = open_project(manifest)
    with project.open_cache() as cache:
        trials = cache.all_trials()
    assert trials and all(len(t.samples) == 8 for t in trials)
    for t in trials:
        m = t.meta
        assert m.settle_runs is not None and 3 <= m.settle_runs <= 12 and m.settle_medians_ms
        assert m.loadavg is not None and m.cpu_count  # cpu_busy needs at least one clock tick (10 ms)
        assert 0.0 <= (m.cpu_busy_others or 0.0) <= (1.0 if m.cpu_busy is None else m.cpu_busy) <= 1.0
        assert not m.extra, m.extra  # every key the worker writes is a field of TrialMeta
        assert t.ci_low is not None and t.ci_high is not None and t.ci_low <= t.median_ms <= t.ci_high  # type: ignore[operator]


def test_noise_context_reads_the_visible_gpu_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in pynvml (no GPU here): the reading names the device CUDA_VISIBLE_DEVICES points at."""
    from types import SimpleNamespace

    asked: list[object] = []
    clocks = iter([1980, 2619, 1755, 2619])
    fake = SimpleNamespace(
        NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: asked.append(("index", i)) or "h",
        nvmlDeviceGetHandleByUUID=lambda u: asked.append(("uuid", u)) or "h",
        nvmlDeviceGetTemperature=lambda h, kind: 41,
        nvmlDeviceGetClockInfo=lambda h, kind: next(clocks),
        nvmlDeviceGetPowerUsage=lambda h: 123456,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=87),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 4,
    )
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    ctx = NoiseContext({"kind": "gpu", "device": {"device": "gpu", "gpu_name": "NVIDIA H200"}})
    meta = ctx.finish()
    assert meta["gpu"] == {"temp_c": [41, 41], "sm_clock_mhz": [1980, 1755], "mem_clock_mhz": [2619, 2619],
                           "power_w": [123.5, 123.5], "util_pct": [87, 87], "throttle_reasons": [4, 4]}
    assert asked == [("index", 3), ("index", 3)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    NoiseContext({"kind": "gpu"}).finish()
    assert asked[-1] == ("uuid", "GPU-1234")
    assert "gpu" not in NoiseContext({"kind": "cpu"}).finish()  # CPU targets never touch NVML
