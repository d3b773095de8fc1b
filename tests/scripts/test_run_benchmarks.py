"""scripts/run_benchmarks.sh: argument mapping, DRY_RUN, and that it never deletes what tunebench did not make."""

import os
import subprocess

import pytest

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs

SCRIPT = REPO / "scripts" / "run_benchmarks.sh"


def run_script(*args, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **{k: str(v) for k, v in env.items()}}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=full_env,
                          timeout=600, cwd=REPO)


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_refuses_a_dangerous_result_dir():
    """The script hands its RESULT_DIR to benchmark.py and passes its refusal on. Which folders are refused (/, the
    repository, home and its ancestors) is the harness's check, tested in process: tests/tunebench/results/
    test_folder.py::test_paths_that_are_never_results_folders."""
    proc = run_script("1", "", "/", DRY_RUN="false")
    assert proc.returncode == 2 and "--results_output_path" in proc.stderr and "Traceback" not in proc.stderr
    assert (REPO / "README.md").is_file()


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_a_dry_run_then_a_run_never_delete_a_folder_it_did_not_create(tmp_path):
    # Issue J's repro: the dry run used to drop its marker into any folder, and the next run rm -rf'ed it. After the
    # dry run, a run with each of the script's ways to write (--overwrite by default, NO_OVERWRITE's resume).
    options = write_inputs(tmp_path, [tiny_scenario("alpha")])
    foreign = tmp_path / "F"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "keep.txt").write_text("keep")
    for flags in ({"DRY_RUN": "true"}, {}, {"NO_OVERWRITE": "true"}):
        proc = run_script("1", "", foreign, options[1], "", **flags)
        assert proc.returncode == 2 and "holds files tunebench did not write" in proc.stderr, (flags,
                                                                                               proc.stderr[-2000:])
        assert (foreign / "keep.txt").read_text() == "keep" and (foreign / "sub").is_dir()
        assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt", "sub"]  # not even a marker


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_an_ancestor_of_home_is_refused_and_nothing_is_deleted(tmp_path):
    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    (home / "thesis.tex").write_text("precious")
    # home itself is refused too: tests/tunebench/results/test_folder.py::test_paths_that_are_never_results_folders
    proc = run_script("1", "", tmp_path / "home", HOME=str(home))
    assert proc.returncode == 2 and "home directory" in proc.stderr
    assert (home / "thesis.tex").read_text() == "precious"


def test_the_script_deletes_nothing_itself():
    text = SCRIPT.read_text()
    assert "rm " not in text and "rmdir" not in text and "mkdir" not in text


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_dry_run_maps_arguments_and_marks_the_folder_it_created(tmp_path):
    options = write_inputs(tmp_path, [tiny_scenario("alpha"), tiny_scenario("beta")])
    out = tmp_path / "results"
    proc = run_script("1 2", "4", out, options[1], "beta", DRY_RUN="true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / ".tunebench-results").is_file() and not (out / "pip-freeze.txt").exists()  # a dry run records no run
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
    assert (out / "pip-freeze.txt").stat().st_size > 0
    (out / "notes.txt").write_text("mine")  # a user's file in tunebench's folder: never deleted
    first = next(out.glob("alpha_*"))
    (first / "stale.json").write_text("{}")  # nor a user's file inside an experiment folder
    proc = run_script("1", "", out, options[1], NO_OVERWRITE="true", **env)
    assert proc.returncode == 0 and "resume" in proc.stderr
    before = (first / "stdout.log").stat().st_mtime_ns
    proc = run_script("1", "", out, options[1], **env)
    assert proc.returncode == 0 and "--overwrite: removed 0 earlier" in proc.stdout, proc.stdout[-2000:]
    assert (out / "notes.txt").read_text() == "mine" and (first / "stale.json").is_file()
    assert "already completed" not in proc.stderr  # its results were removed, so it ran again
    assert (first / "stdout.log").stat().st_mtime_ns != before and (first / "results.json").is_file()
    assert (out / "raw_summary.csv").is_file()
