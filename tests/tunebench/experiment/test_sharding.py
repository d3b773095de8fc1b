"""The FSDP setting read once from an experiment's training values, the quantized bases FSDP can shard, and the
4-bit storage dtype that lets it (issue Y: QLoRA under FSDP)."""

from __future__ import annotations

import json
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunebench.execution.scheduling import overlap_columns
from tunebench.experiment.quantization import Quantization, bnb_config, quantization_of
from tunebench.experiment.sharding import Fsdp, fsdp_of, quantized_skip_reason


def test_fsdp_words_and_config_as_transformers_reads_them():
    assert fsdp_of({}) is None
    assert fsdp_of({"fsdp": ""}) is None
    assert fsdp_of({"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 2}}) == Fsdp()
    ac = fsdp_of({"fsdp": "full_shard auto_wrap",
                  "fsdp_config": json.dumps({"version": 2, "activation_checkpointing": "true"})})
    assert ac.version == 2 and ac.activation_checkpointing and ac.label == "fsdp2"
    zero2 = fsdp_of({"fsdp": "shard_grad_op auto_wrap", "fsdp_config": {"version": 1}})
    assert (zero2.version, zero2.strategy, zero2.reshard_after_forward) == (1, "shard_grad_op", False)
    assert zero2.label == "fsdp1-shard_grad_op"
    assert fsdp_of({"fsdp": "full_shard auto_wrap offload", "fsdp_config": {"version": 1}}).offload
    assert fsdp_of({"fsdp": True}) == Fsdp()  # TrainingArguments' own value once it has read the words


@given(st.one_of(st.none(), st.text(max_size=40), st.integers(), st.lists(st.text(max_size=10), max_size=3)),
       st.one_of(st.none(), st.text(max_size=40), st.dictionaries(st.text(max_size=8), st.text(max_size=8))))
def test_fsdp_of_never_raises_on_odd_values(words, config):
    setting = fsdp_of({"fsdp": words, "fsdp_config": config})
    assert setting is None or setting.version in (1, 2) or isinstance(setting.version, int)


def _model(**values):
    base = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
            "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "auto", "torch_dtype": "bfloat16"}
    return types.SimpleNamespace(**{**base, **values})


def test_auto_storage_is_the_weights_dtype_under_fsdp_and_uint8_otherwise():
    assert quantization_of(_model()).storage == "uint8"
    assert quantization_of(_model(), sharded=True).storage == "bfloat16"
    assert quantization_of(_model(torch_dtype="float32"), sharded=True).storage == "float32"
    assert quantization_of(_model(bnb_4bit_quant_storage="uint8"), sharded=True).storage == "uint8"
    assert quantization_of(_model()).label() == "bnb-4bit-nf4-dq"  # the labels of earlier rows are unchanged
    assert quantization_of(_model(), sharded=True).label() == "bnb-4bit-nf4-dq-bfloat16-storage"


def test_the_storage_dtype_reaches_bitsandbytes_config():
    torch = pytest.importorskip("torch")
    pytest.importorskip("bitsandbytes")
    config = bnb_config(Quantization("bnb-4bit", double_quant=True, storage="bfloat16"))
    assert config.bnb_4bit_quant_storage == torch.bfloat16


FSDP1, FSDP2 = Fsdp(version=1), Fsdp(version=2)


@pytest.mark.parametrize("fsdp, quantization, refused", [
    (FSDP2, Quantization("bnb-8bit"), "8-bit"),
    (FSDP1, Quantization("bnb-8bit"), "8-bit"),
    (FSDP1, Quantization("bnb-4bit", storage="uint8"), "uint8-stored"),
    (FSDP1, Quantization("bnb-4bit", storage="float32"), "float32-stored"),
    (FSDP1, Quantization("bnb-4bit", storage="bfloat16"), None),
    (FSDP2, Quantization("bnb-4bit", storage="uint8"), None),  # runs: accelerate keeps those weights whole
    (FSDP2, Quantization("bnb-4bit", storage="bfloat16"), None),
    (None, Quantization("bnb-8bit"), None),
    (FSDP2, Quantization(), None),
])
def test_which_quantized_bases_fsdp_can_shard(fsdp, quantization, refused):
    reason = quantized_skip_reason(fsdp, quantization, "bfloat16")
    assert (reason is None) == (refused is None)
    if refused:
        assert refused in reason and ("bnb_4bit_quant_storage" in reason or "8-bit" in reason)


def test_a_row_says_which_experiments_ran_beside_it():
    intervals = {0: (0.0, 2.0), 1: (1.0, 3.0), 2: (2.0, 4.0), 3: (5.0, None)}
    ids = ["a", "b", "c", "d"]
    assert overlap_columns(intervals, 1, ids) == {"concurrent_experiments": 2, "concurrent_experiment_ids": "a;c"}
    assert overlap_columns(intervals, 3, ids) == {"concurrent_experiments": 0, "concurrent_experiment_ids": ""}


def test_a_scenario_runs_only_at_the_gpu_counts_it_lists():
    import tunebench

    scenarios = [{"name": "one", "num_gpus": [1], "arguments": {"model_name_or_path": "preset:llama-tiny"}},
                 {"name": "par", "num_gpus": 2, "arguments": {"model_name_or_path": "preset:llama-tiny"}},
                 {"name": "all", "arguments": {"model_name_or_path": "preset:llama-tiny"}}]
    frame = tunebench.Matrix.from_scenarios(scenarios, device="cpu", num_gpus=[1, 2]).frame()
    counts = frame.groupby("scenario")["num_gpus"].apply(sorted).to_dict()
    assert counts == {"one": [1], "par": [2], "all": [1, 2]}


@pytest.mark.parametrize("value", [0, -1, True, "2", [], [1, "x"], [2.5], {"a": 1}])
def test_a_bad_scenario_gpu_count_is_one_input_problem(value):
    import tunebench

    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios([{"name": "s", "num_gpus": value, "arguments": {}}], device="cpu")
    (problem,) = [p for p in caught.value.problems if p.key.endswith("num_gpus")]
    assert "GPU count" in problem.message and "num_gpus: [1]" in problem.fix


def test_fp16_under_fsdp1_with_a_fused_optimizer_is_skipped_with_the_fix():
    """torch's FSDP1 ShardedGradScaler makes found_inf one element where GradScaler makes a scalar, and the fused
    AdamW kernel takes only the scalar (the GPTQ rows of docs/evidence/fms-acceleration-h200.md failed so)."""
    import inspect

    from torch.amp import grad_scaler
    from torch.distributed.fsdp import sharded_grad_scaler

    from tunebench.experiment.sharding import fused_fp16_skip_reason

    assert "found_inf = torch.full(\n            (1,)" in inspect.getsource(sharded_grad_scaler.ShardedGradScaler)
    assert "found_inf = torch.full((), 0.0" in inspect.getsource(grad_scaler.GradScaler)
    fsdp1, fsdp2 = Fsdp(version=1), Fsdp(version=2)
    fused = {"fp16": True, "optim": "adamw_torch_fused"}
    assert "set optim: adamw_torch" in fused_fp16_skip_reason(fsdp1, fused, "cuda")
    assert fused_fp16_skip_reason(fsdp2, fused, "cuda") is None
    assert fused_fp16_skip_reason(fsdp1, {**fused, "optim": "adamw_torch"}, "cuda") is None
    assert fused_fp16_skip_reason(fsdp1, {**fused, "fp16": False, "bf16": True}, "cuda") is None
    assert fused_fp16_skip_reason(None, fused, "cuda") is None


def test_fsdp1_prefetch_is_read_as_the_trainer_passes_it():
    """fms's accelerate.yaml asks FSDP1 for BACKWARD_PRE: one more unit's parameters alive in backward, which the plan
    keeps (an H200's 2-GPU LoRA rows: −3.2 % without it, +0.007 % with it; docs/evidence/fms-acceleration-h200.md)."""
    pre = fsdp_of({"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 1, "backward_prefetch": "backward_pre",
                                                                  "forward_prefetch": "true"}})
    assert (pre.backward_prefetch, pre.forward_prefetch) == ("BACKWARD_PRE", True)
    assert fsdp_of({"fsdp": "full_shard", "fsdp_config": {"version": 1}}).backward_prefetch == "NO_PREFETCH"
    assert fsdp_of({"fsdp": "full_shard", "fsdp_config": {"backward_prefetch": "sideways"}}).backward_prefetch == \
        "NO_PREFETCH"
