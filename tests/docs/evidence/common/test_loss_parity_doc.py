"""The loss-parity tables and band rows the evidence pages share, on CPU: the tables read a results CSV, and a
run's bands become band data that loss parity then finds."""

import subprocess
import sys

import pandas as pd

from tests.fixtures.harness import EVIDENCE, load_script
from tunebench.results.parity import band as loss_band
from tunebench.results.parity.verdicts import Trajectory, band_of

HERE = EVIDENCE / "common"


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
    text = subprocess.run([sys.executable, str(HERE / "loss_parity_doc.py"), str(csv)], check=True,
                          capture_output=True, text=True).stdout
    assert "| adamw-8bit | 52,000 | 1.040 |" in text and "| inside ✗ | flagged |" in text  # not as expected: shown
    assert "| gradient-checkpointing |" in text and "20 / 163,840 / 9.0" in text
    assert "Within 1 %: yes" in text and "baseline ÷ uniform = 0.9990" in text
    table = tmp_path / "loss_band.csv"
    monkeypatch.setattr(loss_band, "BAND_FILE", table)
    rows_script = load_script(HERE / "loss_band_rows.py")
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
