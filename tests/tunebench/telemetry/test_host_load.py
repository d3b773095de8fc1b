"""A CPU run on a busy host says so (issue W: two processes showed 7-20x the per-device throughput of one): the
host's load against its cores is a column of every row, a `host loaded` warning when it exceeded them, and CPU
runs' OpenMP threads sleep at barriers instead of fighting other processes for the cores."""

from __future__ import annotations

import time

import pytest

from tests.fixtures.harness import tiny_scenario, write_inputs
from tunebench import cli
from tunebench.telemetry import host_load
from tunebench.telemetry.host_load import HostLoadTracker


@pytest.mark.parametrize("device,loads,warned", [
    ("cpu", [0.5, 3.5, 1.0], True),  # the highest sample counts, not the last
    ("cpu", [1.0, 2.0], False),  # at the cores exactly: not beyond them
    ("cuda", [9.0], False),  # a GPU run's times do not hang on the host's cores: a column, no warning
])
def test_the_highest_load_during_the_run_against_the_cores(monkeypatch, tmp_path, device, loads, warned):
    samples = iter(loads)
    last = {}

    def getloadavg():
        last["value"] = next(samples, last.get("value", loads[-1]))
        return last["value"], 0.0, 0.0

    monkeypatch.setattr(host_load.os, "getloadavg", getloadavg)
    monkeypatch.setattr(host_load.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(host_load, "SAMPLE_SECONDS", 0.001)
    tracker = HostLoadTracker()
    watch = tracker.around(device, [], tmp_path)
    with watch:
        deadline = time.monotonic() + 10
        while last.get("value") != loads[-1] and time.monotonic() < deadline:  # until the sampler took them all
            time.sleep(0.001)
    columns = tracker.columns(watch, {"measurement_warning": "step time spread 9 %"}, tmp_path)
    assert columns["host_cpu_count"] == 2 and columns["host_load_avg_1m"] == max(loads)
    if warned:
        assert columns["measurement_warning"] == (
            "step time spread 9 %; host loaded: the 1-minute load average reached 3.50 on 2 cores during the run "
            "(other processes shared the CPU: its times are not comparable)")
    else:
        assert "measurement_warning" not in columns


def test_no_load_average_leaves_the_column_empty(monkeypatch, tmp_path):
    def unavailable():
        raise OSError("no load average here")

    monkeypatch.setattr(host_load.os, "getloadavg", unavailable)
    tracker = HostLoadTracker()
    with tracker.around("cpu", [], tmp_path) as watch:
        pass
    assert tracker.columns(watch, {}, tmp_path)["host_load_avg_1m"] is None


def test_a_cpu_experiment_sleeps_at_openmp_barriers(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    options = write_inputs(tmp_path, [tiny_scenario()])
    assert cli.main([*options, "--results_output_path", str(tmp_path / "out"), "--dry_run"]) == 0
    (script,) = (tmp_path / "out").glob("full_*/command.sh")
    assert " OMP_WAIT_POLICY=PASSIVE " in script.read_text()
