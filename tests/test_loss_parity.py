"""Loss parity: each experiment's per-step loss against its baseline's, from the folders alone; a setting that
changes the numerics is flagged, one that only reorders the same arithmetic is not."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from harness_fixtures import REPO, write_inputs
from hypothesis import given, settings
from hypothesis import strategies as st

from tunebench.results.loss_parity import TOLERANCE, Trajectory, baseline_of, compare, parity_columns, warning


def run(fc: str, arguments: dict, losses: dict, experiment_id: str, fc_keys=(), scenario="s", repeat=1):
    return Trajectory(experiment_id, repeat, scenario, fc, frozenset(fc_keys), 1, "cpu", arguments, losses)


BASE_ARGS = {"model_name_or_path": "preset:llama-tiny", "seed": 42, "torch_dtype": "float32", "max_seq_len": 64}


def test_baseline_is_the_null_config_with_the_same_arguments_but_the_config_keys():
    base = run("none", BASE_ARGS, {1: 2.0}, "b")
    other_seed = run("none", {**BASE_ARGS, "seed": 1}, {1: 2.0}, "x")
    other_scenario = run("none", BASE_ARGS, {1: 2.0}, "y", scenario="t")
    fast = run("fast", {**BASE_ARGS, "torch_compile": True}, {1: 2.0}, "f", fc_keys=("torch_compile",))
    assert baseline_of(fast, [other_seed, other_scenario, base, fast]) is base
    assert baseline_of(base, [base]) is base  # a baseline is compared with itself
    assert baseline_of(fast, [other_seed, other_scenario]) is None


def test_repeats_pair_with_the_same_repeat():
    bases = [run("none", BASE_ARGS, {1: 2.0}, "b", repeat=k) for k in (1, 2)]
    fast = run("fast", BASE_ARGS, {1: 2.0}, "f", repeat=2)
    assert baseline_of(fast, bases).repeat == 2


def test_exact_figures_and_the_warning():
    base = run("none", BASE_ARGS, {1: 4.0, 2: 2.0, 3: 1.0}, "b")
    moved = run("fast", BASE_ARGS, {1: 4.0, 2: 2.1, 3: 0.99, 4: 7.0}, "f")
    parity = compare(moved, base)
    assert parity["loss_parity_steps"] == 3
    assert parity["loss_parity_max_rel_diff"] == pytest.approx(0.05)
    assert parity["loss_parity_final_rel_diff"] == pytest.approx(-0.01)
    assert parity["loss_parity_tolerance"] == TOLERANCE["float32"] and parity["loss_parity_ok"] is False
    assert "by up to 5 % over 3 steps (final -1 %; tolerance 0.01 %)" in warning(parity)
    assert warning(compare(base, base)) is None


@settings(max_examples=200, deadline=None)
@given(losses=st.lists(st.floats(0.01, 100, allow_nan=False), min_size=1, max_size=40),
       scale=st.floats(-0.5, 0.5, allow_nan=False))
def test_the_flag_is_exactly_the_tolerance(losses, scale):
    """Generated trajectories moved by a known relative amount: flagged exactly when it exceeds the tolerance."""
    base = run("none", BASE_ARGS, dict(enumerate(losses, 1)), "b")
    moved = run("fast", BASE_ARGS, {k: v * (1 + scale) for k, v in base.losses.items()}, "f")
    parity = compare(moved, base)
    assert parity["loss_parity_max_rel_diff"] == pytest.approx(abs(scale), abs=1e-12)
    if abs(abs(scale) - TOLERANCE["float32"]) > 1e-12:
        assert parity["loss_parity_ok"] is (abs(scale) <= TOLERANCE["float32"])


def _folder(root, name, spec, steps):
    folder = root / name
    folder.mkdir()
    (folder / "spec.json").write_text(json.dumps(spec))
    (folder / "steps.json").write_text(json.dumps(steps))
    (folder / "results.json").write_text(json.dumps({"experiment_id": spec["experiment_id"], "status": "ok"}))
    return folder


def test_columns_come_from_the_folders_and_damaged_ones_are_left_out(tmp_path):
    spec = {"experiment_id": "b", "scenario": "s", "framework_config": "none", "num_gpus": 1, "device_type": "cpu",
            "repeat": 1, "arguments": BASE_ARGS, "framework_config_detail": {"arguments": {}}}
    _folder(tmp_path, "s_b", spec, [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}])
    _folder(tmp_path, "s_f", {**spec, "experiment_id": "f", "framework_config": "fast",
                              "framework_config_detail": {"arguments": {"torch_compile": True}}},
            [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}])
    _folder(tmp_path, "s_g", {**spec, "experiment_id": "g", "framework_config": "broken"},
            [{"step": "one", "loss": float("nan")}, "junk"])
    frame = pd.DataFrame([{"experiment_id": e, "status": "ok", "repeat": 1, "measurement_warning": ""}
                          for e in ("b", "f", "g")])
    out = parity_columns(tmp_path, frame).set_index("experiment_id")
    assert out.loc["b", "loss_parity_max_rel_diff"] == 0.0 and out.loc["b", "loss_parity_baseline"] == "b"
    assert out.loc["f", "loss_parity_max_rel_diff"] == pytest.approx(0.5)
    assert out.loc["f", "loss_parity_ok"] is False and "changes the numerics" in out.loc["f", "measurement_warning"]
    assert pd.isna(out.loc["g", "loss_parity_baseline"])  # no readable trajectory: no figures, no guess


@pytest.mark.slow
def test_a_setting_that_changes_the_numerics_is_flagged_and_reorderings_are_not(tmp_path):
    """Real CPU runs of one scenario: gradient checkpointing and eager attention redo the same float32
    arithmetic (within the tolerance: the float32 measurement the tolerance rests on), while packing rows
    without per-sequence masks lets tokens attend across sequences (functionary#265's bug): flagged."""
    scenario = {"name": "parity", "framework_config": [None, "gradient-checkpointing", "attn-eager", "cross-attend"],
                "arguments": {"model_name_or_path": ["preset:llama-tiny"], "learning_rate": 3e-3,
                              "synthetic_length_distribution": "uniform", "synthetic_min_len": 8}}
    configs = {"gradient-checkpointing": {"arguments": {"gradient_checkpointing": True}},
               "attn-eager": {"arguments": {"attn_implementation": "eager"}},
               "cross-attend": {"arguments": {"packing": True, "packing_strategy": "wrapped", "padding_free": False}}}
    options = write_inputs(tmp_path, [scenario], framework_configs=configs)
    out = tmp_path / "results"
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv").set_index("framework_config")
    assert set(frame["status"]) == {"ok"}
    for same in ("gradient-checkpointing", "attn-eager"):
        assert frame.loc[same, "loss_parity_max_rel_diff"] <= 1e-6, same  # the float32 reordering noise
        assert bool(frame.loc[same, "loss_parity_ok"])
    assert not bool(frame.loc["cross-attend", "loss_parity_ok"])
    assert frame.loc["cross-attend", "loss_parity_max_rel_diff"] > 10 * TOLERANCE["float32"]
    assert "changes the numerics" in frame.loc["cross-attend", "measurement_warning"]
    assert "cross-attend" in proc.stdout  # the console's warning list names it


def test_the_report_shows_parity_beside_the_speed_up():
    from tunebench.results import report_acceleration

    df = pd.DataFrame([
        {"experiment_id": "b", "framework_config": "none", "_status": "ok", "loss_parity_baseline": "b",
         "steady_nonpad_tokens_per_second": 100.0, "mem_peak_torch_max_allocated_bytes": 1000,
         "loss_parity_max_rel_diff": 0.0, "loss_parity_ok": True},
        {"experiment_id": "f", "framework_config": "fast", "_status": "ok", "loss_parity_baseline": "b",
         "steady_nonpad_tokens_per_second": 150.0, "mem_peak_torch_max_allocated_bytes": 500,
         "loss_parity_max_rel_diff": 0.05, "loss_parity_ok": False},
    ])
    text = report_acceleration.section(df, pd.Series(["base", "fast"]), pd.Series(["", ""]))
    assert "1.50×" in text and "0.50×" in text and "5 % (beyond tolerance)" in text
    assert text.count("<tr") == 2  # the header and the one accelerated row: the baseline is not beside itself


def test_a_row_without_parity_says_why(tmp_path):
    """Issue W2: when the baseline row was missing or failed, the parity columns were empty and nothing said why."""
    spec = {"experiment_id": "f", "scenario": "s", "framework_config": "fast", "num_gpus": 1, "device_type": "cpu",
            "repeat": 1, "arguments": BASE_ARGS, "framework_config_detail": {"arguments": {"torch_compile": True}}}
    _folder(tmp_path, "s_f", spec, [{"step": 1, "loss": 2.0}])
    row = {"experiment_id": "f", "scenario": "s", "framework_config": "fast", "num_gpus": 1, "status": "ok"}
    alone = parity_columns(tmp_path, pd.DataFrame([row])).iloc[0]
    assert alone["loss_parity_note"] == ("no baseline in this folder: add framework config `none` (null) to scenario "
                                         "'s' on 1 device(s), with the same arguments")
    failed = {**row, "experiment_id": "b", "framework_config": "none", "status": "oom"}
    frame = parity_columns(tmp_path, pd.DataFrame([row, failed]))
    assert frame["loss_parity_note"].tolist() == ["its baseline b ended oom: no loss to compare with", None]
    assert "loss_parity_max_rel_diff" not in frame.columns  # no figure is guessed
