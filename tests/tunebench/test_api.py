"""The Python API (tunebench.api): `tunebench.Matrix.from_yaml(...)` and `tunebench.plan(matrix)` give what
`benchmark.py plan` gives, typed options in and a DataFrame out, and bad input is one InputError naming it.

Reached through the modules it calls (the API's planning and its words): tunebench/api/planning.py,
tunebench/api/words.py."""

import subprocess
import sys

import pandas as pd
import pytest

import tunebench
from tests.fixtures.harness import REPO


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_plan_from_python_holds_the_numbers_of_benchmark_py_plan(tmp_path):
    matrix = tunebench.Matrix.from_yaml(str(REPO / "scenarios-cpu.yaml"), device="cpu")
    frame = tunebench.plan(matrix)
    out = tmp_path / "plan"
    done = subprocess.run([sys.executable, str(REPO / "benchmark.py"), "plan", "--scenarios_config_path",
                           str(REPO / "scenarios-cpu.yaml"), "--device", "cpu", "--results_output_path", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    cli = pd.read_csv(out / "plan.csv")
    assert len(frame) == len(cli) == len(matrix.experiments) > 0
    columns = [c for c in cli.columns if c.startswith("pred_mem_")] + ["experiment_id", "scenario"]
    mine = frame[columns].sort_values("experiment_id").reset_index(drop=True)
    theirs = cli[columns].sort_values("experiment_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, theirs, check_dtype=False)


def test_bad_input_is_one_error_naming_the_file_or_the_argument(tmp_path):
    bad = tmp_path / "scenarios.yaml"
    bad.write_text("scenarios:\n  - name: s\n    arguments:\n      max_steps: -3\n")
    with pytest.raises(tunebench.InputError) as raised:
        tunebench.Matrix.from_yaml(str(bad), device="cpu")
    assert any(str(bad) in str(p) and "max_steps" in str(p) for p in raised.value.problems), raised.value.problems
    with pytest.raises(tunebench.InputError) as raised:
        tunebench.Matrix.from_yaml(str(bad), batch_size=[4])
    assert raised.value.problems[0].key == "batch_size" and "no such option" in raised.value.problems[0].message


def test_importing_tunebench_does_not_import_the_api_until_it_is_used():
    done = subprocess.run([sys.executable, "-c", "import sys, tunebench; print('tunebench.api.matrix' in sys.modules)"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.stdout.strip() == "False", done.stderr[-1000:]


def test_scenarios_built_in_python_are_checked_as_a_files_are(tmp_path):
    with pytest.raises(tunebench.InputError) as raised:
        tunebench.Matrix.from_scenarios([{"name": "s", "arguments": {"model_name_or_path": ["preset:llama-tiny"],
                                                                     "max_steps": -3}}], device="cpu")
    problem = next(p for p in raised.value.problems if "max_steps" in p.key)
    assert problem.source == "Matrix.from_scenarios" and "scenario 's'" in problem.key
    with pytest.raises(tunebench.InputError) as raised:
        tunebench.Matrix.from_scenarios([{"arguments": {}}], device="gpu")
    assert {p.key for p in raised.value.problems} == {"device", "scenarios[0].name"}


def test_tune_options_from_python_are_checked_in_the_options_words(tmp_path):
    options = tunebench.TuneOptions(model="preset:llama-tiny", device="cpu", effective_batch=6, micro_batches=(4,),
                                    results_output_path=str(tmp_path / "t"))
    with pytest.raises(tunebench.InputError) as raised:
        tunebench.tune(options)
    assert [(p.source, p.key) for p in raised.value.problems] == [("TuneOptions", "micro_batches")]
    assert "effective_batch=6 / num_gpus=1" in raised.value.problems[0].message  # no `--option` of the CLI
    assert not (tmp_path / "t").exists()  # nothing created before the options are right


def test_the_search_neither_parses_an_argv_nor_writes_yaml_to_run_a_batch():
    """tunebench/tuning/ drives the pipeline through the Python API: no argparse anywhere in it, and the only
    YAML it writes is the winner's scenarios file for the user (output.py)."""
    import ast

    offenders = []
    for path in sorted((REPO / "tunebench" / "tuning").glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                 for alias in node.names} | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        calls = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Attribute)}
        if "argparse" in names or "parse_args" in calls or "parse_known_args" in calls:
            offenders.append(f"{path.name}: argparse")
        if path.name != "output.py" and ({"safe_dump", "dump"} & calls or "tempfile" in names):
            offenders.append(f"{path.name}: writes YAML or temporary files")
    assert offenders == []


@pytest.mark.slow
def test_the_python_example_plans_runs_compares_and_plots(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "examples" / "python_api.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compare against itself: exit code 0, 0 regression(s)" in done.stdout
    frame = pd.read_csv(tmp_path / "run" / "raw_summary.csv")
    assert list(frame["status"]) == ["ok"] * 3 and frame["pred_mem_peak"].notna().all()
    assert (tmp_path / "run" / "report.html").is_file()
    assert (tmp_path / "throughput-vs-memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


UNGUARDED = '''
import sys
import tunebench
matrix = tunebench.Matrix.from_scenarios([{"name": "s", "arguments": {
    "model_name_or_path": ["preset:llama-tiny"], "max_steps": 6, "max_seq_len": 16, "synthetic_num_samples": 8,
    "steady_warmup_steps": 2, "steady_min_steps": 2, "torch_dtype": "float32", "bf16": False}}], device="cpu")
print("planned", len(tunebench.plan(matrix)))
result = tunebench.run(matrix, tunebench.RunSettings(results_output_path=sys.argv[1]))
print("statuses", list(result.frame["status"]), result.frame["steady_nonpad_tokens_per_second"].notna().all())
'''


@pytest.mark.slow
def test_a_script_without_a_main_guard_plans_and_runs(tmp_path):
    """Issue W2: the forkserver re-ran the user's module (no `if __name__ == "__main__":`) in every experiment,
    which then found the results folder held by its own harness. The script's experiments fork from the preload
    server now without running the script again."""
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("planned 1") == 1 and "statuses ['ok'] True" in done.stdout, done.stdout
    assert "in use by" not in done.stderr


def test_a_process_the_harness_started_is_told_to_guard_its_script(tmp_path, monkeypatch):
    """The lock's refusal, when its holder is the harness that started this process: not "wait for that harness"
    (which is this one's parent, and waits for it), but the guard the script lacks."""
    import os

    from tunebench.lifetime.parent_death import HARNESS_PID_ENV
    from tunebench.results.folder import results_lock

    with results_lock(tmp_path / "out"):
        monkeypatch.setenv(HARNESS_PID_ENV, str(os.getpid()))
        real = os.getpid()
        monkeypatch.setattr(os, "getpid", lambda: real + 1)  # this process, as a child of the holder sees itself
        with pytest.raises(tunebench.InputError) as raised:
            with results_lock(tmp_path / "out"):
                pass
    (problem,) = raised.value.problems
    assert "started by the harness that holds the folder" in problem.message
    assert problem.fix == 'put the script\'s calls under `if __name__ == "__main__":`'


def test_a_frame_whose_rows_all_failed_has_the_key_columns(tmp_path):
    """Issue W2: a matrix whose experiments all failed gave a frame without the metric columns, and a script
    reading them died with a KeyError; the summary table of such rows no longer fails either."""
    from tunebench.results import summaries

    rows = [{"experiment_id": "a", "scenario": "s", "status": "error", "error_messages": "exit code 1"}]
    frame = summaries.with_key_columns(summaries.collect(rows))
    assert frame["steady_nonpad_tokens_per_second"].isna().all() and list(frame["status"]) == ["error"]
    assert "error" in summaries.summary_table(summaries.collect(rows))
    matrix = tunebench.Matrix.from_scenarios(
        [{"name": "s", "arguments": {"model_name_or_path": ["preset:llama-tiny"]}}], device="cpu"
    )
    dry = tunebench.run(matrix, tunebench.RunSettings(results_output_path=str(tmp_path / "o"), dry_run=True))
    assert set(summaries.KEY_METRICS) <= set(dry.frame.columns)
