"""Experiments spanning Ray nodes (issue N) on a real local multi-node Ray cluster, CPU only: DDP experiments of
preset:llama-tiny placed as 2 nodes × 1 process and 2 nodes × 2 processes over gloo, each against the same
experiment as one local run; a raylet killed mid-run; GPU layouts with fake GPU resources.

The comparison trains the preset's weights saved once, seeded, to a local model folder, so it also covers a
model loaded from disk; the loss is compared exactly."""

import json
import subprocess
import threading
import time

import pytest

from tests.fixtures.harness import REPO, TINY_DEFAULTS
from tunebench.execution.executors.ray_settings import RaySettings
from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.runner import run_matrix
from tunebench.experiment.spec import BASELINE, FrameworkConfig
from tunebench.matrix.expansion import Matrices, expand
from tunebench.matrix.inputs import Scenario
from tunebench.matrix.validation import typed

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

RUNTIME_ENV = {"env_vars": {"PYTHONPATH": str(REPO)}}
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # two 1-process nodes on a 2-core machine: no oversubscription
# Deterministic per-rank categories (host RSS is the process's, not the model's).
SAME = ("train_loss", "scan_mem_params", "scan_mem_grads", "scan_mem_optimizer", "scan_mem_activations",
        "scan_mem_activations_min", "scan_mem_buffers", "scan_ranks", "train_tokens", "steady_steps")


def ddp(num=2, device="cpu", model="preset:llama-tiny", **extra):
    scenarios = [Scenario("ddp", [None], {"model_name_or_path": [model], **extra})]
    problems = []
    found = expand(scenarios, {BASELINE: FrameworkConfig(BASELINE)}, dict(TINY_DEFAULTS), {}, Matrices([num]),
                   device, {}, problems)
    assert not problems
    return typed(found)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path / "cache"))


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


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, pinned_model):
    """The same experiment as one local 2-process run (once for the module): the row to match."""
    out = tmp_path_factory.mktemp("local")
    env = {**ONE_THREAD, "TUNEBENCH_CACHE": str(out / "cache")}
    (row,) = run_matrix(ddp(model=pinned_model), RunOptions(output_dir=out / "results", timeout_seconds=300,
                                                            extra_env=env))
    return row, out / "results", env


@pytest.fixture
def two_nodes(request):
    """A head without CPUs and two raylets of 1 CPU each (or `request.param`): an experiment of 2 (or 2 × that)
    processes fits no single node."""
    from ray.cluster_utils import Cluster

    cpus = getattr(request, "param", 1)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [cluster.add_node(num_cpus=cpus), cluster.add_node(num_cpus=cpus)]
    ray.init(address=cluster.address, runtime_env=RUNTIME_ENV, log_to_driver=False)
    try:
        yield cluster, nodes
    finally:
        ray.shutdown()
        cluster.shutdown()


def group_states():
    return {g["name"]: g["state"] for g in ray.util.placement_group_table().values()}


def files_of(folder):
    return sorted(p.name for p in folder.iterdir() if p.name not in ("trainer_output", "nodes"))


@pytest.mark.parametrize("transfer", ["object", "shared"])
def test_two_nodes_give_the_row_of_one_local_two_process_run(tmp_path, two_nodes, transfer, pinned_model, local_run):
    one, local_folder, env = local_run
    planned = ddp(model=pinned_model)
    (two,) = run_matrix(planned, RunOptions(output_dir=tmp_path / "ray", timeout_seconds=300, extra_env=env,
                                            executor="ray", settings=(RaySettings(transfer=transfer),)))
    assert one["status"] == "ok" and two["status"] == "ok", two.get("error_messages")
    for column in SAME:
        assert one[column] == two[column], column
    comm = [c for c in one if c.startswith("scan_comm_") and c.endswith("_bytes")]
    assert comm and all(one[c] == two[c] for c in comm)
    # Each node ran its launcher with its rank; every rank's files reached the experiment folder.
    addresses = two["ray_node"].split(",")
    assert len(addresses) == 2
    folder = tmp_path / "ray" / planned[0].folder_name
    assert files_of(local_folder / planned[0].folder_name) == files_of(folder)
    assert {"scan.rank0.json", "scan.rank1.json"} <= set(files_of(folder))
    for rank, script in ((0, folder / "command.sh"), (1, folder / "nodes" / "1" / "command.sh")):
        text = script.read_text()
        assert "--nnodes 2" in text and f"--node_rank {rank}" in text and "--nproc_per_node 1" in text
    assert json.loads((folder / "results.json").read_text())["status"] == "ok"
    assert set(group_states().values()) == {"REMOVED"}


