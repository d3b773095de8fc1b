"""`benchmark.py plan --fit_map` (tunebench.planning.fit_map): the search finds the exact largest micro-batch for
any monotone verdict, and on CPU (a budget via --plan_device) real runs at the map's micro-batch and one beyond
measure what the predictions that drew the line said."""

import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench.planning.fit_map import LIMIT, largest_fitting


@settings(max_examples=300, deadline=None)
@given(st.integers(0, LIMIT), st.integers(-5, LIMIT + 5))
def test_the_search_finds_the_largest_fitting_micro_batch_from_any_guess(edge, guess):
    asked = []

    def fits(batch):
        assert 1 <= batch <= LIMIT
        asked.append(batch)
        return batch <= edge

    assert largest_fitting(fits, guess) == edge
    assert len(asked) <= 4 * LIMIT.bit_length()  # doubling out, then halving: logarithmic


@pytest.mark.slow
def test_the_map_on_cpu_against_real_runs_at_its_edge_and_beyond(tmp_path):
    """A CPU budget between micro-batch 3's and 4's predictions (seq 64, full rows): the map says 3; the matrix
    run with --plan at 3 and 4 predicts fits / does not fit, and the scanner measures each category of both
    steps as predicted (the CPU's categories, exact on this model:
    tests/tunebench/planning/test_fake_step_conformance.py)."""
    import dataclasses

    from tunebench.planning.fake_step import StepShape
    from tunebench.planning.predict import Sharding, predict

    shape = StepShape("preset:llama-tiny", "float32", 3, 64, padded=False, optimizer="fused")
    low = predict(shape, Sharding(), cuda=False)["pred_mem_peak"]
    high = predict(dataclasses.replace(shape, micro_batch=4), Sharding(), cuda=False)["pred_mem_peak"]
    assert low < high
    budget = (low + high) / 2 / 0.9  # a small budget keeps a tenth for the context: usable = 0.9 × budget
    device = f"{budget / 1024**2:.4f}MiB"
    options = write_inputs(tmp_path, [tiny_scenario(f"b{batch}", synthetic_length_distribution="fixed",
                                                    per_device_train_batch_size=batch) for batch in (3, 4)])
    env = {"TUNEBENCH_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    mapped = subprocess.run([sys.executable, str(REPO / "benchmark.py"), "plan", *options, "--fit_map",
                             "--plan_device", device, "--results_output_path", str(tmp_path / "map")],
                            capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert mapped.returncode == 0, mapped.stderr[-2000:]
    row = pd.read_csv(tmp_path / "map" / "fit_map.csv").iloc[0]
    assert row["max_micro_batch"] == 3 and row["pred_mem_reserved"] == low
    assert row["pred_mem_reserved"] + row["pred_fit_margin_bytes"] < row["next_pred_mem_reserved"] == high
    ran = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--plan", "--plan_device", device,
                          "--results_output_path", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    assert ran.returncode == 0, ran.stderr[-2000:]
    rows = pd.read_csv(tmp_path / "run" / "raw_summary.csv").set_index("per_device_train_batch_size")
    assert list(rows["status"]) == ["ok", "ok"]  # a CPU budget is not enforced: both run, so both are measured
    assert bool(rows.loc[3, "pred_fits"]) and not bool(rows.loc[4, "pred_fits"])
    for batch in (3, 4):
        for category in ("params", "grads", "optimizer", "activations"):
            assert abs(rows.loc[batch, f"pred_error_{category}"]) < 1e-3, (batch, category)


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_a_map_without_a_gpu_or_a_budget_is_refused_with_the_fix(tmp_path):
    options = write_inputs(tmp_path, [tiny_scenario()])
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), "plan", *options, "--fit_map",
                           "--results_output_path", str(tmp_path / "map")], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={"PATH": "/usr/bin:/bin", "TUNEBENCH_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 2
    assert "--fit_map: there is no GPU here to fit to (fix: give --plan_device" in proc.stderr
    assert not (tmp_path / "map" / "fit_map.csv").exists()


def test_an_8bit_row_says_the_micro_batch_its_outlier_columns_were_counted_at(monkeypatch):
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed
    from tunebench.planning import fit_map as fit_map_module

    said = "12 outlier columns over 7 8-bit layers"
    monkeypatch.setattr(fit_map_module, "with_outlier_columns", lambda experiment, shape: (shape, said))
    spec = typed([ExperimentSpec("s", FrameworkConfig("fc"), 1, "cpu", {
        "model_name_or_path": "preset:llama-tiny", "per_device_train_batch_size": 3, "max_seq_len": 32})])[0]
    row = fit_map_module.fit_map([spec], 2 * 1024**3, "a 2 GiB budget", None).iloc[0]
    assert row["pred_note"] == f"8-bit outlier columns counted at micro-batch 3: {said}"
    assert row["max_micro_batch"] > 3


def test_a_zero_byte_device_is_a_not_even_one_row_not_a_python_error():
    """Issue W2: `--plan_device 0GiB` wrote `no prediction (unsupported operand type(s) for -: 'NoneType' and
    'int')`: 0 bytes was taken for "no device". docs/guides/plan.md's 0 ("not even 1") comes with what
    micro-batch 1 needs."""
    import dataclasses

    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed
    from tunebench.planning import fit_map as fit_map_module
    from tunebench.planning.predict import fit_columns, predict, shape_and_sharding

    spec = typed([ExperimentSpec("s", FrameworkConfig("fc"), 1, "cpu", {
        "model_name_or_path": "preset:llama-tiny", "per_device_train_batch_size": 3, "max_seq_len": 32})])[0]
    row = fit_map_module.fit_map([spec], 0, "0GiB", None).iloc[0]
    shape, sharding = shape_and_sharding(spec)
    one = predict(dataclasses.replace(shape, micro_batch=1), sharding, cuda=False)["pred_mem_peak"]
    assert row["max_micro_batch"] == 0 and row["next_pred_mem_reserved"] == one
    assert row["pred_note"] == (f"not even micro-batch 1 fits: it needs {one / 2**20:.1f} MiB reserved, 0.0 KiB of "
                                "the 0.0 KiB device are usable")
    assert fit_columns(one, 0)["pred_fits"] is False and fit_columns(one, None)["pred_fits"] is None
