"""tunebench/api/planning.py: a row the run would skip is planned as skipped, its reason in pred_note and under the
table, not a fake step's error (issue AD)."""

from __future__ import annotations

import tunebench


def test_the_plan_of_a_row_the_run_skips_gives_the_skips_reason(capsys):
    from tunebench.planning.plan_matrix import table_notes

    scenarios = [{"name": "s", "framework_config": ["fsdp-full-shard"],
                  "arguments": {"model_name_or_path": "preset:llama-tiny", "peft_method": "lora", "load_in_4bit": True,
                                "torch_dtype": "auto"}}]
    matrix = tunebench.Matrix.from_scenarios(scenarios, device="cuda", num_gpus=[2])
    frame = tunebench.plan(matrix, "NVIDIA H100 80GB HBM3")
    note = frame["pred_note"].iloc[0]
    assert note.startswith("not planned: the run would skip it: FSDP1 flattens a layer's parameters into one tensor "
                           "of one dtype, and with torch_dtype auto the weights' dtype is the checkpoint's")
    assert "set torch_dtype (e.g. bfloat16; bnb_4bit_quant_storage auto then follows it)" in note
    assert "set bnb_4bit_quant_storage to auto (or auto)" not in note
    assert frame["pred_mem_peak"].isna().all()
    found = {matrix.experiments[0].experiment_id: {"pred_note": note}}
    assert table_notes(matrix.experiments, found) == [f"{matrix.experiments[0].folder_name}: {note}"]
