"""`--executor slurm` against a cluster (issue N): bad input is exit 2 with one line, quickly, before anything runs
(no sbatch, no submitit, an unknown partition, an experiment wider than the nodes; stand-in `sinfo`/`sbatch`
scripts); and a real sbatch round trip on a one-machine slurmctld + slurmd (Debian's slurm-wlm), which the test
brings up itself and which skips cleanly where Slurm is not installed or cannot start."""

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from tests.fixtures.harness import tiny_scenario, write_inputs
from tunebench import cli

pytest.importorskip("submitit")

SINFO = '''#!{python}
"""Stand-in sinfo: partitions `debug` (default) and `gpu`, two nodes of 2 CPUs and 2 GPUs."""
import sys
args = sys.argv[1:]
if "%P" in args:
    print("debug*\\ngpu")
elif "--Node" in args:
    print("n1|2|gpu:h100:2(S:0)\\nn2|2|gpu:h100:2(S:0)\\nn1|2|gpu:h100:2(S:0)")
'''


def run_cli(tmp_path, capsys, *extra, num="1"):
    options = write_inputs(tmp_path, [tiny_scenario()])
    started = time.monotonic()
    code = cli.main([*options, "--results_output_path", str(tmp_path / "out"), "--num_gpus_matrix", num,
                     "--executor", "slurm", *extra])
    return code, capsys.readouterr().err, time.monotonic() - started


def problem_lines(err):
    return [line for line in err.splitlines() if line.startswith("  - ")]


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """sbatch and sinfo on PATH: what the checks ask before anything is submitted."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text(SINFO.format(python=sys.executable))
    (bin_dir / "sbatch").write_text("#!/bin/sh\nexit 1\n")
    for name in ("sinfo", "sbatch"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_no_sbatch_is_exit_2_in_one_line(tmp_path, capsys, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, err, seconds = run_cli(tmp_path, capsys)
    assert code == 2 and seconds < 10 and not (tmp_path / "out").exists()
    (line,) = problem_lines(err)
    assert "no `sbatch` on this machine's PATH" in line


def test_without_submitit_it_is_exit_2(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_submitit(name, *args, **kwargs):
        if name == "submitit" or name.startswith("submitit."):
            raise ImportError("No module named 'submitit'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_submitit)
    code, err, _ = run_cli(tmp_path, capsys)
    (line,) = problem_lines(err)
    assert code == 2 and "submitit is not installed" in line and "pip install -e '.[slurm]'" in line


def test_an_unknown_partition_is_exit_2_in_one_line(tmp_path, capsys, fake_slurm):
    code, err, seconds = run_cli(tmp_path, capsys, "--slurm_partition", "nope")
    assert code == 2 and seconds < 10 and not (tmp_path / "out").exists()
    (line,) = problem_lines(err)
    assert "no partition 'nope'" in line and "debug, gpu" in line


def test_more_nodes_than_the_cluster_has_is_exit_2_in_one_line(tmp_path, capsys, fake_slurm):
    # 8 processes: 4 nodes of 2 CPUs would do; the partition has 2.
    code, err, seconds = run_cli(tmp_path, capsys, "--slurm_partition", "gpu", num="8")
    assert code == 2 and seconds < 10 and not (tmp_path / "out").exists()
    (line,) = problem_lines(err)
    assert "needs 8 CPU(s)" in line and "partition 'gpu'" in line and "2 node(s)" in line


@pytest.mark.parametrize("value", ["nokey", "=x", "bad key=1", "time=1\n#SBATCH --x=y"])
def test_a_malformed_slurm_extra_is_exit_2(tmp_path, capsys, fake_slurm, value):
    code, err, _ = run_cli(tmp_path, capsys, "--slurm_extra", value)
    assert code == 2 and "--slurm_extra" in err


def test_a_slurm_time_limit_below_one_minute_is_exit_2(tmp_path, capsys, fake_slurm):
    code, err, _ = run_cli(tmp_path, capsys, "--slurm_time_limit", "0")
    assert code == 2 and "--slurm_time_limit: out of range" in err


def test_the_layouts_a_cluster_offers():
    from tunebench.execution.executors.nodes import NodeShape, node_layout

    assert node_layout(4, [2, 2]) == NodeShape(2, 2)
    assert node_layout(4, [8, 2]) == NodeShape(1, 4)
    assert node_layout(3, [2, 2]) is None  # no even split
    assert node_layout(8, [4, 4, 2, 2]) == NodeShape(2, 4)
    assert node_layout(6, [2, 2, 2, 1]) == NodeShape(3, 2)


def test_the_cause_of_a_failed_multi_node_row():
    """Node 0's row when every node succeeded; else the dead node over an OOM over the first error, and never
    a node that tunebench cancelled."""
    from tunebench.execution.executors.nodes import NodeOutcome, merge_node_rows

    ok = {"status": "ok", "train_loss": 1.0}
    base = {"scenario": "s"}
    assert merge_node_rows(base, [NodeOutcome(1, dict(ok)), NodeOutcome(0, dict(ok))])["train_loss"] == 1.0
    lost = {"status": "error", "error_messages": "Connection closed by peer"}
    died = NodeOutcome(1, failure="ray: NodeDiedError: gone", where="10.0.0.2")
    row = merge_node_rows(base, [NodeOutcome(0, dict(lost)), died])
    assert row["status"] == "error" and row["error_messages"] == "node 1 (10.0.0.2): ray: NodeDiedError: gone"
    oom = NodeOutcome(1, {"status": "oom", "error_messages": "CUDA out of memory"})
    assert merge_node_rows(base, [NodeOutcome(0, dict(lost)), oom])["status"] == "oom"
    cancelled = NodeOutcome(1, failure="ray: TaskCancelledError", cancelled=True)
    row = merge_node_rows(base, [cancelled, NodeOutcome(0, dict(lost))])
    assert row["error_messages"] == "node 0: Connection closed by peer"
    timed_out = NodeOutcome(0, failure="slurm: job 7 (TIMEOUT): …", failure_status="timeout")
    assert merge_node_rows(base, [timed_out])["status"] == "timeout"


# ------------------------------------------------------------------------------------------ a real Slurm
SLURM_CONF = """ClusterName=tunebench
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _free_port():
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


