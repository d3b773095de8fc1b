"""Regression comparison: synthetic reference/results CSVs with known deltas, judged against exact expectations.

Reached through the modules it calls (the comparison's result and markdown):
tunebench/results/compare/result.py, tunebench/results/compare/markdown.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tunebench.cli import compare as compare_cli
from tunebench.results.compare import comparison as compare
from tunebench.results.compare import rules

GIB = 1024**3
TP = "steady_nonpad_tokens_per_second"  # no step samples here: judged by the threshold rule
MEM = "mem_peak_torch_mem_alloc_in_bytes"


def row(**overrides) -> dict:
    """One harness row (CPU run: gpu_name empty) with round metric values."""
    base = {
        "experiment_id": "0123456789ab",
        "scenario": "sft",
        "framework_config": "none",
        "peft_method": "lora",
        "model_name_or_path": "tiny-llama",
        "num_gpus": 1,
        "per_device_train_batch_size": 4,
        "effective_batch_size": 4,
        "max_seq_len": 128,
        "gpu_name": np.nan,
        "lora_alpha": 16,
        "learning_rate": 1e-4,
        "packing": True,
        "status": "ok",
        "error_messages": "",
        "train_loss": 2.0,
        "train_runtime": 100.0,
        TP: 1000.0,
        "steady_mfu": 0.4,
        MEM: 4.0 * GIB,
        "scan_mem_params": 1.0 * GIB,
        "torch_version": "2.11.0",
        "device_type": "cpu",
    }
    base.update(overrides)
    return base


def matrix() -> list[dict]:
    """Three experiments: lora bs=4, lora bs=8, full fine-tune bs=4."""
    return [
        row(),
        row(per_device_train_batch_size=8, effective_batch_size=8, experiment_id="bbbbbbbbbbbb"),
        row(peft_method="none", lora_alpha=np.nan, experiment_id="cccccccccccc"),
    ]


def write(tmp_path, name: str, rows: list[dict]):
    path = tmp_path / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def run(tmp_path, ref_rows, new_rows, *extra):
    ref = write(tmp_path, "ref.csv", ref_rows)
    new = write(tmp_path, "new.csv", new_rows)
    out = tmp_path / "out"
    code = compare_cli.main(["--reference", str(ref), "--results", str(new), "--out", str(out), *extra])
    outliers = pd.read_csv(out / "outliers.csv") if (out / "outliers.csv").exists() else None
    summary = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    return code, outliers, summary, out


def findings(outliers: pd.DataFrame, kind: str) -> set[tuple]:
    sel = outliers[outliers["kind"] == kind]
    return {(r.label, r.metric) if isinstance(r.metric, str) else (r.label,) for r in sel.itertuples()}


# ------------------------------------------------------------------------------------ acceptance 1
def test_throughput_drop_and_memory_rise_are_regressions_exit_1(tmp_path):
    new = matrix()
    new[0][TP] = 800.0  # -20 %
    new[1][MEM] = 4.6 * GIB  # +15 %
    code, outliers, summary, out = run(tmp_path, matrix(), new)
    assert code == 1
    assert findings(outliers, "regression") == {("peft=lora · bs=4", TP), ("peft=lora · bs=8", MEM)}
    reg = outliers[outliers["kind"] == "regression"].set_index("metric")
    assert reg.loc[TP, "delta_pct"] == pytest.approx(-20.0)
    assert reg.loc[TP, "reference"] == 1000.0 and reg.loc[TP, "new"] == 800.0
    assert reg.loc[MEM, "delta_pct"] == pytest.approx(15.0)
    assert reg.loc[MEM, "delta"] == pytest.approx(0.6 * GIB)
    assert reg["regression"].all()
    assert "❌ 2 regression(s)" in summary
    assert f"| peft=lora · bs=4 | {TP} | 1,000.0 | 800.0 | -20.0 % | 10 % | 0.0 % |" in summary
    assert f"| peft=lora · bs=8 | {MEM} | 4.00 GiB | 4.60 GiB | +15.0 % | 10 % | 0.0 % |" in summary
    # One regression per flagged metric: unchanged metrics of the same rows are judged but not listed.
    comparison = pd.read_csv(out / "comparison.csv")
    assert len(comparison) == 3 * 6  # 3 experiments x (loss, runtime, throughput, mfu, mem, scan_mem_params)
    assert (comparison["verdict"] == "within_threshold").sum() == 13
    assert set(comparison.loc[comparison["verdict"] == "ignored", "metric"]) == {"train_runtime"}  # informational


def test_throughput_gain_is_an_improvement_exit_0(tmp_path):
    new = matrix()
    new[0][TP] = 1200.0  # +20 %
    new[2][MEM] = 3.0 * GIB  # -25 % memory is also better
    code, outliers, summary, _ = run(tmp_path, matrix(), new)
    assert code == 0
    assert findings(outliers, "improvement") == {("peft=lora · bs=4", TP), ("peft=none · bs=4", MEM)}
    assert not outliers["regression"].any()
    assert (
        "✅ no regression" in summary and "### Improvements" in summary and "### Regressions" not in summary
    )
    assert "+20.0 %" in summary and "-25.0 %" in summary


def test_change_within_threshold_is_not_flagged(tmp_path):
    new = matrix()
    new[0][TP] = 910.0  # -9 %, threshold 10 %
    new[1][MEM] = 4.4 * GIB  # +10 % exactly: not beyond the threshold
    code, outliers, summary, _ = run(tmp_path, matrix(), new)
    assert code == 0 and outliers.empty
    assert "✅ no regression" in summary


def test_noise_band_from_repeats(tmp_path):
    """Medians of repeats are compared; a change inside the observed spread is noise, outside it is not."""
    noisy_ref = [row(**{TP: v}) for v in (900.0, 1000.0, 1300.0)]  # median 1000, range 400 -> 40 % band
    noisy_new = [row(**{TP: v}) for v in (800.0, 850.0, 1100.0)]  # median 850: -15 %, inside the band
    code, outliers, _, out = run(tmp_path, noisy_ref, noisy_new)
    assert code == 0 and outliers.empty
    cmp = pd.read_csv(out / "comparison.csv").set_index("metric")
    assert cmp.loc[TP, "reference"] == 1000.0 and cmp.loc[TP, "new"] == 850.0
    assert cmp.loc[TP, "noise_pct"] == pytest.approx(40.0)
    assert cmp.loc[TP, "verdict"] == "within_noise"
    assert cmp.loc[TP, "n_reference"] == 3 and cmp.loc[TP, "n_new"] == 3

    tight_ref = [row(**{TP: v}) for v in (990.0, 1000.0, 1010.0)]  # 2 % band
    tight_new = [row(**{TP: v}) for v in (840.0, 850.0, 860.0)]
    code, outliers, _, _ = run(tmp_path, tight_ref, tight_new)
    assert code == 1
    assert outliers.iloc[0]["metric"] == TP and outliers.iloc[0]["noise_pct"] == pytest.approx(2.0)


def test_missing_and_failed_rows_are_regressions(tmp_path):
    new = matrix()
    del new[1]  # bs=8 missing
    trace = 'Traceback (most recent call last):\n  File "x.py", line 3\ntorch.OutOfMemoryError: CUDA out of memory.'
    new[1] = row(peft_method="none", lora_alpha=np.nan, status="oom", error_messages=trace, **{TP: np.nan})
    code, outliers, summary, _ = run(tmp_path, matrix(), new)
    assert code == 1
    assert outliers["kind"].tolist() == ["failed", "missing"]  # worst first
    assert findings(outliers, "missing") == {("peft=lora · bs=8",)}
    assert findings(outliers, "failed") == {("peft=none · bs=4",)}
    failed = outliers[outliers["kind"] == "failed"].iloc[0]
    assert failed["status_new"] == "oom" and failed["status_reference"] == "ok"
    assert failed["error"] == "torch.OutOfMemoryError: CUDA out of memory."
    assert outliers["regression"].sum() == 2
    assert "### Missing from results" in summary and "### Failed" in summary
    assert "| peft=none · bs=4 | oom | ok | yes | torch.OutOfMemoryError: CUDA out of memory. |" in summary

    # --allow_missing keeps the missing row in the report but not in the verdict; the failure still counts.
    code, outliers, summary, _ = run(tmp_path, matrix(), new[:1], "--allow_missing")
    assert code == 0
    assert outliers["kind"].tolist() == ["missing", "missing"] and not outliers["regression"].any()


def test_failure_recorded_in_reference_is_expected_and_a_fix_is_reported(tmp_path):
    ref = matrix()
    ref[2].update(status="oom", **{TP: np.nan})
    new = matrix()
    new[2].update(status="oom", **{TP: np.nan})
    code, outliers, summary, _ = run(tmp_path, ref, new)
    assert code == 0
    assert (
        outliers["kind"].tolist() == ["failed"] and outliers.iloc[0]["detail"] == "same status as reference"
    )
    assert "no (same status as reference)" in summary

    code, outliers, _, _ = run(tmp_path, ref, matrix())
    assert code == 0 and outliers["kind"].tolist() == ["fixed"]


def test_new_rows_are_reported_not_failures(tmp_path):
    new = [*matrix(), row(max_seq_len=256)]
    code, outliers, summary, _ = run(tmp_path, matrix(), new)
    assert code == 0
    assert findings(outliers, "new") == {("peft=lora · bs=4 · seq=256",)}
    assert "### New experiments without reference" in summary
    # ... unless the new row failed: a failure is a regression even without a reference.
    code, outliers, _, _ = run(tmp_path, matrix(), [*matrix(), row(max_seq_len=256, status="error")])
    assert code == 1 and outliers.iloc[0]["kind"] == "failed"


def test_changed_arguments_are_shown(tmp_path):
    new = matrix()
    new[0]["lora_alpha"] = 32
    new[1]["learning_rate"] = 2e-4
    new[2]["packing"] = "True"  # same value spelled differently is not a change
    code, _, summary, _ = run(tmp_path, matrix(), new)
    assert code == 0
    assert "### Changed arguments" in summary
    assert "| peft=lora · bs=4 | lora_alpha | 16 | 32 |" in summary
    assert "| peft=lora · bs=8 | learning_rate | 0.0001 | 0.0002 |" in summary
    assert "packing" not in summary
    result = compare.compare_frames(pd.DataFrame(matrix()), pd.DataFrame(new))
    assert result.changed_arguments.values.tolist() == [
        ["peft=lora · bs=4", "lora_alpha", "16", "32"],
        ["peft=lora · bs=8", "learning_rate", "0.0001", "0.0002"],
    ]


def test_nan_keys_join_and_absent_default_keys_are_noted(tmp_path):
    ref = [{k: v for k, v in r.items() if k != "framework_config"} for r in matrix()]
    result = compare.compare_frames(pd.DataFrame(ref), pd.DataFrame(matrix()))
    assert "framework_config" not in result.keys and "gpu_name" in result.keys  # NaN gpu_name still joins
    assert result.outliers.empty and result.exit_code == 0
    assert any("framework_config" in n and "only in the results" in n for n in result.notes)
    assert len(result.comparison) == 3 * 6


def test_environment_differences_are_listed(tmp_path):
    new = [dict(r, torch_version="2.13.0") for r in matrix()]
    result = compare.compare_frames(pd.DataFrame(matrix()), pd.DataFrame(new))
    assert result.environment == [("torch_version", "2.11.0", "2.13.0")]
    assert "| torch_version | 2.11.0 | 2.13.0 |" in result.markdown


def test_overrides_of_threshold_and_direction(tmp_path):
    new = matrix()
    new[0][TP] = 800.0
    new[0]["train_loss"] = 1.8  # -10 %: two-sided loss (5 %) is a regression
    code, outliers, _, _ = run(tmp_path, matrix(), new)
    assert code == 1 and findings(outliers, "regression") == {
        ("peft=lora · bs=4", TP),
        ("peft=lora · bs=4", "train_loss"),
    }
    code, outliers, _, _ = run(
        tmp_path, matrix(), new, "--threshold", "throughput=25", "--direction", "train_loss=ignore"
    )
    assert code == 0 and outliers.empty
    code, outliers, _, _ = run(tmp_path, matrix(), new, "--threshold", f"{TP}=19.9,loss=15")
    assert code == 1 and findings(outliers, "regression") == {("peft=lora · bs=4", TP)}
    code, outliers, _, _ = run(tmp_path, matrix(), new, "--metrics", "mem_*")
    assert code == 0 and outliers.empty


def test_results_directory_and_default_out(tmp_path):
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    new = matrix()
    new[0][TP] = 500.0
    pd.DataFrame(new).to_csv(results_dir / "raw_summary.csv", index=False)
    ref = write(tmp_path, "ref.csv", matrix())
    result = compare.compare_paths(ref, results_dir)
    assert result.exit_code == 1
    assert (results_dir / "compare" / "summary.md").read_text() == result.markdown
    for name in ("outliers.csv", "comparison.csv", "deltas.png", f"ref_vs_new_{TP}.png"):
        assert (results_dir / "compare" / name).is_file()
    with Image.open(results_dir / "compare" / "deltas.png") as img:
        img.verify()
        assert img.format == "PNG"
    # Headline metrics and flagged ones get a chart; unflagged non-headline metrics do not.
    assert not (results_dir / "compare" / "ref_vs_new_scan_mem_params.png").exists()
    assert not list((results_dir / "compare").glob(".*tmp"))  # atomic writes leave no temp files


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing_file", ["nope.csv", "file not found"]),
        ("dir_without_summary", ["raw_summary.csv", "run the benchmark first"]),
        ("malformed", ["bad.csv", "malformed CSV"]),
        ("malformed_middle", ["bad.csv", "malformed CSV", "line 3"]),
        ("empty", ["empty.csv", "empty"]),
        ("no_common_key", ["no common key column", "--keys"]),
        ("non_numeric", [TP, "row 2", "'fast'"]),
        ("bad_threshold", ["--threshold", "NAME=VALUE"]),
        ("unknown_threshold", ["throughputt", "fix the spelling"]),
        ("unknown_key", ["['colour']", "--keys"]),
        ("unknown_option", ["--frobnicate: unknown option"]),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(tmp_path, capsys, case, expected):
    ref = write(tmp_path, "ref.csv", matrix())
    new = write(tmp_path, "new.csv", matrix())
    args = ["--reference", str(ref), "--results", str(new), "--out", str(tmp_path / "out")]
    if case == "missing_file":
        args[1] = str(tmp_path / "nope.csv")
    elif case == "dir_without_summary":
        (tmp_path / "empty_dir").mkdir()
        args[3] = str(tmp_path / "empty_dir")
    elif case == "malformed":
        (tmp_path / "bad.csv").write_text("scenario,num_gpus\nsft,1,2,3\n")
        args[3] = str(tmp_path / "bad.csv")
    elif case == "malformed_middle":
        (tmp_path / "bad.csv").write_text("scenario,num_gpus\nsft,1\nsft,1,2,3\n")
        args[3] = str(tmp_path / "bad.csv")
    elif case == "empty":
        (tmp_path / "empty.csv").write_text("")
        args[3] = str(tmp_path / "empty.csv")
    elif case == "no_common_key":
        pd.DataFrame([{"foo": 1, TP: 2.0}]).to_csv(tmp_path / "other.csv", index=False)
        args[3] = str(tmp_path / "other.csv")
    elif case == "non_numeric":
        write(tmp_path, "new.csv", [row(**{TP: "fast"})])
    elif case == "bad_threshold":
        args += ["--threshold", "steady_mfu"]
    elif case == "unknown_threshold":
        args += ["--threshold", "throughputt=5"]
    elif case == "unknown_key":
        args += ["--keys", "scenario,colour"]
    elif case == "unknown_option":
        args += ["--frobnicate"]
    assert compare_cli.main(args) == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err
    assert not (tmp_path / "out" / "summary.md").exists()


# ------------------------------------------------------------------------------------ rules and judge
def test_every_contract_metric_column_has_the_documented_family():
    expected = {
        "steady_nonpad_tokens_per_second": "throughput",
        "steady_mfu": "throughput",
        "steady_step_time_median": "time",
        "train_samples_per_second": "whole_run",
        "train_tokens_per_second": "whole_run",
        "train_nonpad_tokens_per_second": "whole_run",
        "train_nonpad_tokens_per_second_per_device": "whole_run",
        "mfu": "whole_run",
        "train_runtime": "whole_run",
        "scan_tokens_per_second": "phase",
        "scan_time_backward": "phase",
        "startup_seconds": "startup",
        "first_step_seconds": "startup",
        "mem_peak_torch_mem_alloc_in_bytes": "memory",
        "mem_torch_mem_alloc_in_bytes": "memory",
        "mem_peak_host_rss_bytes": "memory",
        "scan_mem_activations": "memory",
        "scan_mem_peak_reserved": "memory",
        "mem_nvidia_mem_reserved": "memory_mib",
        "mem_nvidia_mem_reserved_gpu3": "memory_mib",
        "train_loss": "loss",
        "energy_joules": "energy",
        "energy_joules_per_nonpad_token": "energy",
        "nvidia_gpu_util_mean": "utilization",
    }
    assert {c: rules.metric_family(c) for c in expected} == expected
    for column in ("lora_alpha", "num_gpus", "status", "gpu_name", "experiment_id", "effective_batch_size"):
        assert rules.metric_family(column) is None
    assert rules.is_argument_column("lora_alpha") and rules.is_argument_column("effective_batch_size")
    assert not rules.is_argument_column("torch_version") and not rules.is_argument_column("experiment_id")


def test_judge_edges():
    # start-up, whole-run and one step's phase figures are informational unless asked for
    assert all(rules.rule_for(c).direction == rules.IGNORE for c in ("mfu", "startup_seconds", "scan_time_step"))
    assert rules.rule_for("startup_seconds", directions={"startup": rules.HIGHER_IS_WORSE}).direction == \
        rules.HIGHER_IS_WORSE
    tp = rules.rule_for("steady_mfu")
    assert rules.judge(0.5, 0.45, 0, 0, tp)["verdict"] == "within_threshold"  # exactly -10 %
    assert rules.judge(0.5, 0.4499, 0, 0, tp)["verdict"] == "regression"
    assert rules.judge(0.5, np.nan, 0, 0, tp)["verdict"] == "no_data"
    mem = rules.rule_for("scan_mem_temporaries")
    assert rules.judge(0.0, 4096.0, 0, 0, mem)["verdict"] == "within_threshold"  # under 1 MiB absolute
    zero = rules.judge(0.0, 8.0 * 1024**2, 0, 0, mem)
    assert zero["verdict"] == "regression" and math.isinf(zero["delta_pct"])
    loss = rules.rule_for("train_loss")
    assert rules.judge(2.0, 2.2, 0, 0, loss)["verdict"] == "regression"
    assert rules.judge(2.0, 1.8, 0, 0, loss)["verdict"] == "regression"  # two-sided: never an improvement
    assert rules.judge(50.0, 10.0, 0, 0, rules.rule_for("nvidia_gpu_util_mean"))["verdict"] == "ignored"
    assert rules.rule_for("scan_mem_grads", {"scan_mem_*": 30.0, "memory": 5.0}).threshold_pct == 30.0
    assert rules.rule_for("scan_mem_grads", {"memory": 5.0}).threshold_pct == 5.0


def test_canonical_values():
    assert rules.canonical(1.0) == rules.canonical(1) == rules.canonical("1.0") == "1"
    assert rules.canonical(np.nan) == rules.canonical(None) == ""
    assert rules.canonical(True) == rules.canonical("True") == "true"
    assert rules.canonical("meta-llama/Llama-3.2-1B") == "meta-llama/Llama-3.2-1B"


def test_format_value_units():
    assert rules.format_value(MEM, 1.5 * GIB) == "1.50 GiB"
    assert rules.format_value(MEM, 512 * 1024**2) == "512.0 MiB"
    assert rules.format_value("steady_mfu", 0.4125) == "41.25 %"
    assert rules.format_value("scan_time_forward", 0.0125) == "12.50 ms"
    assert rules.format_value(TP, 12345.67) == "12,345.7"
    assert rules.format_value(TP, np.nan) == ""


def test_a_csv_larger_than_any_results_csv_is_refused_before_pandas_reads_it(tmp_path):
    """Issue W2: user files are bounded before they are parsed (a sparse file: no disk is written)."""
    from tunebench.results.compare.reading import CompareInputError, load_csv
    from tunebench.user_files import MAX_CSV_BYTES

    huge = tmp_path / "ref.csv"
    with open(huge, "wb") as handle:
        handle.truncate(MAX_CSV_BYTES + 1)
    with pytest.raises(CompareInputError, match=r"reference .*ref.csv: 268,435,457 bytes, more than the 268,435,456"):
        load_csv(huge, "reference")
