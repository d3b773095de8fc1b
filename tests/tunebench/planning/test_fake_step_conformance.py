"""Architecture conformance (issue L): for a tiny random config of every preset family and of families that are
not presets (config.json-only folders), × {full, LoRA, checkpointing, accumulation}, the memory prediction per
category against the scanner on a real CPU training step of the same model.

On CPU the scanner's categories are the parameters, buffers, gradients (their full size), optimizer state and
the step's maximum of activations; the prediction runs the same CPU kernels, so parameters, gradients and
optimizer state must agree to the byte and activations within 5 %.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

_SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=512, max_position_embeddings=512)
FAMILIES = {  # the preset families (tiny), then families tunebench has no preset of
    "llama": dict(model_type="llama", **_SMALL, tie_word_embeddings=False),
    "mistral": dict(model_type="mistral", **_SMALL, sliding_window=None, tie_word_embeddings=False),
    "qwen2": dict(model_type="qwen2", **_SMALL, tie_word_embeddings=True),
    "granite": dict(model_type="granite", **_SMALL, tie_word_embeddings=True, embedding_multiplier=12.0,
                    logits_scaling=8.0, residual_multiplier=0.22, attention_multiplier=0.0156),
    "mixtral": dict(model_type="mixtral", **_SMALL, num_local_experts=4, num_experts_per_tok=2,
                    tie_word_embeddings=False),
    "gpt_bigcode": dict(model_type="gpt_bigcode", n_embd=64, n_layer=2, n_head=4, n_inner=128, vocab_size=512,
                        n_positions=512, multi_query=True),
    "phi3": dict(model_type="phi3", **_SMALL, tie_word_embeddings=False, pad_token_id=0),
    "gemma": dict(model_type="gemma", **_SMALL, head_dim=16),
    "starcoder2": dict(model_type="starcoder2", **_SMALL, tie_word_embeddings=True),
    "gpt_neox": dict(model_type="gpt_neox", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, vocab_size=512, max_position_embeddings=512, rotary_pct=0.25,
                     use_parallel_residual=True),
    "phi": dict(model_type="phi", **_SMALL, partial_rotary_factor=0.5, resid_pdrop=0.1),
    "qwen3": dict(model_type="qwen3", **_SMALL, head_dim=16, tie_word_embeddings=True),
    # layer kinds no preset has (issue T): squared-ReLU MLPs without a gate, xIELU without a gate, rotary-free
    # layers, sliding-window + global layers, short convolutions, state-space mixers (alone and hybrid),
    # fine-grained mixtures of experts
    "nemotron": dict(model_type="nemotron", **_SMALL, hidden_act="relu2", partial_rotary_factor=0.5,
                     tie_word_embeddings=False),
    "arcee": dict(model_type="arcee", **_SMALL, hidden_act="relu2", tie_word_embeddings=False),
    "apertus": dict(model_type="apertus", **_SMALL, hidden_act="xielu"),
    "smollm3": dict(model_type="smollm3", **_SMALL, no_rope_layers=[1, 0], tie_word_embeddings=True, pad_token_id=0),
    "cohere2": dict(model_type="cohere2", **_SMALL, sliding_window=16, pad_token_id=0,
                    layer_types=["sliding_attention", "full_attention"]),
    "gemma3": dict(model_type="gemma3_text", **_SMALL, head_dim=16, sliding_window=16, pad_token_id=0),
    "lfm2": dict(model_type="lfm2", **{**_SMALL, "num_hidden_layers": 3}, block_auto_adjust_ff_dim=False,
                 layer_types=["conv", "full_attention", "conv"], pad_token_id=0),
    "mamba2": dict(model_type="mamba2", hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=512,
                   expand=2, conv_kernel=4, num_heads=8, head_dim=16, n_groups=1, chunk_size=16, pad_token_id=0),
    "bamba": dict(model_type="bamba", **_SMALL, mamba_d_state=8, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1,
                  mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=16, attn_layer_indices=[1], pad_token_id=0),
    "qwen3_moe": dict(model_type="qwen3_moe", **_SMALL, head_dim=16, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=64, decoder_sparse_step=1),
    "olmoe": dict(model_type="olmoe", **_SMALL, num_experts=4, num_experts_per_tok=2, pad_token_id=0),
}
# PEFT refuses LoRA on a Mamba mixer's out_proj and conv1d ("all-linear" includes out_proj): its input projection
LORA_TARGETS = {"mamba2": ("in_proj",)}
VARIANTS = {"full": {}, "lora": {"peft": "lora"}, "gc": {"checkpointing": True}, "ga": {"grad_accum": 2}}
BATCH, SEQ, SCAN_STEP = 2, 32, 3


def _folder(tmp_path_factory, family: str):
    folder = tmp_path_factory.mktemp(family)
    (folder / "config.json").write_text(json.dumps(FAMILIES[family]))  # config only: random weights, byte tokenizer
    return str(folder)


def _measured(model_dir: str, variant: dict, targets: tuple = ("all-linear",)) -> dict:
    """The scanner's categories on a real CPU step of the model, trained as the entry trains it."""
    import torch
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import Trainer, TrainingArguments

    from scanner import Scanner
    from tunebench.experiment.components import lora_targets
    from tunebench.experiment.entry_parser import checkpointing_renames
    from tunebench.experiment.models import load_model

    torch.manual_seed(0)
    model = load_model(model_dir, "float32")
    if variant.get("peft") == "lora":
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=lora_targets(targets),
                                                 task_type=TaskType.CAUSAL_LM))
    names = checkpointing_renames()
    checkpointing = {
        names.get("gradient_checkpointing", "gradient_checkpointing"): bool(variant.get("checkpointing")),
        names.get("gradient_checkpointing_kwargs", "gradient_checkpointing_kwargs"): {"use_reentrant": False},
    }
    rows = [{"input_ids": ids, "labels": ids.clone()}
            for ids in torch.randint(3, 259, (SCAN_STEP * BATCH * variant.get("grad_accum", 1), SEQ))]
    scanner = Scanner(steps=SCAN_STEP, time_steps="off", output=None, log_to_trainer=False)
    args = TrainingArguments(
        output_dir="/tmp/tunebench-conformance",
        max_steps=SCAN_STEP,
        use_cpu=True,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=variant.get("grad_accum", 1),
        optim="adamw_torch_fused",
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        **checkpointing,
    )
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[scanner]).train()
    return scanner.flat_metrics()


