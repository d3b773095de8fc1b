"""Loss parity: each experiment's per-step loss against its baseline's, from the folders alone; a setting that
changes the numerics is flagged, one that only reorders the same arithmetic is not."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.harness import REPO, write_inputs
from tunebench.results.parity import band as loss_band
from tunebench.results.parity.verdicts import (
    TOLERANCE,
    Trajectory,
    band_of,
    baseline_of,
    compare,
    parity_columns,
    warning,
)


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


def test_a_named_parity_baseline_is_that_framework_config():
    """foak's fused kernels over fms's GPTQ base are judged against the GPTQ rows (same quantized weights), not the
    unquantized baseline: keys either framework config sets (its plugins, fp16) are left out of the match."""
    gptq_args = {**BASE_ARGS, "fms_plugins": "{gptq}", "fp16": True, "bf16": False}  # bf16 turned off by fp16
    base = run("none", {**BASE_ARGS, "bf16": True}, {1: 2.0}, "b")
    gptq = run("gptq", gptq_args, {1: 2.1}, "g", fc_keys=("fms_plugins", "fp16"))
    foak = Trajectory("k", 1, "s", "gptq-foak", frozenset({"fms_plugins", "fp16"}), 1, "cpu",
                      {**gptq_args, "fms_plugins": "{gptq+foak}"}, {1: 2.1}, parity_baseline="gptq")
    assert baseline_of(foak, [base, gptq, foak]) is gptq
    assert baseline_of(foak, [base, foak]) is None
    assert baseline_of(gptq, [base, gptq, foak]) is base


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
    assert "by up to 5 % over 3 steps (final -1 %; tolerance 0.01 %, no band measured)" in warning(parity)
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


def _band(seed: int, losses: dict, experiment_id: str, **arguments) -> Trajectory:
    return run(f"loss-band-{seed}", {**BASE_ARGS, **arguments, "loss_band_seed": seed}, losses, experiment_id,
               fc_keys=("loss_band_seed",))


def test_the_band_is_the_widest_band_run_and_the_tolerance_twice_it():
    base = run("none", BASE_ARGS, {1: 4.0, 2: 2.0}, "b")
    bands = [_band(1, {1: 4.0, 2: 2.0002}, "r1"), _band(2, {1: 4.0004, 2: 2.0}, "r2")]
    other_lr = _band(3, {1: 9.0, 2: 9.0}, "r3", learning_rate=1.0)  # not the baseline's numerics: not a band run
    not_band = run("fast", {**BASE_ARGS, "loss_band_seed": 1, "torch_compile": True}, {1: 9.0}, "f",
                   fc_keys=("loss_band_seed", "torch_compile"))
    assert loss_band.band_runs(base, [base, *bands, other_lr, not_band]) == bands
    band, why = band_of(base, [base, *bands, other_lr, not_band], "cpu")
    assert band == loss_band.Band(pytest.approx(1e-4), 2, "folder: 2 band run(s)") and why == ""
    assert band.tolerance == pytest.approx(2e-4)
    inside = compare(run("gc", BASE_ARGS, {1: 4.0, 2: 2.0003}, "g"), base, band)
    outside = compare(run("opt", BASE_ARGS, {1: 4.0, 2: 2.0005}, "o"), base, band)
    assert inside["loss_parity_ok"] is True and outside["loss_parity_ok"] is False
    assert outside["loss_parity_band"] == pytest.approx(1e-4) and outside["loss_parity_band_runs"] == 2
    assert "band of repeat noise 0.01 % from the folder: 2 band run(s)" in warning(outside)
    repeat = run("none", BASE_ARGS, {1: 4.0, 2: 2.001}, "b", repeat=2)  # another run of the baseline is one too
    assert band_of(base, [base, repeat], "cpu")[0].width == pytest.approx(5e-4)


def test_a_last_bit_band_run_widens_the_band_like_any_band_run():
    """`loss-band-bits-<k>` sets the band seed and `loss_band_kind: last_bit`: a band run of the same baseline, and
    the band is the widest of all band runs, rows-only or last-bit."""
    base = run("none", BASE_ARGS, {1: 4.0, 2: 2.0}, "b")
    rows = _band(1, {1: 4.0, 2: 2.0002}, "r1")
    bits = run("loss-band-bits-1", {**BASE_ARGS, "loss_band_seed": 1, "loss_band_kind": "last_bit"},
               {1: 4.0, 2: 2.0008}, "x", fc_keys=("loss_band_seed", "loss_band_kind"))
    assert loss_band.band_runs(base, [base, rows, bits]) == [rows, bits]
    band, _ = band_of(base, [base, rows, bits], "cpu")
    assert band.width == pytest.approx(4e-4) and band.runs == 2


def test_without_band_runs_the_kept_band_then_the_fixed_tolerance_with_the_reason(tmp_path, monkeypatch):
    table = tmp_path / "loss_band.csv"
    kept = {"source": "docs/evidence/x.md", "device": "NVIDIA H100 80GB HBM3", "torch_dtype": "float32",
            "model_name_or_path": "preset:llama-tiny", "peft_method": "none", "synthetic_corpus": "markov",
            "learning_rate": 1e-3, "max_steps": 20, "runs": 3, "band_max_rel_diff": 3e-5}
    pd.DataFrame([kept]).to_csv(table, index=False)
    monkeypatch.setattr(loss_band, "BAND_FILE", table)
    args = {**BASE_ARGS, "learning_rate": 0.001, "max_steps": 20}
    base = run("none", args, {1: 4.0}, "b")
    band, _ = band_of(base, [base], "NVIDIA H100 80GB HBM3")
    assert band == loss_band.Band(3e-5, 3, "table: docs/evidence/x.md") and band.tolerance == 6e-5
    none, why = band_of(base, [base], "NVIDIA H200")  # another device: nothing kept
    assert none is None and "NVIDIA H200" in why and "learning_rate=0.001" in why
    parity = compare(run("x", args, {1: 4.0}, "x"), base, none, why)
    assert parity["loss_parity_tolerance"] == TOLERANCE["float32"]
    assert parity["loss_parity_band_source"].startswith("none: no band runs") and "fixed float32" in \
        parity["loss_parity_band_source"]
    identical = _band(1, {1: 4.0}, "r1", learning_rate=0.001, max_steps=20)
    _, bit = band_of(base, [base, identical], "cpu")
    assert "repeat the baseline to the bit" in bit
    rows = loss_band.band_rows(pd.DataFrame([{
        "experiment_id": "b", "framework_config": "none", "gpu_name": "NVIDIA H200", "device_type": "cuda",
        "loss_parity_band_source": "folder: 3 band run(s)", "loss_parity_band_runs": 3, "loss_parity_band": 2e-5,
        **args}]), "docs/evidence/y.md")
    assert rows.iloc[0]["synthetic_corpus"] == "markov" and rows.iloc[0]["peft_method"] == "none"  # defaults
    pd.concat([pd.read_csv(table), rows]).to_csv(table, index=False)
    loss_band.band_table.cache_clear()
    assert band_of(base, [base], "NVIDIA H200")[0].source == "table: docs/evidence/y.md"
    loss_band.band_table.cache_clear()


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


REORDERED = ("gradient-checkpointing", "attn-eager")
PERTURBED_OPTIMIZER = ("adam-beta2", "adamw-8bit")


@pytest.fixture(scope="module")
def parity_run(tmp_path_factory):
    """One real CPU matrix on the learnable corpus (float32, llama-tiny, 12 steps): the baseline, its three band
    runs (the shipped `loss-band-<k>` configs), two reorderings of the same arithmetic, two perturbed optimizers
    (β2 0.999 → 0.99; bitsandbytes' 8-bit AdamW where bitsandbytes imports) and rows packed without per-sequence
    masks (functionary#265's bug)."""
    import yaml

    shipped = yaml.safe_load((REPO / "framework_configs.yaml").read_text())["framework_configs"]
    configs = {name: shipped[name] for name in ("loss-band-1", "loss-band-2", "loss-band-3", *REORDERED)}
    configs["adam-beta2"] = {"arguments": {"adam_beta2": 0.99}}
    if importlib.util.find_spec("bitsandbytes") is not None:
        configs["adamw-8bit"] = {"arguments": {"optim": "adamw_bnb_8bit"}}
    configs["cross-attend"] = {"arguments": {"packing": True, "packing_strategy": "wrapped", "padding_free": False}}
    scenario = {"name": "parity", "framework_config": [None, *configs],
                "arguments": {"model_name_or_path": ["preset:llama-tiny"], "learning_rate": 3e-3,
                              "per_device_train_batch_size": 4, "max_steps": 12, "synthetic_min_len": 8}}
    tmp_path = tmp_path_factory.mktemp("parity")
    options = write_inputs(tmp_path, [scenario], framework_configs=configs)
    out = tmp_path / "results"
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv").set_index("framework_config")
    assert set(frame["status"]) == {"ok"}
    return frame, proc.stdout


@pytest.mark.slow
def test_a_perturbed_optimizer_is_flagged_and_a_reordered_computation_is_not(parity_run):
    """Judged by the band of the baseline's own repeat noise measured beside it. The reorderings stay within
    float32 rounding (at most 1e-6, the tolerance's floor); the perturbed optimizers move the loss by 80× that or
    more, so the verdicts hold with a wide margin on any machine."""
    frame, stdout = parity_run
    assert (frame["loss_parity_band_source"] == "folder: 3 band run(s)").all()
    tolerance = frame.loc["none", "loss_parity_tolerance"]
    assert tolerance == max(2 * frame.loc["none", "loss_parity_band"], 1e-6)
    for same in (*REORDERED, "loss-band-1", "loss-band-2", "loss-band-3"):
        assert frame.loc[same, "loss_parity_max_rel_diff"] <= 1e-6, same  # the float32 reordering noise
        assert bool(frame.loc[same, "loss_parity_ok"]), same
    for changed in (c for c in (*PERTURBED_OPTIMIZER, "cross-attend") if c in frame.index):
        assert not bool(frame.loc[changed, "loss_parity_ok"]), changed
        assert frame.loc[changed, "loss_parity_max_rel_diff"] > 10 * tolerance, changed
        assert "changes the numerics" in frame.loc[changed, "measurement_warning"]
    assert "cross-attend" in stdout  # the console's warning list names it


@pytest.mark.slow
def test_every_row_states_the_floor_and_its_time_to_target(parity_run):
    frame, _ = parity_run
    assert (frame["data_entropy_floor_nats"] == math.log(2)).all()
    assert frame["loss_target_steps"].notna().all() and (frame["loss_target_steps"] <= 12).all()
    target = frame["loss_first_step"] - 0.2 * (frame["loss_first_step"] - math.log(2))
    assert np.allclose(frame["loss_target"], target)
    # the reorderings reach it at the baseline's step, with the baseline's tokens
    for same in REORDERED:
        assert frame.loc[same, "loss_target_steps"] == frame.loc["none", "loss_target_steps"]
        assert frame.loc[same, "loss_target_tokens"] == frame.loc["none", "loss_target_tokens"]


def test_the_report_shows_parity_and_time_to_target_beside_the_speed_up():
    from tunebench.results.report import acceleration as report_acceleration

    df = pd.DataFrame([
        {"experiment_id": "b", "framework_config": "none", "_status": "ok", "loss_parity_baseline": "b",
         "steady_nonpad_tokens_per_second": 100.0, "mem_peak_torch_max_allocated_bytes": 1000,
         "loss_parity_max_rel_diff": 0.0, "loss_parity_ok": True, "loss_target_seconds": 30.0},
        {"experiment_id": "f", "framework_config": "fast", "_status": "ok", "loss_parity_baseline": "b",
         "steady_nonpad_tokens_per_second": 150.0, "mem_peak_torch_max_allocated_bytes": 500,
         "loss_parity_max_rel_diff": 0.05, "loss_parity_ok": False, "loss_target_seconds": 40.0},
    ])
    text = report_acceleration.section(df, pd.Series(["base", "fast"]), pd.Series(["", ""]))
    assert "1.50×" in text and "0.50×" in text and "5 % (beyond tolerance)" in text
    assert "0.75×" in text  # 1.5× the tokens/s, yet 30 s ÷ 40 s to the target loss: slower where it counts
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
