"""Why a sharded row saves nothing (planning.sharding_notes): the causes named with their bytes, FSDP's float32 master
weights first, and the plan, fit map and report saying so."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from tunebench.experiment.sharding import Fsdp
from tunebench.planning.fake_step import StepShape
from tunebench.planning.predict import memory_text
from tunebench.planning.sharding_notes import LEAD, why_not_smaller

GIB = 1024**3
FULL = StepShape(model="m", dtype="bfloat16", micro_batch=2, seq_len=1024, padded=False, autocast_bf16=True,
                 fsdp=Fsdp(), world=2)


def _row(params, optimizer, activations, temporaries, other=0):
    row = {"pred_mem_params": params, "pred_mem_optimizer": optimizer, "pred_mem_activations": activations,
           "pred_mem_temporaries": temporaries, "pred_mem_other": other, "pred_mem_grads": 0}
    return {**row, "pred_mem_peak": sum(row.values())}


def test_a_14b_on_two_gpus_names_the_float32_master_weights_and_the_rest_by_their_bytes():
    """The issue's 14B (bf16, FSDP2 under accelerate, 2 x H200): a rank holds float32 parameters and AdamW state
    over half the model, as many bytes as one GPU's bf16 ones."""
    sharded = _row(26 * GIB, 52 * GIB, int(0.73 * GIB), int(2.6 * GIB))
    one = _row(26 * GIB, 52 * GIB, 15_000, int(0.3 * GIB))
    note = why_not_smaller(FULL, sharded, one)
    assert note == (
        f"{LEAD}: a rank's peak on 2 GPUs ({memory_text(sharded['pred_mem_peak'])}) is not below one GPU's "
        f"({memory_text(one['pred_mem_peak'])}): (1) FSDP keeps float32 master weights (accelerate upcasts the "
        "trainable parameters to float32 under bf16 mixed precision: parameters, gradients and AdamW state at 16 "
        "bytes a parameter, sharded over 2 ranks: parameters and optimizer state 78.00 GiB a rank, against 78.00 GiB "
        "in bfloat16 on one GPU) (2) FSDP's gathered layers and reduce buffers add 2.30 GiB of temporaries")
    assert ";" not in note  # pred_note joins notes with "; ": the report splits them so


def test_causes_that_weigh_less_than_a_hundredth_of_the_peak_are_left_out_and_others_are_named():
    lora = dataclasses.replace(FULL, peft="lora")
    # a LoRA whose base stays whole on every rank (FSDP1's 4-bit base), its adapters' state 1 MiB
    sharded = _row(16 * GIB, 2**20, 40 * GIB, 0, other=GIB)
    one = _row(16 * GIB, 2**20, 40 * GIB, 0)
    note = why_not_smaller(lora, sharded, one)
    assert "master weights" not in note
    assert note.endswith("(1) parameters and optimizer state 16.00 GiB a rank, against 16.00 GiB on one GPU "
                         "(2) activations are not sharded: every rank runs its own micro-batch (40.00 GiB a rank) "
                         "(3) FSDP1's flat gradients kept between steps add 1.00 GiB")


@pytest.mark.parametrize("shape, sharded_peak", [
    (FULL, 40 * GIB),  # below the one-GPU row's peak: sharding saved memory
    (dataclasses.replace(FULL, fsdp=None, world=1), 90 * GIB),  # not sharded
    (dataclasses.replace(FULL, world=1), 90 * GIB),
])
def test_no_note_where_sharding_saves_memory_or_nothing_is_sharded(shape, sharded_peak):
    one = _row(26 * GIB, 52 * GIB, 0, 0)
    assert why_not_smaller(shape, {**one, "pred_mem_peak": sharded_peak}, one) is None


def test_master_weights_only_where_accelerate_upcasts():
    from tunebench.experiment.quantization import Quantization
    from tunebench.planning.sharding_notes import master_weights

    assert master_weights(FULL)
    assert not master_weights(dataclasses.replace(FULL, autocast_bf16=False))  # no mixed precision
    assert not master_weights(dataclasses.replace(FULL, dtype="float32"))  # float32 already
    assert not master_weights(dataclasses.replace(FULL, quantization=Quantization(method="bnb-4bit")))


def _spec(num_gpus: int, framework: str, **arguments):
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed

    values = {"model_name_or_path": "preset:llama-small", "peft_method": "none", "per_device_train_batch_size": 1,
              "max_seq_len": 16, "synthetic_num_samples": 8, "synthetic_length_distribution": "fixed",
              "torch_dtype": "bfloat16", "bf16": True, **arguments}
    if framework == "fsdp2":
        values.update(fsdp="full_shard auto_wrap", fsdp_config={"version": 2, "reshard_after_forward": True})
    return typed([ExperimentSpec("s", FrameworkConfig(framework, min_gpus=2 if framework == "fsdp2" else 1),
                                 num_gpus, "cuda", values)])[0]


