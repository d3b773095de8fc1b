"""The poller process: results through a fake nvidia-smi/NVML, failure modes, and never an orphan.

Reached through the modules it calls (the NVML poller): tunebench/telemetry/nvml_sidecar.py."""

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime

import pytest

from tests.fixtures.harness import FAKES, REPO
from tunebench.telemetry.gpus import GpuInfo, query_gpus
from tunebench.telemetry.poll_log import NVIDIA_SMI_TIME_FORMAT
from tunebench.telemetry.sidecar import NvidiaSmiSidecar

LOOP_MS = 20
# The fake ramps memory to baseline + 3000·(p+1) MiB at its 3rd loop sample (p = position in its inventory,
# here equal to the CUDA order) and holds a constant 100/150 W and 50/51 % utilisation.
PEAK_EXTRA = [3000.0, 6000.0]
POWER_W = [100.0, 150.0]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    pidfile = tmp_path / "invocations.jsonl"
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_PIDFILE", str(pidfile))
    monkeypatch.setenv("PYTHONPATH", str(FAKES))  # the fake pynvml, for the NVML backend

    def invocations(kind):
        lines = pidfile.read_text().splitlines() if pidfile.exists() else []
        return [rec for rec in map(json.loads, lines) if rec["kind"] == kind]

    return invocations


def alive(pid):
    """True while the process exists and is not a zombie (a reaped or dead-but-unreaped pid is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def assert_reaped(pid):
    assert pid is not None
    with pytest.raises(ProcessLookupError):  # gone entirely: not even a zombie left behind
        os.kill(pid, 0)


def wait_for_samples(sidecar, per_gpu=5, timeout_s=10.0):
    partial = sidecar.out_dir / "nvidia_smi.csv.partial"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if partial.exists() and len(partial.read_text().splitlines()) > per_gpu * len(sidecar.gpus):
            return
        time.sleep(0.02)
    raise AssertionError("the fake poller produced too few samples")


def energy_from_log(path, uuid, watts):
    """Independent truth for constant power: P · (last − first timestamp) of that GPU's lines."""
    stamps = [
        datetime.strptime(row.split(", ")[0], NVIDIA_SMI_TIME_FORMAT)
        for row in path.read_text().splitlines()[1:]
        if f", {uuid}, " in row
    ]
    return watts * (max(stamps) - min(stamps)).total_seconds()


@pytest.mark.parametrize("backend", ["nvidia-smi", "nvml"])
def test_normal_run_columns_and_reaped(fake, tmp_path, backend):
    gpus = query_gpus()
    out_dir = tmp_path / "exp"
    with NvidiaSmiSidecar(gpus, out_dir, loop_ms=LOOP_MS, backend=backend) as sidecar:
        wait_for_samples(sidecar)
    assert_reaped(sidecar.poller_pid)
    assert sidecar.baseline_mib == {gpus[0].uuid: 4.0, gpus[1].uuid: 517.0}
    log = out_dir / "nvidia_smi.csv"
    assert log.exists() and not (out_dir / "nvidia_smi.csv.partial").exists()
    assert log.read_text().splitlines()[0] == (
        "timestamp,index,uuid,pci.bus_id,memory.used,memory.total,utilization.gpu,power.draw"
    )
    out = sidecar.summary(nonpad_tokens=1000)
    energies = [energy_from_log(log, g.uuid, w) for g, w in zip(gpus, POWER_W, strict=True)]
    assert out["mem_nvidia_mem_reserved_gpu0"] == PEAK_EXTRA[0]
    assert out["mem_nvidia_mem_reserved_gpu1"] == PEAK_EXTRA[1]
    assert out["mem_nvidia_mem_reserved"] == sum(PEAK_EXTRA) / 2
    assert out["mem_nvidia_mem_reserved_max"] == PEAK_EXTRA[1]
    assert out["nvidia_gpu_util_mean"] == 50.5
    assert out["energy_joules"] == pytest.approx(sum(energies), rel=1e-9)
    assert out["energy_joules_per_nonpad_token"] == pytest.approx(sum(energies) / 1000, rel=1e-9)
    assert (
        out["nvidia_smi_samples"] == len(log.read_text().splitlines()) - 1 - out["nvidia_smi_malformed_lines"]
    )
    assert out["nvidia_smi_malformed_lines"] <= 1  # at most the line being written when SIGTERM landed
    if backend == "nvidia-smi":
        (loop,) = fake("loop")
        assert loop["pid"] == sidecar.poller_pid
        assert loop["argv"][-4:] == ["-i", f"{gpus[0].uuid},{gpus[1].uuid}", "-lms", str(LOOP_MS)]


