"""The environment of the steady window (issue V item 5), against the fake nvidia-smi: another process on the GPU is
found and named, the experiment's own processes are not, renamed or missing fields degrade to empty columns with
a reason, a hanging nvidia-smi never holds the experiment up, and compare names what moved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.harness import FAKES
from tunebench.telemetry import environment_summary as summary
from tunebench.telemetry import gpu_environment as env

sys.path.insert(0, str(FAKES))
import fake_gpus  # noqa: E402

GPU0 = fake_gpus.DEFAULT_GPUS[0]["uuid"]


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_NVIDIA_SMI_MODE", raising=False)
    monkeypatch.delenv("FAKE_NVIDIA_SMI_UNSUPPORTED", raising=False)
    return monkeypatch


@pytest.fixture
def own_child():
    """A process of 'the experiment': a descendant of this test process, as ranks are of the harness."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child.pid
    child.kill()
    child.wait()


def _watch(tmp_path: Path, seconds: float = 0.5) -> dict:
    with env.EnvironmentWatch(tmp_path, [GPU0], interval_s=0.1):
        time.sleep(seconds)
    return json.loads((tmp_path / env.SAMPLES_FILE).read_text())


def test_another_process_on_the_gpu_is_named_and_the_experiments_own_is_not(fake, tmp_path, own_child):
    cotenant = os.getppid() if os.getppid() > 1 else 1  # alive, and not below this process
    fake.setenv("FAKE_NVIDIA_SMI_APPS", json.dumps([
        {"pid": own_child, "used_memory": 30000, "name": "/usr/bin/python3"},
        {"pid": cotenant, "used_memory": 1024, "name": "/opt/cotenant/bin/burner"},
        {"pid": 999999999, "gpu": 1, "used_memory": 5, "name": "elsewhere"}]))  # another GPU: not this experiment's
    payload = _watch(tmp_path)
    assert payload["fields"]["clock_event_reasons"] == "clocks_event_reasons.active" and payload["notes"] == []
    columns = summary.summarize(payload, None)
    assert columns["gpu_other_processes"] == 1
    assert columns["gpu_other_process_names"] == f"burner (pid {cotenant}, 1.0 GiB)"
    assert columns["gpu_other_memory_mib"] == 1024 and columns["gpu_processes_before"] == 2
    assert columns["gpu_memory_used_before_mib"] == 4  # the fake GPU 0's baseline
    clocks = (columns["gpu_sm_clock_mhz"], columns["gpu_sm_clock_max_mhz"], columns["gpu_mem_clock_mhz"])
    assert clocks == (1980, 1980, 2619)
    assert columns["gpu_clock_event_reasons"] == "none" and columns["gpu_temperature_max_c"] == 41
    # one a 0.1 s, each two fake calls
    assert columns["gpu_power_limit_w"] == 700.0 and columns["environment_samples"] >= 2
    assert columns["gpu_uuids"] == GPU0 and columns["host_cpu_model"] == env.cpu_model()
    assert env.cpu_model() and env.cpu_model() in Path("/proc/cpuinfo").read_text()  # this Linux host's own
    assert summary.warnings_for({**columns, "host_load_per_core": 1.5}, "cuda")[1] == (
        "host loaded: the 1-minute load average reached 1.50 per core during the steady window")
    assert summary.warnings_for({**columns, "host_load_per_core": 0.2}, "cuda") == [
        f"GPU shared with another process during the steady window: burner (pid {cotenant}, 1.0 GiB) (its times are "
        "not comparable)"]


def test_pids_of_another_namespace_count_the_largest_process_as_the_experiment(fake, tmp_path):
    fake.setenv("FAKE_NVIDIA_SMI_APPS", json.dumps([{"pid": 4000001, "used_memory": 30000, "name": "python3"},
                                                     {"pid": 4000002, "used_memory": 600, "name": "python3"}]))
    columns = summary.summarize(_watch(tmp_path, 0.3), None)
    assert (
        columns["gpu_other_processes"] == 1 and columns["gpu_other_process_names"] == "python3 (pid 4000002, 0.6 GiB)"
    )