def test_the_plan_of_a_full_fine_tuning_on_two_gpus_says_why_its_rank_holds_no_less():
    """llama-small, bf16 full fine-tuning, FSDP2 on 2 GPUs against 1 GPU (micro-batch 1 x 16 tokens: the weights'
    bytes dominate): a rank's parameters and AdamW state in float32 over half the model are the one GPU's bf16
    ones to the byte, and the plan's note says so with the figures of both rows."""
    from tunebench.planning.plan_matrix import plan_experiments

    sharded, single = _spec(2, "fsdp2"), _spec(1, "none")
    rows = plan_experiments([sharded, single], 141 * GIB, "NVIDIA H200")
    two, one = rows[sharded.experiment_id], rows[single.experiment_id]
    state = two["pred_mem_params"] + two["pred_mem_optimizer"]
    assert state == one["pred_mem_params"] + one["pred_mem_optimizer"]
    assert two["pred_mem_peak"] >= one["pred_mem_peak"]
    assert two["pred_note"].startswith(
        f"{LEAD}: a rank's peak on 2 GPUs ({memory_text(two['pred_mem_peak'])}) is not below one GPU's "
        f"({memory_text(one['pred_mem_peak'])}): (1) FSDP keeps float32 master weights")
    assert f"parameters and optimizer state {memory_text(state)} a rank, against {memory_text(state)}" in two[
        "pred_note"]
    assert LEAD not in (one.get("pred_note") or "")


@pytest.mark.slow
def test_the_fit_map_says_per_gpu_count_what_fits_and_skips_counts_a_config_never_runs_on():
    from tunebench.planning.fit_map import fit_map, per_gpu_count

    specs = [_spec(1, "none", max_seq_len=512), _spec(1, "fsdp2", max_seq_len=512), _spec(2, "fsdp2", max_seq_len=512)]
    frame = fit_map(specs, 1_490_000_000, "a 1.49 GB GPU", 90)  # a handful of micro-batches of llama-small fit
    never = frame[(frame["framework_config"] == "fsdp2") & (frame["num_gpus"] == 1)].iloc[0]
    assert pd.isna(never["max_micro_batch"]) and never["pred_note"] == "fsdp2 needs at least 2 GPUs: not run on 1"
    one = int(frame[frame["num_gpus"] == 1]["max_micro_batch"].max())
    two = frame[frame["num_gpus"] == 2].iloc[0]
    lines = per_gpu_count(frame)
    assert lines[0].startswith(f"preset:llama-small · none · 512 tokens: 1 GPU(s): micro-batch {one} (none); "
                               f"2 GPU(s): micro-batch {int(two['max_micro_batch'])} (fsdp2)")
    said_why = isinstance(two["pred_note"], str) and LEAD in two["pred_note"]
    assert lines[0].endswith("no more than on fewer GPUs (why: fsdp2's note)") == (
        two["max_micro_batch"] <= one and said_why)


def test_the_report_lists_the_rows_that_save_nothing_with_their_causes():
    from tunebench.results.report.predictions import sharding_notes

    df = pd.DataFrame({"pred_note": [f"{LEAD}: a rank's peak ... (1) FSDP keeps float32 master weights (x); "
                                     "torch.compile (default): planned", None, "Liger planned"]})
    html = sharding_notes(df, pd.Series(["fsdp2 · 2 GPUs", "none · 1 GPU", "liger"]))
    assert "<h3>Sharding that saves nothing</h3>" in html and "fsdp2 · 2 GPUs" in html
    assert "FSDP keeps float32 master weights (x)" in html and "torch.compile" not in html and "liger" not in html
    assert sharding_notes(df.iloc[1:], pd.Series(["a", "b"], index=[1, 2])) == ""


def test_a_one_gpu_comparison_that_fails_leaves_the_sharded_rows_prediction_standing(monkeypatch):
    from tunebench.planning import sharding_notes
    from tunebench.planning.plan_matrix import plan_experiments

    def refused(*args, **kwargs):
        raise RuntimeError("the one-GPU step cannot run")

    monkeypatch.setattr(sharding_notes, "predict", refused)
    sharded = _spec(2, "fsdp2")
    row = plan_experiments([sharded], 141 * GIB, "NVIDIA H200")[sharded.experiment_id]
    assert row["pred_mem_peak"] > 0 and LEAD not in (row.get("pred_note") or "")