def test_polls_only_the_experiments_gpus(fake, tmp_path):
    gpus = query_gpus()
    with NvidiaSmiSidecar([gpus[1]], tmp_path, loop_ms=LOOP_MS) as sidecar:
        wait_for_samples(sidecar)
    (loop,) = fake("loop")
    assert loop["argv"][loop["argv"].index("-i") + 1] == gpus[1].uuid
    out = sidecar.summary(None)
    # The experiment's only GPU is its cuda:0, whatever nvidia-smi's index for it.
    assert out["mem_nvidia_mem_reserved_gpu0"] == PEAK_EXTRA[1]
    assert "mem_nvidia_mem_reserved_gpu1" not in out
    assert out["energy_joules_per_nonpad_token"] is None


@pytest.mark.parametrize("error", [RuntimeError("training crashed"), KeyboardInterrupt()])
def test_poller_reaped_when_body_raises(fake, tmp_path, error):
    with pytest.raises(type(error)):
        with NvidiaSmiSidecar(query_gpus(), tmp_path, loop_ms=LOOP_MS) as sidecar:
            wait_for_samples(sidecar, per_gpu=1)
            assert alive(sidecar.poller_pid)
            raise error
    assert_reaped(sidecar.poller_pid)
    assert sidecar.summary(None)["mem_nvidia_mem_reserved"] is not None


