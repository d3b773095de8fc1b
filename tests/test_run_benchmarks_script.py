"""scripts/run_benchmarks.sh: argument mapping, DRY_RUN, and the rules for deleting a results folder."""

import os
import subprocess

import pytest
from harness_fixtures import REPO, tiny_scenario, write_inputs

SCRIPT = REPO / "scripts" / "run_benchmarks.sh"


def run_script(*args, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **{k: str(v) for k, v in env.items()}}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=full_env,
                          timeout=600, cwd=REPO)


@pytest.mark.parametrize("target", ["/", str(REPO), os.path.expanduser("~")])
def test_refuses_dangerous_result_dirs(target):
    proc = run_script("1", "", target, DRY_RUN="false")
    assert proc.returncode == 2 and "choose a dedicated folder" in proc.stderr


def test_refuses_to_delete_a_folder_it_did_not_create(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    proc = run_script("1", "", foreign)
    assert proc.returncode == 2 and "refusing to delete" in proc.stderr
    assert (foreign / "thesis.tex").read_text() == "precious"


def test_dry_run_maps_arguments_and_writes_marker_and_freeze(tmp_path):
    options = write_inputs(tmp_path, [tiny_scenario("alpha"), tiny_scenario("beta")])
    out = tmp_path / "results"
    proc = run_script("1 2", "4", out, options[1], "beta", DRY_RUN="true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / ".tunebench-results").is_file() and (out / "pip-freeze.txt").stat().st_size > 0
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert len(folders) == 2 and all(f.startswith("beta_") for f in folders)  # 2 GPU counts × only "beta"


@pytest.mark.slow
def test_replaces_its_own_results_unless_no_overwrite(tmp_path):
    # The script takes no defaults file: the scenario itself keeps the run tiny.
    options = write_inputs(tmp_path, [tiny_scenario("alpha", max_steps=3, max_seq_len=32, synthetic_num_samples=16,
                                                    per_device_train_batch_size=2, torch_dtype="float32", bf16=False,
                                                    steady_warmup_steps=1)])
    out = tmp_path / "results"
    env = {"MEMORY_LOGGING": "none", "TUNEBENCH_CACHE": tmp_path / "cache"}
    assert run_script("1", "", out, options[1], **env).returncode == 0
    (out / "stale.txt").write_text("old")
    proc = run_script("1", "", out, options[1], NO_OVERWRITE="true", **env)
    assert proc.returncode == 0 and (out / "stale.txt").exists() and "resume" in proc.stderr
    proc = run_script("1", "", out, options[1], **env)
    assert proc.returncode == 0 and not (out / "stale.txt").exists() and (out / "raw_summary.csv").is_file()
