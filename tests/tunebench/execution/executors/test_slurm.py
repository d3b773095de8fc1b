"""The Slurm executor (issue N) through submitit's local cluster (jobs on this machine, CPU only): the same rows as
the local executor, a 2-node job (2 tasks of 1 process) as one local 2-process run, a job past its time limit, and
Ctrl-C cancelling every job. The real sbatch round trip and the bad-input checks are in test_slurm_cluster.py.

A preset's random initialisation is not seeded (two runs of one experiment differ in train_loss), so the rows are
compared on the preset's weights saved once, seeded, to a local model folder: then the loss is exact."""

import subprocess
import time

import pytest

from tests.fixtures.harness import TINY_DEFAULTS
from tunebench.execution.executors.slurm import SlurmSettings
from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.runner import run_matrix
from tunebench.experiment.spec import BASELINE, FrameworkConfig
from tunebench.matrix.expansion import Matrices, expand
from tunebench.matrix.inputs import Scenario
from tunebench.matrix.validation import typed

pytest.importorskip("submitit")
pytestmark = pytest.mark.slow

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
SAME = ("status", "train_loss", "scan_mem_params", "scan_mem_grads", "scan_mem_optimizer", "scan_mem_activations",
        "scan_mem_activations_min", "scan_mem_buffers", "train_tokens", "steady_steps")


@pytest.fixture(scope="module")
def pinned_model(tmp_path_factory):
    """preset:llama-tiny with seeded weights, as a local model folder (weights and tokenizer)."""
    import torch

    from tunebench.experiment.models import build_tokenizer, load_model

    folder = tmp_path_factory.mktemp("llama-tiny-seeded")
    torch.manual_seed(0)
    load_model("preset:llama-tiny", "float32", init_device="cpu").save_pretrained(folder)
    build_tokenizer("preset:llama-tiny").save_pretrained(folder)
    return str(folder)


def matrix(model, num=1, names=("ok", "lora", "broken"), **extra):
    every = {"ok": {}, "lora": {"peft_method": "lora", "target_modules": ["q_proj", "v_proj"]},
             "broken": {"peft_method": "lora", "target_modules": ["no_such_module"]}}
    scenarios = [Scenario(name, [None], {"model_name_or_path": [model], **every[name], **extra}) for name in names]
    problems = []
    found = expand(scenarios, {BASELINE: FrameworkConfig(BASELINE)}, dict(TINY_DEFAULTS), {}, Matrices([num]), "cpu",
                   {}, problems)
    assert not problems
    return typed(found)


