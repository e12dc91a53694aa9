"""What the worker reads about memory: a reading that cannot be right is absent, never a wrong small number."""

from __future__ import annotations

import pytest

from trt_routes.backends.meters import MemoryMeter


def test_a_peak_under_half_the_engines_bytes_is_absent_not_small() -> None:
    meter = MemoryMeter({"kind": "cpu"})
    if meter.before is None:
        pytest.skip("this host refuses to reset the peak (/proc/self/clear_refs)")
    block = bytearray(64 * 2**20)  # touched: 64 MiB resident
    block[:: 4096] = b"x" * len(block[:: 4096])
    read = meter.finish(engine_bytes=16 * 2**20)
    assert read["device_memory_mb"] >= 32 and read["memory_source"] == "VmHWM - VmRSS before load"
    # an engine of 1 TB cannot have run in this peak: the meter missed its allocation, so nothing is said
    assert MemoryMeter({"kind": "cpu"}).finish(engine_bytes=2**40) == {}
    del block