def test_poller_ignoring_sigterm_is_killed(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MODE", "hang_ignore_term_loop")
    with NvidiaSmiSidecar(query_gpus(), tmp_path, loop_ms=LOOP_MS, stop_timeout_s=0.5) as sidecar:
        time.sleep(0.3)  # let the fake install its SIG_IGN
    assert_reaped(sidecar.poller_pid)
    out = sidecar.summary(10)
    assert out["nvidia_smi_samples"] == 0 and out["mem_nvidia_mem_reserved"] is None


def test_poller_dies_with_a_sigkilled_harness(fake, tmp_path):
    harness = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from tunebench.telemetry.gpus import query_gpus
        from tunebench.telemetry.sidecar import NvidiaSmiSidecar
        with NvidiaSmiSidecar(query_gpus(), Path({str(tmp_path)!r}), loop_ms={LOOP_MS}) as sidecar:
            print(sidecar.poller_pid, flush=True)
            time.sleep(60)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", harness], stdout=subprocess.PIPE, text=True, env=env)
    poller_pid = None
    try:
        poller_pid = int(proc.stdout.readline())
        assert alive(poller_pid)
        proc.send_signal(signal.SIGKILL)  # no finally-block runs: only PR_SET_PDEATHSIG can help
        proc.wait()
        deadline = time.monotonic() + 5.0
        while alive(poller_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(poller_pid)
    finally:
        proc.kill()
        proc.wait()
        if poller_pid is not None and alive(poller_pid):  # the test failed: still leave no orphan behind
            os.kill(poller_pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("fail", "baseline query exited 9"),
        ("hang", "baseline query hung"),
        ("fail_loop", "exited on its own with code 9"),
        ("die_after:3", "exited on its own with code 15"),
    ],
)
def test_nvidia_smi_failure_gives_none_columns_and_a_warning(
    fake, tmp_path, monkeypatch, caplog, mode, reason
):
    gpus = query_gpus()
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MODE", mode)
    with caplog.at_level(logging.WARNING):
        with NvidiaSmiSidecar(gpus, tmp_path, loop_ms=LOOP_MS, query_timeout_s=1.0) as sidecar:
            time.sleep(0.4)
    assert reason in sidecar.failure
    assert reason in caplog.text
    out = sidecar.summary(1000)
    assert set(out) >= {"mem_nvidia_mem_reserved", "mem_nvidia_mem_reserved_gpu1", "energy_joules"}
    assert all(value is None for value in out.values())
    if sidecar.poller_pid is not None:
        assert_reaped(sidecar.poller_pid)


def test_missing_nvidia_smi_gives_none_columns(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("PATH", str(tmp_path))
    gpu = GpuInfo(0, "GPU-x", "00000000:07:00.0", "NVIDIA H100", 81559.0, "550")
    with caplog.at_level(logging.WARNING):
        assert query_gpus() == []
        with NvidiaSmiSidecar(query_gpus(), tmp_path / "a") as no_gpus:
            pass
        with NvidiaSmiSidecar([gpu], tmp_path / "b") as one_gpu:
            pass
    assert "nvidia-smi not found" in caplog.text
    assert no_gpus.summary(5) == {
        "mem_nvidia_mem_reserved": None,
        "mem_nvidia_mem_reserved_max": None,
        "nvidia_gpu_util_mean": None,
        "energy_joules": None,
        "energy_joules_per_nonpad_token": None,
        "nvidia_smi_malformed_lines": None,
        "nvidia_smi_samples": None,
    }
    assert one_gpu.summary(5)["mem_nvidia_mem_reserved_gpu0"] is None
    assert not (tmp_path / "b" / "nvidia_smi.csv").exists()


def test_malformed_lines_are_skipped_and_counted(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MODE", "malformed")
    with NvidiaSmiSidecar(query_gpus(), tmp_path, loop_ms=LOOP_MS) as sidecar:
        wait_for_samples(sidecar)
    out = sidecar.summary(None)
    # The fake writes one junk line per loop after the 2 GPU lines, each loop in a single write.
    loops = out["nvidia_smi_samples"] // 2
    assert out["nvidia_smi_malformed_lines"] == loops
    assert out["mem_nvidia_mem_reserved"] == sum(PEAK_EXTRA) / 2


def test_bad_options_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        NvidiaSmiSidecar([], tmp_path, backend="dcgm")
    with pytest.raises(ValueError, match="--loop-ms"):
        NvidiaSmiSidecar([], tmp_path, loop_ms=0)
    with pytest.raises(RuntimeError, match="before the with-block ended"):
        NvidiaSmiSidecar([], tmp_path).summary(None)


def test_steady_energy_integrates_only_the_steady_window(fake, tmp_path):
    from tunebench.telemetry.steady_energy import steady_energy_columns

    gpus = query_gpus()
    out_dir = tmp_path / "exp"
    with NvidiaSmiSidecar(gpus, out_dir, loop_ms=LOOP_MS) as sidecar:
        wait_for_samples(sidecar)
        start = time.time()
        time.sleep(1.2)
    # warm-up step 1 ends at start+0.3; steady steps 2-4 end every 0.2 s after it
    steps = [{"step": 1, "seconds": 0.3, "end_unix": start + 0.3, "steady": False, "nonpad_tokens": 1000}]
    steps += [{"step": i, "seconds": 0.2, "end_unix": start + 0.3 + 0.2 * (i - 1), "steady": True,
               "nonpad_tokens": 100} for i in (2, 3, 4)]
    (out_dir / "steps.json").write_text(json.dumps(steps))
    columns = steady_energy_columns(sidecar, out_dir)
    lo, hi = datetime.fromtimestamp(start + 0.3), datetime.fromtimestamp(start + 0.9)
    expected = 0.0
    for gpu, watts in zip(gpus, POWER_W, strict=True):
        stamps = [datetime.strptime(row.split(", ")[0], NVIDIA_SMI_TIME_FORMAT)
                  for row in (out_dir / "nvidia_smi.csv").read_text().splitlines()[1:] if f", {gpu.uuid}, " in row]
        inside = [s for s in stamps if lo <= s <= hi]
        expected += watts * (max(inside) - min(inside)).total_seconds()
    assert columns["steady_energy_joules"] == pytest.approx(expected, rel=1e-9)
    assert columns["steady_energy_joules_per_nonpad_token"] == pytest.approx(expected / 300, rel=1e-9)
    assert sidecar.summary(nonpad_tokens=1300)["energy_joules"] > expected  # the whole run holds more
