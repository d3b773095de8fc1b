"""The issue-45 GPU evidence drivers, on CPU: the passes split the configs as promised, the tables read a results
CSV, and a run's bands become band data that loss parity then finds."""

import importlib.util
import subprocess
import sys

import pandas as pd
import yaml

from tests.fixtures.harness import REPO
from tunebench.results.parity import band as loss_band
from tunebench.results.parity.verdicts import Trajectory, band_of


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts/gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_step_splits_its_configs_into_a_plain_and_a_bitsandbytes_pass(tmp_path):
    prepare = _load("loss_parity_prepare")
    configs = prepare.framework_configs()
    scenarios = yaml.safe_load((REPO / "scripts/gpu/scenarios-loss-parity.yaml").read_text())["scenarios"]
    assert {s["name"] for s in scenarios} == {n for names in prepare.STEPS.values() for n in names}
    for scenario in scenarios:
        assert all(name is None or name in configs for name in scenario["framework_config"]), scenario["name"]
        bands = [n for n in scenario["framework_config"] if n and n.startswith("loss-band-")]
        assert None in scenario["framework_config"] and (bands or scenario["name"] == "z-packed-1b")
    for step in prepare.STEPS:
        passes = {}
        for which in ("plain", "bnb"):
            subprocess.run([sys.executable, str(REPO / "scripts/gpu/loss_parity_prepare.py"), "--step", step,
                            "--pass", which, "--out", str(tmp_path)], check=True, capture_output=True)
            written = yaml.safe_load((tmp_path / f"scenarios-{which}.yaml").read_text())["scenarios"]
            passes[which] = {(s["name"], c) for s in written for c in s["framework_config"]}
        assert all(prepare.uses_bitsandbytes(configs[c]) for _, c in passes["bnb"])
        assert not any(c and prepare.uses_bitsandbytes(configs[c]) for _, c in passes["plain"])
        assert ("z-full-1b" if step == "1b" else "z-lora-8b", "adamw-8bit") in passes["bnb"]


def test_the_tables_and_the_band_data_come_from_a_results_csv(tmp_path, monkeypatch):
    common = {"scenario": "z-full-1b", "model_name_or_path": "preset:llama-3.2-1b", "peft_method": "none",
              "per_device_train_batch_size": 8, "max_seq_len": 1024, "status": "ok", "gpu_name": "NVIDIA H100",
              "device_type": "cuda", "torch_dtype": "bfloat16", "learning_rate": 2e-5, "max_steps": 30,
              "data_entropy_floor_nats": 0.693, "loss_target": 10.0, "loss_first_step": 12.2,
              "loss_parity_band": 1e-4, "loss_parity_band_runs": 2, "loss_parity_band_source": "folder: 2 band run(s)",
              "loss_parity_tolerance": 2e-4, "loss_target_steps": 20, "loss_target_tokens": 163840,
              "loss_target_seconds": 9.0, "train_loss_last_step": 8.0}
    rows = [{**common, "experiment_id": e, "framework_config": c, "steady_nonpad_tokens_per_second": t,
             "loss_parity_max_rel_diff": d, "loss_parity_ok": d <= 2e-4}
            for e, c, t, d in (("b", "none", 50000.0, 0.0), ("r1", "loss-band-1", 50100.0, 1e-4),
                               ("u", "corpus-uniform", 50050.0, 0.3), ("g", "gradient-checkpointing", 41000.0, 5e-5),
                               ("q", "adamw-8bit", 52000.0, 1e-4))]
    csv = tmp_path / "raw_summary.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    text = subprocess.run([sys.executable, str(REPO / "scripts/gpu/loss_parity_doc.py"), str(csv)], check=True,
                          capture_output=True, text=True).stdout
    assert "| adamw-8bit | 52,000 | 1.040 |" in text and "| inside ✗ | flagged |" in text  # not as expected: shown
    assert "| gradient-checkpointing |" in text and "20 / 163,840 / 9.0" in text
    assert "Within 1 %: yes" in text and "baseline ÷ uniform = 0.9990" in text
    table = tmp_path / "loss_band.csv"
    monkeypatch.setattr(loss_band, "BAND_FILE", table)
    rows_script = _load("loss_band_rows")
    monkeypatch.setattr(rows_script, "BAND_FILE", table)
    rows_script.main([str(csv), "docs/evidence/loss-parity-h100.md"])
    rows_script.main([str(csv), "docs/evidence/loss-parity-h100.md"])  # again: nothing added
    kept = pd.read_csv(table)
    assert len(kept) == 1 and kept.iloc[0]["band_max_rel_diff"] == 1e-4 and kept.iloc[0]["device"] == "NVIDIA H100"
    loss_band.band_table.cache_clear()
    arguments = {"model_name_or_path": "preset:llama-3.2-1b", "torch_dtype": "bfloat16", "learning_rate": 2e-5,
                 "max_steps": 30}
    base = Trajectory("x", 1, "other", "none", frozenset(), 1, "cuda", arguments, {1: 12.0})
    band, _ = band_of(base, [base], "NVIDIA H100")
    assert band == loss_band.Band(1e-4, 2, "table: docs/evidence/loss-parity-h100.md")
    loss_band.band_table.cache_clear()