def test_renamed_and_missing_fields_fall_back_or_stay_empty_with_a_reason(fake, tmp_path):
    fake.setenv("FAKE_NVIDIA_SMI_UNSUPPORTED", "clocks_event_reasons.active,power.limit,clocks.max.sm")
    fake.setenv("FAKE_NVIDIA_SMI_GPUS", json.dumps([{**fake_gpus.DEFAULT_GPUS[0], "reasons": "0x0000000000000024"}]))
    payload = _watch(tmp_path, 0.3)
    assert payload["fields"]["clock_event_reasons"] == "clocks_throttle_reasons.active"
    assert payload["fields"]["power_limit_w"] == "enforced.power.limit"
    columns = summary.summarize(payload, None)
    assert columns["gpu_clock_event_reasons"] == "sw_power_cap+sw_thermal_slowdown"
    assert columns["gpu_power_limit_w"] == 700.0 and columns["gpu_sm_clock_max_mhz"] is None
    assert "no sm_clock_max_mhz (clocks.max.sm not supported by this nvidia-smi)" in columns["environment_note"]


def test_a_hanging_nvidia_smi_costs_the_experiment_nothing(fake, tmp_path, monkeypatch):
    fake.setenv("FAKE_NVIDIA_SMI_MODE", "hang")
    monkeypatch.setattr(env, "QUERY_TIMEOUT_S", 0.5)
    started = time.monotonic()
    watch = env.EnvironmentWatch(tmp_path, [GPU0], interval_s=0.1)
    with watch:
        entered = time.monotonic() - started  # the one probe before launch, given up after its time limit
    assert entered < 2.0
    columns = summary.summarize(json.loads((tmp_path / env.SAMPLES_FILE).read_text()), None)
    assert columns["gpu_other_processes"] is None and columns["gpu_sm_clock_mhz"] is None
    assert columns["environment_note"].startswith("nvidia-smi --query-gpu=uuid,memory.used")
    assert "hung for more than 0.5 s" in columns["environment_note"]


def test_a_failing_process_query_is_given_up_and_the_rest_kept(fake, tmp_path):
    fake.setenv("FAKE_NVIDIA_SMI_MODE", "apps_fail")
    columns = summary.summarize(_watch(tmp_path, 0.5), None)
    assert columns["gpu_other_processes"] is None and columns["gpu_sm_clock_mhz"] == 1980
    assert "exited 3: Unable to query compute applications (2 times in a row: given up for this run)" in \
        columns["environment_note"]