def _predicted(model_dir: str, variant: dict, targets: tuple = ("all-linear",)) -> dict:
    from tunebench.planning.fake_step import StepShape, predict_step

    shape = StepShape(model_dir, "float32", BATCH, SEQ, padded=False, grad_accum=variant.get("grad_accum", 1),
                      peft=variant.get("peft", "none"), lora_r=8, lora_alpha=16, lora_targets=targets,
                      checkpointing=bool(variant.get("checkpointing")))
    return predict_step(shape, round_to_cuda_blocks=False)


def _cases():
    for family in FAMILIES:
        for variant in VARIANTS:
            yield pytest.param(family, variant, id=f"{family}-{variant}")


@pytest.mark.parametrize("family, variant", _cases())
def test_the_prediction_follows_every_architecture(tmp_path_factory, family, variant):
    model_dir = _folder(tmp_path_factory, family)
    targets = LORA_TARGETS.get(family, ("all-linear",))
    measured = _measured(model_dir, VARIANTS[variant], targets)
    predicted = _predicted(model_dir, VARIANTS[variant], targets)
    for category, key in (("params", "params"), ("buffers", "buffers"), ("grads", "grads_full"),
                          ("optimizer", "optimizer")):
        assert predicted[key] == measured[f"scan_mem_{category}"], (category, predicted, measured)
    activations = measured["scan_mem_activations"]
    assert activations > 0 and abs(predicted["activations_max"] / activations - 1) < 0.05, \
        (predicted["activations_max"], activations)
    assert predicted["attention"] == measured["scan_attention_backend"]