def options(out, tmp_path, **extra):
    env = {**ONE_THREAD, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    return RunOptions(output_dir=out, timeout_seconds=300, extra_env=env, preload=False, **extra)


def on_slurm(out, tmp_path, slurm_time_limit=None, **extra):
    settings = SlurmSettings(cluster="local", time_limit=slurm_time_limit)
    return options(out, tmp_path, executor="slurm", settings=(settings,), **extra)


def files_of(folder):
    return sorted(p.name for p in folder.iterdir() if p.name not in ("trainer_output", "slurm", "nodes"))


def compare(local, slurm, out_local, out_slurm):
    assert [r["scenario"] for r in local] == [r["scenario"] for r in slurm]
    for one, two in zip(local, slurm, strict=True):
        for column in SAME:
            assert one.get(column) == two.get(column), (one["scenario"], column)
        folder = one["scenario"] + "_" + one["experiment_id"]
        assert files_of(out_local / folder) == files_of(out_slurm / folder), folder
        assert two["executor"] == "slurm"


def test_the_local_cluster_gives_the_rows_of_the_local_executor(tmp_path, pinned_model):
    planned = matrix(pinned_model)
    local = run_matrix(planned, options(tmp_path / "local", tmp_path))
    slurm = run_matrix(planned, on_slurm(tmp_path / "slurm", tmp_path))
    assert [r["status"] for r in slurm] == ["ok", "ok", "error"]
    compare(local, slurm, tmp_path / "local", tmp_path / "slurm")
    # The job's own files stay with the experiment; a resumed run reuses the finished rows.
    assert list((tmp_path / "slurm" / planned[0].folder_name / "slurm").glob("*_result.pkl"))
    again = run_matrix(planned, on_slurm(tmp_path / "slurm", tmp_path))
    assert [r["status"] for r in again] == ["ok", "ok", "error"]
    assert again[0]["experiment_end_unix"] == slurm[0]["experiment_end_unix"]  # reused, not rerun


def test_a_two_node_job_gives_the_row_of_a_local_two_process_run(tmp_path, pinned_model):
    """--cpu_slots 1: the local cluster's "nodes" hold one process each, so 2 processes are a 2-node job (2 tasks,
    each a torchrun of 1 process with its node rank)."""
    planned = matrix(pinned_model, num=2, names=("ok",))
    local = run_matrix(planned, options(tmp_path / "local", tmp_path))
    slurm = run_matrix(planned, on_slurm(tmp_path / "slurm", tmp_path, cpu_slots=1))
    compare(local, slurm, tmp_path / "local", tmp_path / "slurm")
    comm = [c for c in local[0] if c.startswith("scan_comm_") and c.endswith("_bytes")]
    assert comm and all(local[0][c] == slurm[0][c] for c in comm)
    folder = tmp_path / "slurm" / planned[0].folder_name
    for rank, script in ((0, folder / "command.sh"), (1, folder / "nodes" / "1" / "command.sh")):
        text = script.read_text()
        assert "--nnodes 2" in text and f"--node_rank {rank}" in text
    # --overwrite takes the node and job folders along with the rest of the experiment's files.
    from tunebench.results.folder import remove_previous_results

    assert remove_previous_results(tmp_path / "slurm") == 1 and not folder.exists()


def test_a_job_past_its_time_limit_is_a_timeout_row(tmp_path, pinned_model):
    planned = matrix(pinned_model, names=("ok",), max_steps=100000)
    (row,) = run_matrix(planned, on_slurm(tmp_path / "out", tmp_path, slurm_time_limit=0.5))
    assert row["status"] == "timeout", row["error_messages"]
    assert row["error_messages"].startswith("node 0") and "slurm: job" in row["error_messages"]
    assert "timed-out" in row["error_messages"]  # submitit's own message
    # The full path: a second test run on this machine runs experiments of the same folder name.
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "out" / planned[0].folder_name)],
                          capture_output=True).returncode == 1


def test_ctrl_c_cancels_every_job(tmp_path, pinned_model):
    """Ctrl-C (KeyboardInterrupt in the driver's main thread) once both endless jobs are training."""
    import _thread
    import threading

    from tunebench.execution.executors.slurm import SlurmExecutor
    from tunebench.execution.progress import MatrixProgress

    planned = matrix(pinned_model, names=("ok", "lora"), max_steps=100000)
    out = tmp_path / "out"

    def interrupt_when_running():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not all((out / e.folder_name / "stderr.log").exists() for e in planned):
            time.sleep(0.5)
        time.sleep(3)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_running, daemon=True).start()
    rows = {}
    with pytest.raises(KeyboardInterrupt):
        SlurmExecutor().run(planned, on_slurm(out, tmp_path), rows.__setitem__,
                            MatrixProgress([e.folder_name for e in planned], live=False))
    assert rows == {}  # nothing finished: both were interrupted
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
            subprocess.run(["pgrep", "-f", str(out / e.folder_name)], capture_output=True).returncode == 0
            for e in planned):
        time.sleep(0.5)
    for experiment in planned:  # the job, its launcher and its ranks are gone
        assert subprocess.run(["pgrep", "-f", str(out / experiment.folder_name)], capture_output=True).returncode == 1
        text = (out / experiment.folder_name / "results.json").read_text()
        assert "interrupted" in text and "Slurm job" in text