@pytest.mark.parametrize("two_nodes", [2], indirect=True)
def test_two_nodes_of_two_processes_give_the_row_of_one_local_four_process_run(tmp_path, two_nodes, pinned_model):
    """2 nodes × 2 processes (torchrun --nproc_per_node 2 on each) against one local 4-process run: the same row.
    Four 1-thread processes on two cores: slower, not different."""
    env = {**ONE_THREAD, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    planned = ddp(num=4, model=pinned_model)
    (one,) = run_matrix(planned, RunOptions(output_dir=tmp_path / "local", timeout_seconds=600, extra_env=env,
                                            cpu_slots=4))
    (two,) = run_matrix(planned, RunOptions(output_dir=tmp_path / "ray", timeout_seconds=600, extra_env=env,
                                            executor="ray"))
    assert one["status"] == "ok" and two["status"] == "ok", (one.get("error_messages"), two.get("error_messages"))
    assert one["scan_ranks"] == 4
    for column in SAME:
        assert one[column] == two[column], column
    comm = [c for c in one if c.startswith("scan_comm_") and c.endswith("_bytes")]
    assert comm and all(one[c] == two[c] for c in comm)
    folder = tmp_path / "ray" / planned[0].folder_name
    assert {f"scan.rank{r}.json" for r in range(4)} <= set(files_of(folder))
    for rank, script in ((0, folder / "command.sh"), (1, folder / "nodes" / "1" / "command.sh")):
        text = script.read_text()
        assert "--nnodes 2" in text and f"--node_rank {rank}" in text and "--nproc_per_node 2" in text
    assert set(group_states().values()) == {"REMOVED"}


def test_a_raylet_killed_mid_run_is_an_error_row_and_nothing_is_left(tmp_path, cache, two_nodes):
    cluster, nodes = two_nodes
    out = tmp_path / "out"
    planned = ddp(max_steps=100000)  # runs until a node dies
    rows = []
    runner = threading.Thread(
        target=lambda: rows.extend(
            run_matrix(
                planned,
                RunOptions(
                    output_dir=out,
                    timeout_seconds=600,
                    extra_env=ONE_THREAD,
                    executor="ray",
                    settings=(RaySettings(transfer="shared"),),
                ),
            )
        )
    )
    runner.start()
    # Both nodes training: node 1's log shows its rank past the rendezvous (its first step's scan files come
    # later), and rank 0 has written its steps' progress.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(out.glob("ddp_*/nodes/1/stderr.log")):
        time.sleep(0.5)
    time.sleep(8)
    cluster.remove_node(nodes[1], allow_graceful=False)
    runner.join(timeout=400)
    assert not runner.is_alive()
    (row,) = rows
    # The dead node is named as the cause, not its peer's lost connection.
    message = row["error_messages"]
    assert row["status"] == "error" and message.startswith("node "), message
    assert "NodeDiedError" in message or "died" in message, message
    leftovers = subprocess.run(
        ["pgrep", "-f", str(out / planned[0].folder_name)], capture_output=True, text=True
    ).stdout.split()
    assert leftovers == [], leftovers  # every node's launcher and ranks are gone
    assert set(group_states().values()) == {"REMOVED"}


def test_gpu_experiments_span_nodes_with_accelerate_machine_ranks(tmp_path, cache):
    """Fake GPUs: a 4-GPU experiment on two 2-GPU nodes is 2 × 2 (accelerate --num_machines 2), a 3-GPU one
    fits no even split and is skipped with the reason (dry run: the commands are written, nothing trains)."""
    from ray.cluster_utils import Cluster

    from tunebench.execution.executors.ray import RayExecutor
    from tunebench.execution.progress import MatrixProgress

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=2, num_gpus=2)
    planned = [*ddp(4, "cuda"), *ddp(3, "cuda")]
    rows = {}
    try:
        ray.init(address=cluster.address, runtime_env=RUNTIME_ENV, log_to_driver=False)
        options = RunOptions(output_dir=tmp_path / "out", dry_run=True, executor="ray")
        RayExecutor().run(planned, options, rows.__setitem__, MatrixProgress(["a", "b"], live=False))
        states = group_states()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert rows[0]["status"] == "dry_run" and len(rows[0]["ray_node"].split(",")) == 2
    assert rows[1]["status"] == "skipped" and "no even split" in rows[1]["error_messages"]
    folder = tmp_path / "out" / planned[0].folder_name
    for rank, script in ((0, folder / "command.sh"), (1, folder / "nodes" / "1" / "command.sh")):
        text = script.read_text()
        assert "--num_processes 4 --num_machines 2" in text and f"--machine_rank {rank}" in text
        assert len(text.split("CUDA_VISIBLE_DEVICES=")[1].split()[0].split(",")) == 2
    assert set(states.values()) == {"REMOVED"}
