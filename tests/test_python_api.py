"""The Python API (tunebench.api): `tunebench.Matrix.from_yaml(...)` and `tunebench.plan(matrix)` give what
`benchmark.py plan` gives, typed options in and a DataFrame out, and bad input is one InputError naming it."""

import subprocess
import sys

import pandas as pd
import pytest
from harness_fixtures import REPO

import tunebench


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
