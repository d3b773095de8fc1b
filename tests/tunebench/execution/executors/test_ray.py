"""The Ray executor on real local Ray clusters (CPU only): same rows and folders as the local executor, GPUs
as Ray assigns them (fake GPU resources), and a node that dies mid-experiment (issue G).

Reached through the modules it calls (what runs on a Ray worker): tunebench/execution/executors/ray_tasks.py."""

import os
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from tests.fixtures.harness import REPO, TINY_DEFAULTS, tiny_scenario, write_inputs
from tests.fixtures.ray_head import RAY_CLI, ray_head
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


def experiments(device="cpu", **extra):
    scenarios = [Scenario("ok", [None], {"model_name_or_path": ["preset:llama-tiny"], **extra}),
                 Scenario("lora", [None], {"model_name_or_path": ["preset:llama-tiny"], "peft_method": "lora",
                                           "target_modules": ["q_proj", "v_proj"], **extra}),
                 Scenario("broken", [None], {"model_name_or_path": ["preset:llama-tiny"], "peft_method": "lora",
                                             "target_modules": ["no_such_module"], **extra})]
    problems = []
    found = expand(scenarios, {BASELINE: FrameworkConfig(BASELINE)}, dict(TINY_DEFAULTS), {}, Matrices([1]), device,
                   {}, problems)
    assert not problems
    return typed(found)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path / "cache"))


def files_of(folder):
    return sorted(p.name for p in folder.iterdir() if p.name != "trainer_output")


def test_ray_gives_the_same_rows_and_folders_as_the_local_executor(tmp_path, cache):
    local = run_matrix(experiments(), RunOptions(output_dir=tmp_path / "local", timeout_seconds=120))
    try:
        ray.init(address="local", num_cpus=2, runtime_env=RUNTIME_ENV, log_to_driver=False)
        remote = run_matrix(experiments(), RunOptions(output_dir=tmp_path / "ray", timeout_seconds=120,
                                                      executor="ray"))
    finally:
        ray.shutdown()
    key = lambda rows: sorted((r["experiment_id"], r["scenario"], r["status"]) for r in rows)  # noqa: E731
    assert key(local) == key(remote)
    assert all(r["executor"] == "ray" and r.get("ray_node") for r in remote if r["status"] == "ok")
    for row in local:
        folder = row["scenario"] + "_" + row["experiment_id"]
        assert files_of(tmp_path / "local" / folder) == files_of(tmp_path / "ray" / folder), folder
    ok_local = next(r for r in local if r["scenario"] == "ok")
    ok_remote = next(r for r in remote if r["scenario"] == "ok")
    for column in ("scan_mem_params", "scan_mem_optimizer", "train_tokens", "steady_steps"):
        assert ok_local[column] == ok_remote[column]


def test_gpu_experiments_get_the_gpus_ray_assigned(tmp_path, cache):
    """Fake GPU resources: two 2-GPU experiments at once on a node with 4 'GPUs' get disjoint devices."""
    from tunebench.execution.executors.ray import RayExecutor
    from tunebench.execution.progress import MatrixProgress

    planned = typed(
        expand(
            [Scenario(f"g{i}", [None], {"model_name_or_path": ["preset:llama-tiny"]}) for i in range(2)],
            {BASELINE: FrameworkConfig(BASELINE)},
            dict(TINY_DEFAULTS),
            {},
            Matrices([2]),
            "cuda",
            {},
            [],
        )
    )
    rows = {}
    try:
        ray.init(address="local", num_cpus=4, num_gpus=4, runtime_env=RUNTIME_ENV, log_to_driver=False)
        options = RunOptions(output_dir=tmp_path / "out", dry_run=True, executor="ray")
        RayExecutor().run(planned, options, rows.__setitem__, MatrixProgress(["a", "b"], live=False))
    finally:
        ray.shutdown()
    assigned = []
    for experiment in planned:
        script = (tmp_path / "out" / experiment.folder_name / "command.sh").read_text()
        devices = script.split("CUDA_VISIBLE_DEVICES=")[1].split()[0]
        assigned.append(set(devices.split(",")))
    assert all(len(a) == 2 for a in assigned) and not assigned[0] & assigned[1]
    assert {r["status"] for r in rows.values()} == {"dry_run"}


def test_a_node_dying_mid_experiment_is_an_error_row_and_the_matrix_goes_on(tmp_path, cache):
    from ray.cluster_utils import Cluster

    out = tmp_path / "out"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    doomed = cluster.add_node(num_cpus=1)
    planned = [*experiments(max_steps=100000)[:1], *experiments()[1:2]]  # an endless run, then a LoRA run

    rows = []
    try:
        ray.init(address=cluster.address, runtime_env=RUNTIME_ENV, log_to_driver=False)
        # The matrix runs in a thread; Ray's cluster utilities install signal handlers, so they stay here.
        runner = threading.Thread(target=lambda: rows.extend(run_matrix(planned, RunOptions(
            output_dir=out, timeout_seconds=300, executor="ray", settings=(RaySettings(transfer="shared"),)))))
        runner.start()
        deadline = time.monotonic() + 240
        while not list(out.glob("ok_*/stdout.log")) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(5)  # training
        cluster.add_node(num_cpus=1)  # somewhere for the rest of the matrix to go
        cluster.remove_node(doomed, allow_graceful=False)
        runner.join(timeout=300)
    finally:
        ray.shutdown()
        cluster.shutdown()
    status = {r["scenario"]: r for r in rows}
    assert status["ok"]["status"] == "error" and status["ok"]["error_messages"].startswith("ray: ")
    assert status["lora"]["status"] == "ok"
    leftovers = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert leftovers == [], leftovers  # the experiment died with its worker
    assert os.path.isfile(out / "raw_summary.csv")


def test_a_token_cluster_is_joined_with_the_token_at_hand(tmp_path, cache):
    """Issue Q: a cluster with token authentication, joined by address with the token in ~/.ray/auth_token and
    RAY_AUTH_MODE unset (Ray alone refuses that after ~20 s of retries); an explicit RAY_AUTH_MODE=disabled is
    respected and fails in one line within --ray_connect_timeout, exit 2."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    made = subprocess.run([*RAY_CLI, "get-auth-token", "--generate"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0 and (home / ".ray" / "auth_token").is_file(), made.stderr[-2000:]
    with ray_head({**env, "RAY_AUTH_MODE": "token"}) as address:
        # One tiny experiment: what is tested is the join, not the matrix (scripts/check_readme.py runs the recipe).
        command = [sys.executable, "benchmark.py", "--executor", "ray", "--ray_address", address,
                   *write_inputs(tmp_path, [tiny_scenario("tiny")])]
        refused = subprocess.run([*command, "--ray_connect_timeout", "8", "--results_output_path",
                                  str(tmp_path / "refused")], cwd=REPO, env={**env, "RAY_AUTH_MODE": "disabled"},
                                 capture_output=True, text=True, timeout=300)
        joined = subprocess.run([*command, "--results_output_path", str(tmp_path / "results")], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=900)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "auth_token" in refused.stderr and "Traceback" not in refused.stderr
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert "RAY_AUTH_MODE=token" in joined.stderr
    frame = pd.read_csv(tmp_path / "results" / "raw_summary.csv")
    assert len(frame) == 1 and (frame["status"] == "ok").all() and (frame["executor"] == "ray").all()
