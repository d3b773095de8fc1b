"""Every command the README shows, run for real on this CPU machine (issue I): the quickstart's main job, the
README's matrix, side by side, plan, verify, compare, report, the column tables and the packing benchmark.

Commands written for a GPU machine run here with their CPU equivalent where the README says so (the CPU
scenario set instead of scenarios.yaml); their GPU runs are in docs/evidence.
"""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.harness import REPO

pytestmark = pytest.mark.slow

SCRIPT = REPO / "scripts" / "run_benchmarks.sh"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "TUNEBENCH_CACHE": str(tmp_path_factory.mktemp("cache"))}


def sh(args: list[str], env: dict, cwd: Path = REPO, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_tox_env_runs_the_script_the_readme_names():
    import configparser

    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    assert tox["testenv:run-benches"]["commands"].strip() == "bash scripts/run_benchmarks.sh {posargs}"


def test_quickstart_main_job(tmp_path, env):
    proc = sh(["bash", str(SCRIPT)], env, cwd=tmp_path)  # = tox -e run-benches, from a fresh folder
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(tmp_path / "results" / "benchmarks.csv")
    assert len(frame) == 4 and (frame["status"] == "ok").all()
    assert "steady_nonpad_tokens_per_second" in frame.columns


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, env):
    folder = tmp_path_factory.mktemp("matrix")
    # tox -e run-benches -- "1 2" "4 8" results
    proc = sh(["bash", str(SCRIPT), "1 2", "4 8", "results"], env, cwd=folder)
    return folder, proc


def test_readme_matrix_every_row_ok(matrix):
    folder, proc = matrix
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(folder / "results" / "raw_summary.csv")
    assert len(frame) == 16, frame[["scenario", "num_gpus", "effective_batch_size", "status"]]
    assert (frame["status"] == "ok").all(), frame.loc[frame["status"] != "ok", "error_messages"].tolist()
    lora2 = frame[(frame["peft_method"] == "lora") & (frame["num_gpus"] == 2)]
    assert len(lora2) == 4  # the rows the launcher's abbreviation bug used to break
    # 2 processes (gloo) at effective batch 8 do the work per process of 1 process at 4: their twins (issue Y)
    two = frame[(frame["num_gpus"] == 2) & (frame["effective_batch_size"] == 8)]
    for row in two.itertuples():
        twin = frame[frame["experiment_id"] == row.scaling_baseline_id].iloc[0]
        assert (twin.num_gpus, twin.effective_batch_size, twin.scenario, twin.framework_config) == (
            1, 4, row.scenario, row.framework_config)
        assert row.scaling_efficiency == row.steady_nonpad_tokens_per_second / (
            2 * twin.steady_nonpad_tokens_per_second
        )
    assert frame.loc[frame["effective_batch_size"] == 4, "scaling_baseline_id"].isna().all()  # other work per process


def test_readme_filtered_matrix_resumes_on_the_same_folder(matrix, env):
    folder, _ = matrix
    proc = sh(["bash", str(SCRIPT), "1 2", "4 8", "results", str(REPO / "scenarios-cpu.yaml"), "standard-peft"],
              {**env, "NO_OVERWRITE": "true"}, cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("already completed") == 8  # the 8 standard-peft experiments are reused


@pytest.fixture(scope="module")
def out(tmp_path_factory, env):
    out = tmp_path_factory.mktemp("readme") / "out"
    proc = sh([sys.executable, "benchmark.py", "--results_output_path", str(out), "--max_concurrent", "2"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_side_by_side_then_plain_run_resumes(out, env):
    frame = pd.read_csv(out / "raw_summary.csv")
    assert (frame["status"] == "ok").all() and frame["concurrent_experiments"].max() >= 1
    proc = sh([sys.executable, "benchmark.py", "--results_output_path", str(out)], env)
    assert proc.returncode == 0 and proc.stderr.count("already completed") == 4


def test_compare_and_report(out, env):
    proc = sh([sys.executable, "benchmark.py", "compare", "--reference", "refs/cpu.csv", "--results", str(out),
               "--metrics", "scan_mem_*", "train_loss"], env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = sh([sys.executable, "benchmark.py", "report", str(out)], env)
    assert proc.returncode == 0 and (out / "report.html").stat().st_size > 10_000


def test_plan_for_a_gpu_on_this_machine(tmp_path, env):
    proc = sh([sys.executable, "benchmark.py", "plan", "--plan_device", "NVIDIA H100 80GB HBM3",
               "--run_only_scenarios", "full-finetuning", "--results_output_path", str(tmp_path)], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = pd.read_csv(tmp_path / "plan.csv")
    assert len(plan) == 2 and plan["pred_fits"].all()
    assert (plan["pred_mem_params"] == 2 * 1_235_814_400).all()  # the 1B preset's bf16 weights, exactly
    assert (plan["device_type"] == "cuda").all()  # the GPU named: a CUDA plan (README "A GPU named is a GPU planned")


def test_verify(env):
    proc = sh([sys.executable, "benchmark.py", "verify"], env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "scanner vs MemTracker" in proc.stdout


def test_column_tables_command():
    proc = subprocess.run([sys.executable, "-m", "tunebench.results.columns.docs"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "are current" in proc.stdout


def test_matrix_packing_benchmark(tmp_path, env):
    proc = sh([sys.executable, "scripts/bench/matrix_packing.py", "--out", str(tmp_path), "--steps", "20"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"wall_over_ideal"' in (tmp_path / "packing.json").read_text()