@pytest.fixture
def real_slurm(tmp_path_factory, monkeypatch):
    """slurmctld + slurmd of this machine (auth/none: nothing else to run), stopped by their own pids."""
    needed = ("slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")
    if any(shutil.which(name) is None for name in needed):
        pytest.skip("Slurm is not installed here (apt-get install slurm-wlm)")
    if os.geteuid() != 0:
        pytest.skip("a one-machine Slurm needs root to start slurmd")
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    conf = root / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=socket.gethostname(), root=root, ctld_port=_free_port(),
                                      d_port=_free_port(), cpus=os.cpu_count()))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([daemon], env=os.environ, capture_output=True, timeout=60)
    try:
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline and state not in ("idle", "mixed"):
            state = subprocess.run(["sinfo", "--noheader", "--format", "%T"], capture_output=True, text=True,
                                   timeout=30).stdout.strip()
            time.sleep(0.5)
        if state not in ("idle", "mixed"):
            pytest.skip(f"slurmctld/slurmd did not come up (node state {state!r})")
        yield root
    finally:
        for pid_file in ("slurmd.pid", "slurmctld.pid"):
            path = root / pid_file
            if path.is_file():
                try:
                    os.kill(int(path.read_text().strip()), 15)
                except (ValueError, ProcessLookupError):
                    pass


@pytest.mark.slow
def test_a_real_sbatch_round_trip(tmp_path, capsys, real_slurm):
    """benchmark.py --executor slurm against a real slurmctld: the job runs the experiment through sbatch/srun,
    is named tunebench-<folder>, and the row is the local executor's (same bytes, same tokens)."""
    code, err, _ = run_cli(tmp_path, capsys, "--slurm_partition", "nope")
    assert code == 2 and "no partition 'nope'" in err  # the real sinfo's answer
    options = write_inputs(tmp_path, [tiny_scenario()])
    assert cli.main([*options, "--results_output_path", str(tmp_path / "local"), "--no_preload"]) == 0
    assert cli.main([*options, "--results_output_path", str(tmp_path / "slurm"), "--executor", "slurm",
                     "--slurm_partition", "debug", "--slurm_time_limit", "10", "--slurm_extra",
                     "comment=tunebench-test"]) == 0
    import pandas as pd

    local = pd.read_csv(tmp_path / "local" / "raw_summary.csv").iloc[0]
    slurm = pd.read_csv(tmp_path / "slurm" / "raw_summary.csv").iloc[0]
    assert slurm["status"] == "ok" and slurm["executor"] == "slurm"
    for column in ("scan_mem_params", "scan_mem_grads", "scan_mem_optimizer", "scan_mem_activations",
                   "train_tokens", "steady_steps"):
        assert local[column] == slurm[column], column
    folder = tmp_path / "slurm" / f"{slurm['scenario']}_{slurm['experiment_id']}"
    (submitted,) = (folder / "slurm").glob("*_submitted.pkl")
    job_id = submitted.name.split("_")[0]
    # The job's result reaches submitit before its process has exited and slurmd has finished it (RUNNING, then
    # COMPLETING): its final state is asked for until it has one.
    deadline, started = time.monotonic() + 60, time.monotonic()
    while True:
        shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
        if not any(f"JobState={s}" in shown for s in ("RUNNING", "COMPLETING")) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    print(f"final job state after {time.monotonic() - started:.1f} s")
    assert f"JobName=tunebench-{folder.name}" in shown and "Comment=tunebench-test" in shown
    assert "JobState=COMPLETED" in shown, shown
