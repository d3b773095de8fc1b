"""The model of a fake step as the training entry builds it: on the meta device (quantization, checkpointing and PEFT
applied as the entry applies them), then every parameter and buffer a fake CPU tensor of its shape and dtype."""

from __future__ import annotations

import logging

from tunebench.experiment.quantization import adapters_in_bfloat16
from tunebench.planning.fms_bases import replace_with_gptq
from tunebench.planning.quantized import fake_parameter, quantize_meta

logger = logging.getLogger(__name__)


def meta_model(shape):
    """The model as the training entry builds it for `shape` (a planning.fake_step.StepShape), on the meta device
    (PEFT included): no memory at all."""
    import torch
    from transformers import AutoModelForCausalLM

    from tunebench.experiment.models import load_config
    from tunebench.planning.cuda_semantics import recompute_context

    config = load_config(shape.model)
    kwargs = {"attn_implementation": shape.attn_implementation} if shape.attn_implementation else {}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, shape.dtype), **kwargs)
    quantized = shape.quantization is not None and shape.quantization.enabled
    if quantized:
        quantize_meta(model, shape.quantization, getattr(torch, shape.dtype))
    if shape.checkpointing:
        # context_fn: the recompute follows the CUDA rules the forward ran under (planning.cuda_semantics)
        kwargs = {"use_reentrant": False, "context_fn": recompute_context}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x's name for the same switch
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.config.use_cache = False
    if shape.peft != "none":
        from peft import LoraConfig, PromptTuningConfig, TaskType, get_peft_model

        from tunebench.experiment.components import lora_targets as peft_targets
        from tunebench.experiment.entry_parser import quiet_renamed_checkpointing_warning

        quiet_renamed_checkpointing_warning()

        if shape.checkpointing:
            model.enable_input_require_grads()  # what PEFT + Trainer do for checkpointed frozen weights
        peft_config = (
            LoraConfig(
                r=shape.lora_r,
                lora_alpha=shape.lora_alpha,
                target_modules=peft_targets(shape.lora_targets),
                task_type=TaskType.CAUSAL_LM,
            )
            if shape.peft == "lora"
            else PromptTuningConfig(num_virtual_tokens=shape.virtual_tokens, task_type=TaskType.CAUSAL_LM)
        )
        with torch.device("meta"):
            model = get_peft_model(model, peft_config)
        if quantized:
            adapters_in_bfloat16(model)
    if shape.gptq is not None:  # fms's GPTQ base (planning.fms_bases): the linears it packs, LoRA's bases included
        replace_with_gptq(model.get_base_model() if hasattr(model, "get_base_model") else model, shape.gptq)
    model.train()
    return model, config


def to_fake(model) -> None:
    """Replace every meta parameter and buffer by a fake CPU tensor of the same shape and dtype, in place.

    (Module.to() would swap fake parameters with swap_tensors, which fails while other modules reference
    them; assigning into `_parameters` keeps one object per shared parameter, so tied weights stay tied.)
    """
    import torch

    made: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None:
                continue
            if id(param) not in made:
                fake = fake_parameter(module, param)  # a quantized weight, else None
                made[id(param)] = fake if fake is not None else torch.nn.Parameter(
                    torch.empty_like(param, device="cpu"), requires_grad=param.requires_grad)
            module._parameters[name] = made[id(param)]
        for name, buffer in list(module._buffers.items()):
            if buffer is not None:
                module._buffers[name] = torch.zeros_like(buffer, device="cpu")
