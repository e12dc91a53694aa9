"""bench/tool_time.py --tiny runs end to end (a real apply subprocess, a real bare loop, the synthetic no-op
project): its last line parses, every number in it is finite, times are positive and shares lie in [0, 1] (no
thresholds: CI machines vary)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs bench/tool_time.py: a benchmark, CPU-burning

REPO = Path(__file__).resolve().parents[2]
LAST = re.compile(r"^apply/bare=(\S+) confirm_share=(\S+) outside_measurement=(\S+) "
                  r"noop_plan_adaptive_s=(\S+) noop_apply_adaptive_s=(\S+)$")


def test_tool_time_tiny_last_line_parses_with_finite_positive_numbers(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "tool_time.py"), "--tiny"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    match = LAST.match(lines[-1])
    assert match, lines[-1]
    values = [float(v) for v in match.groups()]
    assert all(math.isfinite(v) for v in values), values
    ratio, confirm_share, outside, noop_plan, noop_apply = values
    assert ratio > 0 and noop_plan > 0 and noop_apply > 0, values
    # shares of apply's wall time: 0 is possible (no challenger beat the default, so nothing was confirmed)
    assert 0 <= confirm_share <= 1 and 0 <= outside <= 1, values
    assert "re-measurements (confirmation)" in proc.stdout and "bare loop over the same routes" in proc.stdout
    for command in ("plan", "apply"):  # as a user runs them, interpreter and imports included, and the baseline
        cli = re.search(rf"^  {command} +(\S+) s; every plan derived in full \(TRT_ROUTES_SETTLED=off\) (\S+) s: "
                        rf"(\S+)x$", proc.stdout, re.MULTILINE)
        assert cli, proc.stdout[-2000:]
        fast, full, ratio = (float(v) for v in cli.groups())
        assert fast > 0 and full > 0 and abs(ratio - full / fast) < 0.01, cli.groups()
        reported = re.search(rf"noop_{command}_adaptive_s=(\S+)", lines[-1])
        assert reported, lines[-1]
        assert abs(float(reported.group(1)) - fast) <= 0.006, (reported.group(1), fast)  # the commands, 2 decimals