def test_without_nvidia_smi_the_host_is_still_described(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    columns = summary.summarize(_watch(tmp_path, 0.3), None)
    assert columns["environment_note"].startswith("nvidia-smi not found on PATH")
    assert columns["gpu_other_processes"] is None and columns["host_load_per_core"] >= 0


def test_only_the_steady_windows_samples_count():
    samples = [
        {"t": 10.0, "load1": 9.0},
        {"t": 11.0, "load1": 1.0},
        {"t": 12.0, "load1": 2.0},
        {"t": 20.0, "load1": 8.0},
    ]
    payload = {"cores": 4, "interval_s": 1.0, "samples": samples}
    assert summary.summarize(payload, (10.5, 12.5))["host_load_per_core"] == 0.5
    assert summary.summarize(payload, (10.5, 12.5))["environment_samples"] == 2
    assert summary.summarize(payload, (15.2, 15.4))["environment_samples"] == 0  # nothing within reach
    assert summary.summarize(payload, (11.2, 11.4))["host_load_per_core"] == 0.25  # the nearest sample


def test_reason_masks_decode_to_names():
    assert summary.decode_reasons("0x0000000000000001") == set()  # idle: not a cause
    assert summary.decode_reasons("0x00000000000000E8") == {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                                                            "hw_power_brake_slowdown"}
    assert summary.decode_reasons("[N/A]") is None


def test_explain_names_what_moved_and_nothing_else():
    clean = summary.group_view([{"gpu_other_processes": 0, "gpu_sm_clock_mhz": 1980, "gpu_temperature_max_c": 60,
                                 "gpu_power_limit_w": 700, "host_load_per_core": 0.1, "cpu_governor": "performance",
                                 "gpu_clock_event_reasons": "none"}] * 3)
    noisy = summary.group_view([{"gpu_other_processes": 0, "gpu_sm_clock_mhz": 1965, "gpu_temperature_max_c": 66,
                                 "gpu_power_limit_w": 700, "host_load_per_core": 0.3, "cpu_governor": "performance",
                                 "gpu_clock_event_reasons": "none"}])
    assert summary.explain(clean, noisy) == []  # run-to-run wobble is not a cause
    edge = [summary.group_view([{"host_load_per_core": load}]) for load in (0.97, 1.02, 0.7, 1.1)]
    assert summary.explain(edge[0], edge[1]) == [] and summary.explain(edge[2], edge[3]) == [
        "host load 0.70 → 1.10 per core"]
    shared = summary.group_view([{"gpu_other_processes": 1, "gpu_other_process_names": "burner (pid 7, 1.0 GiB)",
                                  "gpu_sm_clock_mhz": 1755, "gpu_temperature_max_c": 81, "gpu_power_limit_w": 500,
                                  "host_load_per_core": 1.6, "cpu_governor": "powersave",
                                  "gpu_clock_event_reasons": "sw_thermal_slowdown"}])
    assert summary.explain(clean, shared) == [
        "other processes on the GPU 0 → 1 (burner (pid 7, 1.0 GiB))", "SM clock 1980 → 1755 MHz",
        "clock event reasons none → sw_thermal_slowdown", "GPU temperature 60 → 81 °C", "power cap 700 → 500 W",
        "host load 0.10 → 1.60 per core", "CPU governor performance → powersave"]
    # Seen on the H100 (docs/evidence/history-h100.md): a power cap that comes and goes before and after is no cause;
    # a reason new in the newer group is, with both groups' reasons as sets.
    capped = [summary.group_view([{"gpu_clock_event_reasons": r} for r in rs])
              for rs in (["none", "sw_power_cap"], ["sw_power_cap"], ["sw_power_cap+hw_slowdown", "none"])]
    assert summary.explain(capped[0], capped[1]) == [] and summary.explain(capped[1], capped[0]) == []
    assert summary.explain(capped[0], capped[2]) == ["clock event reasons sw_power_cap → hw_slowdown+sw_power_cap"]
    # another machine of the same kind (docs/evidence/history-h100/mixed-hosts: same host name, 20 % apart): a GPU
    # or a host CPU the older group never had is named; the same ones, or fewer, are not
    machines = [summary.group_view([{"gpu_uuids": u, "host_cpu_model": c} for u, c in rows]) for rows in (
        [("GPU-a", "Xeon 8480"), ("GPU-a", "Xeon 8480")], [("GPU-a", "Xeon 8480")], [("GPU-b", "EPYC 9654")])]
    assert summary.explain(machines[0], machines[1]) == []
    assert summary.explain(machines[0], machines[2]) == ["GPU GPU-a → GPU-b", "host CPU Xeon 8480 → EPYC 9654"]
    hidden = summary.group_view([{"gpu_other_processes": 0, "gpu_memory_used_before_mib": 700}])
    assert summary.explain(summary.group_view([{"gpu_memory_used_before_mib": 4}]), hidden) == [
        "GPU memory in use before the start 4 → 700 MiB"]
    assert summary.problems(hidden) == ["GPU memory held before the start (700 MiB): another process nvidia-smi does "
                                        "not list here?"]
    assert summary.problems(shared) == ["GPU shared with another process: burner (pid 7, 1.0 GiB)",
                                        "host loaded (1.60 per core)", "GPU clocks held back (sw_thermal_slowdown)"]


def test_compare_names_the_other_process_as_why_it_moved():
    from tunebench.results.compare.comparison import compare_frames

    base = {"scenario": "s", "framework_config": "none", "peft_method": "none", "model_name_or_path": "m",
            "num_gpus": 1, "per_device_train_batch_size": 8, "max_seq_len": 512, "gpu_name": "H100",
            "status": "ok", "experiment_id": "a" * 12, "steady_step_time_median": 0.100, "gpu_other_processes": 0}
    slow = {**base, "steady_step_time_median": 0.120, "gpu_other_processes": 1,
            "gpu_other_process_names": "burner (pid 7, 1.0 GiB)"}
    result = compare_frames(pd.DataFrame([base]), pd.DataFrame([slow]))
    assert list(result.regressions["why"]) == ["other processes on the GPU 0 → 1 (burner (pid 7, 1.0 GiB))"]
    same = compare_frames(pd.DataFrame([slow]), pd.DataFrame([{**slow, "steady_step_time_median": 0.150}]))
    assert list(same.regressions["why"]) == ["new run: GPU shared with another process: burner (pid 7, 1.0 GiB)"]
