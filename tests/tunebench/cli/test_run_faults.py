"""Faults a user meets in the first week, each through the real harness (issue J): the CSVs keep every experiment
on disk, long runs, SIGKILL of the harness, read-only and full filesystems, corrupt results. Nothing is lost and
no process survives.

Reached through the modules it calls (`plan`'s command line and the harness's watchdog):
tunebench/cli/plan.py, tunebench/lifetime/orphan_watchdog.py."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tests.fixtures.processes import survivors, tree

pytestmark = pytest.mark.slow

SHORT = [tiny_scenario(f"short{i}", max_steps=6, steady_warmup_steps=2, steady_min_steps=2) for i in (1, 2, 3)]


def harness(args: list[str], cache: Path, env: dict | None = None, wait: bool = True, timeout: int = 600):
    full_env = {**os.environ, "TUNEBENCH_CACHE": str(cache), "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
    command = [sys.executable, str(REPO / "benchmark.py"), *args]
    if not wait:
        return subprocess.Popen(command, cwd=REPO, env=full_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    return subprocess.run(command, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """short1..short3 run once into one folder."""
    folder = tmp_path_factory.mktemp("faults")
    options = write_inputs(folder, SHORT)
    out = folder / "results"
    proc = harness([*options, "--results_output_path", str(out), "--memory_logging", "none"], folder / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder, options, out


def test_the_csvs_keep_every_experiment_on_disk(done, tmp_path):
    folder, options, out = done
    proc = harness([*options, "--results_output_path", str(out), "--memory_logging", "none", "--run_only_scenarios",
                    "short1"], folder / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv")
    assert list(frame["scenario"]) == ["short1", "short2", "short3"] and (frame["status"] == "ok").all()
    other = write_inputs(tmp_path, [tiny_scenario("other", max_steps=6, steady_warmup_steps=2, steady_min_steps=2)])
    proc = harness([*other, "--results_output_path", str(out), "--memory_logging", "none"], folder / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 from earlier runs" in proc.stdout
    for name in ("raw_summary.csv", "benchmarks.csv"):
        assert list(pd.read_csv(out / name)["scenario"]) == ["other", "short1", "short2", "short3"]


def test_a_corrupt_results_json_runs_again_with_a_warning(done):
    folder, options, out = done
    victim = next(out.glob("short2_*"))
    (victim / "results.json").write_text("[]")  # valid JSON, not a row
    proc = harness([*options, "--results_output_path", str(out), "--memory_logging", "none"], folder / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "treated as not done" in proc.stderr and "AttributeError" not in proc.stderr
    assert json.loads((victim / "results.json").read_text())["status"] == "ok"


def test_a_full_disk_while_writing_the_csvs_is_exit_2_and_leaves_them_whole(done, monkeypatch, capsys):
    from tunebench import cli
    from tunebench.results import summaries

    folder, options, out = done
    monkeypatch.setenv("TUNEBENCH_CACHE", str(folder / "cache"))
    before = (out / "raw_summary.csv").read_bytes()
    real = summaries.write_atomic

    def full_disk(path, data):
        if Path(path).suffix == ".csv":
            real(Path(path).with_name("ignored.partial"), b"")  # the temp file a real write would have begun
            Path(path).with_name("ignored.partial").unlink()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, data)

    monkeypatch.setattr(summaries, "write_atomic", full_disk)
    code = cli.main([*options, "--results_output_path", str(out), "--memory_logging", "none"])  # all resumed
    err = capsys.readouterr().err
    assert code == 2 and "raw_summary.csv: No space left on device" in err and "Traceback" not in err
    assert (out / "raw_summary.csv").read_bytes() == before
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def _unshare(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})


@pytest.fixture(scope="module")
def private_mounts():
    if shutil.which("unshare") is None or _unshare("mount -t tmpfs tmpfs /mnt").returncode != 0:
        pytest.skip("no private mount namespace here (unshare -rm); the in-process fault tests still ran")


@pytest.mark.parametrize("mount,extra,expected", [
    ("ro", ["--dry_run"], "is on a read-only filesystem"),
    ("ro", [], "is on a read-only filesystem"),
    ("size=4k", ["--dry_run"], ".tunebench.lock: No space left on device"),  # the marker takes the only page
    ("size=8k", ["plan"], "plan.csv: No space left on device"),  # marker and lock fit, plan.csv does not
])
def test_read_only_and_full_filesystems_are_exit_2(private_mounts, tmp_path, mount, extra, expected):
    options = write_inputs(tmp_path, [tiny_scenario()])
    disk = tmp_path / "disk"
    disk.mkdir()
    command = [sys.executable, str(REPO / "benchmark.py"), *extra, *options, "--results_output_path",
               str(disk / "out")]
    quoted = " ".join(f"'{part}'" for part in command)
    proc = _unshare(f"mount -t tmpfs -o {mount} tmpfs '{disk}' && {quoted}; echo exit=$?; ls -A '{disk}/out' 2>&1")
    assert "exit=2" in proc.stdout and expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert ".tmp" not in proc.stdout  # no half-written file left


def test_1024_and_more_timed_steps_end_ok(tmp_path):
    scenario = tiny_scenario("long", max_steps=1100, max_seq_len=8, per_device_train_batch_size=1,
                             synthetic_num_samples=1100, steady_warmup_steps=2, steady_min_steps=2)
    options = write_inputs(tmp_path, [scenario])
    # One intra-op thread: a tiny model's step is then ~4 ms instead of ~35 ms of thread hand-offs on 2 cores.
    proc = harness([*options, "--results_output_path", str(tmp_path / "out"), "--memory_logging", "none"],
                   tmp_path / "cache", env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = pd.read_csv(tmp_path / "out" / "raw_summary.csv").iloc[0]
    assert row["status"] == "ok", row["error_messages"]
    assert row["total_steps"] == 1100 and row["steady_steps"] == 1098 and row["steady_step_time_ci_pct"] > 0


def _kill_mid_run(tmp_path, scenario: dict, *extra: str) -> tuple[str, Path]:
    options = write_inputs(tmp_path, [scenario])
    out = tmp_path / "out"
    token = uuid.uuid4().hex
    proc = harness([*options, "--results_output_path", str(out), "--memory_logging", "none", *extra],
                   tmp_path / "cache", env={"KILL_TOKEN": token}, wait=False)
    deadline = time.monotonic() + 300
    while not list(out.glob("*/stdout.log")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(6)  # training
    known = tree(proc.pid)
    assert proc.poll() is None and len(known) >= 2, known
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = time.monotonic()
    while survivors(token, known) and time.monotonic() - killed_at < 2.0:
        time.sleep(0.1)
    left = survivors(token, known)
    assert left == [], left
    return token, out


@pytest.mark.parametrize("processes", ["1", "2"])
def test_sigkill_of_the_harness_leaves_no_process_behind(tmp_path, processes):
    # One process: the preload forkserver and its fork; two: torchrun and its ranks, in sessions of their own.
    _, out = _kill_mid_run(tmp_path, tiny_scenario("endless", max_steps=100000), "--num_gpus_matrix", processes)
    # The next run, of another matrix, rebuilds the CSVs: the killed experiment is there, as an error row.
    (tmp_path / "next").mkdir()
    other = write_inputs(tmp_path / "next", [tiny_scenario("quick", max_steps=6, steady_warmup_steps=2,
                                                           steady_min_steps=2)])
    proc = harness([*other, "--results_output_path", str(out), "--memory_logging", "none"], tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv").set_index("scenario")
    assert frame.loc["quick", "status"] == "ok" and frame.loc["endless", "status"] == "error"
    assert "no results.json" in frame.loc["endless", "error_messages"]


@pytest.mark.xdist_group("cluster")  # a Ray instance: never beside the Ray and Slurm tests
def test_sigkill_of_a_harness_driving_a_local_ray_leaves_no_process_behind(tmp_path):
    pytest.importorskip("ray")
    _kill_mid_run(tmp_path, tiny_scenario("endless", max_steps=100000), "--executor", "ray", "--ray_transfer",
                  "shared")


def _started(command: list[str], tmp_path: Path) -> subprocess.Popen:
    """The harness in a session of its own (a terminal's process group), its temporary directory a test folder."""
    (tmp_path / "tmp").mkdir()
    # torch sets TORCHINDUCTOR_CACHE_DIR in the process that first asks for its cache (this pytest worker, after
    # some earlier test): a user's shell has no such leftover, and the harness keeps a value it is given
    env = {**{k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"},
           "TUNEBENCH_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    return subprocess.Popen([sys.executable, str(REPO / "benchmark.py"), *command], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_ctrl_c_while_the_preload_server_imports_prints_no_traceback(tmp_path):
    """Issue AD: Ctrl-C to the process group right after start-up was a clean exit 130, but the forkserver printed
    a KeyboardInterrupt traceback from its `import peft` (and a killed fork left a "leaked semaphore" warning)."""
    options = write_inputs(tmp_path, [tiny_scenario("long", max_steps=100000)])
    proc = _started([*options, "--results_output_path", str(tmp_path / "out")], tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any("forkserver" in Path(f"/proc/{pid}/cmdline").read_text(
            errors="replace") for pid in tree(proc.pid) if Path(f"/proc/{pid}").exists()):
        time.sleep(0.05)
    time.sleep(1.0)  # inside the server's imports (5-15 s here)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr and "leaked" not in stderr, stderr
    assert stderr.rstrip().endswith("(interrupted ones as error rows)")


def test_a_two_process_run_leaves_nothing_in_the_temporary_directory(tmp_path):
    """Issue AD: every 2-process experiment left a torchelastic_* folder in the temporary directory (and importing
    bitsandbytes a torchinductor_<user> one). Its logs are in the experiment's folder now, the caches in tunebench's;
    a Ctrl-C as the run ends is exit 130 (or 0), never a KeyboardInterrupt in a finalizer (-2)."""
    options = write_inputs(tmp_path, SHORT[:1])
    proc = _started([*options, "--results_output_path", str(tmp_path / "out"), "--num_gpus_matrix", "2"], tmp_path)
    for line in proc.stdout:
        if line.startswith("wrote "):
            os.killpg(proc.pid, signal.SIGINT)
            break
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode in (0, 130) and "Traceback" not in stderr, stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []
    (folder,) = (tmp_path / "out").glob("short1_*")
    assert (folder / "torchelastic").is_dir()
    # every process it starts, and its command.sh run by hand, keeps torch's inductor cache in tunebench's
    assert f"TORCHINDUCTOR_CACHE_DIR={tmp_path / 'cache' / 'inductor'} " in (folder / "command.sh").read_text()
