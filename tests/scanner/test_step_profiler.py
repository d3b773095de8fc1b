"""scanner/step_profiler.py: Kineto's `USDT: ... profiler_start` lines stay out of the output (they filled
`benchmark.py verify`'s and every experiment's stderr.log, issue AD); whatever else is written passes."""

from __future__ import annotations

import os

import torch

from scanner.step_profiler import PROBE_LINE, StepProfiler, without_probe_lines


def test_kinetos_probe_lines_are_what_the_filter_matches():
    assert PROBE_LINE.match("USDT:2026-11-28 13:00:06 29047:29047 SyncActivityProfilerHandler.cpp:52] "
                            "profiler_start\n")
    assert PROBE_LINE.match("STAGE:2026-11-28 13:00:21 29061:29061 SyncActivityProfilerHandler.cpp:51] Completed")
    assert not PROBE_LINE.match("ERROR:2026-11-28 13:00:21 1:1 CuptiActivityApi.cpp:9] CUPTI failed")
    assert not PROBE_LINE.match("USDT is a tracing technology\n")


def test_a_profiled_step_writes_no_probe_line_and_keeps_the_rest(capfd):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):  # the control: torch prints them
        torch.ones(3).add_(1)
    raw = capfd.readouterr().err
    profiler = StepProfiler("cpu", collectives=False)
    profiler.start()
    torch.ones(3).add_(1)
    profiler.stop(world_size=1)
    with without_probe_lines():
        os.write(2, b"a line of its own\n")
    err = capfd.readouterr().err
    assert "USDT:" in raw and "profiler_start" in raw  # the pinned torch prints them: the filter has work to do
    assert "USDT:" not in err and "profiler_start" not in err
    assert err == "a line of its own\n"
