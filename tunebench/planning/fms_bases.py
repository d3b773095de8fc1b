"""fms-acceleration's quantized bases in the fake step: its bitsandbytes loader as tunebench's own 4-bit path, its GPTQ
loader as the packed buffers it holds and the fp16 weight its kernel dequantizes for every matmul.

- bitsandbytes (`peft.quantization.bitsandbytes`): fms's loader asks transformers for NF4/FP4 with double
  quantization, computing in the weights' dtype, stored as uint8 (as the weights' dtype under FSDP, so FSDP can
  shard them): the same modules and kernels tunebench's `load_in_4bit` plans (planning.quantized).
- GPTQ (`peft.quantization.auto_gptq`): each linear fms's GPTQ model definition names is a module holding qweight
  (int32, in·bits/32 × out), qzeros (int32, in/g × out·bits/32), scales (fp16, in/g × out) and g_idx (int32, in).
  Its forward and backward each dequantize the whole weight into a new fp16 [in, out] tensor (the Triton launcher's
  one allocation), multiply, and drop it; only the packed buffers are saved for backward. PEFT's LoRA wraps it as
  fms's GPTQ LoRA layer does (the base's output plus B·A·x). The rest of the model stays in the weights' dtype:
  PEFT's k-bit preparation upcasts nothing for GPTQ, and a tied output head stays tied. Under FSDP on several GPUs
  fms's loader turns qweight and qzeros into frozen parameters viewed as the model's dtype (its
  register_tensors_as_parameters_patch_rule), so FSDP shards them; scales and g_idx stay buffers, whole on each rank.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.experiment.fms.settings import FmsPlugins, fms_plugins_of
from tunebench.experiment.quantization import Quantization

logger = logging.getLogger(__name__)

# The definition fms's GPTQ loader uses when a model type has none of its own here: Llama's (most decoders).
LLAMA_DEFINITION = ("model.layers", (("self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"),
                                     ("self_attn.o_proj",), ("mlp.up_proj", "mlp.gate_proj"), ("mlp.down_proj",)))


@dataclass(frozen=True)
class GptqPlan:
    """What the fake step needs of a GPTQ base: its bits and group size, and the linears the loader quantizes."""

    bits: int = 4
    group_size: int = 128
    layers_node: str = "model.layers"
    layer_modules: tuple = ()  # flattened suffixes
    sharded: bool = False  # under FSDP on several GPUs: qweight and qzeros as frozen float16 parameters FSDP shards

    def quantizes(self, name: str) -> bool:
        return name.startswith(self.layers_node + ".") and any(name.endswith(s) for s in self.layer_modules)


def plugins_of_model(model: Mapping[str, Any] | Any) -> FmsPlugins:
    value = model.get("fms_plugins") if isinstance(model, Mapping) else getattr(model, "fms_plugins", "")
    try:
        return fms_plugins_of(value)
    except ValueError:
        return FmsPlugins()


def bnb_quantization(model: Mapping[str, Any] | Any, dtype: str, sharded: bool) -> Quantization | None:
    """tunebench's Quantization for fms's bitsandbytes loader (fms_acceleration_peft's BNBAccelerationPlugin)."""
    plugins = plugins_of_model(model)
    if plugins.base != "bnb":
        return None
    section = plugins.section("peft.quantization.bitsandbytes") or {}
    compute = dtype if dtype in ("bfloat16", "float16", "float32") else "bfloat16"
    return Quantization("bnb-4bit", str(section.get("quant_type", "nf4")), True, compute,
                        storage=compute if sharded else "uint8")


def gptq_plan(model: Mapping[str, Any] | Any, model_type: str | None, sharded: bool = False) -> GptqPlan | None:
    """The GPTQ base of an experiment's fms setting (None without one): 4 bits in groups of 128 (tunebench's own
    checkpoints; a local checkpoint's quantize_config.json otherwise), the linears of fms's model definition;
    `sharded`: FSDP on several GPUs."""
    plugins = plugins_of_model(model)
    if plugins.base != "gptq":
        return None
    layers_node, modules = definition(model_type or "llama")
    return GptqPlan(layers_node=layers_node, layer_modules=tuple(m for group in modules for m in group),
                    sharded=sharded)


@functools.lru_cache(maxsize=16)
def definition(model_type: str) -> tuple[str, tuple]:
    """(layers_node, layer_modules) of fms's GPTQ model definition for `model_type`, read from its source (the
    package refuses to import without a CUDA GPU); Llama's when fms is not installed here or has no plain
    definition for it (a note says so where it matters)."""
    spec = importlib.util.find_spec("fms_acceleration_peft") if _importable_spec() else None
    if spec is None or not spec.submodule_search_locations:
        return LLAMA_DEFINITION
    path = Path(spec.submodule_search_locations[0]) / "gptqmodel" / "models" / f"{model_type}.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return LLAMA_DEFINITION
    found: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("layers_node", "layer_modules"):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:  # built from expressions (mixtral's experts): not a plain definition
                return LLAMA_DEFINITION
    if set(found) != {"layers_node", "layer_modules"}:
        return LLAMA_DEFINITION
    return found["layers_node"], tuple(tuple(group) for group in found["layer_modules"])


def _importable_spec() -> bool:
    try:
        return importlib.util.find_spec("fms_acceleration_peft") is not None
    except (ImportError, ValueError):
        return False


def replace_with_gptq(model, plan: GptqPlan) -> int:
    """Swap the linears fms's loader quantizes (a LoRA layer's base layer included: PEFT wraps fms's QuantLinear as
    it wraps a linear) for GPTQ modules of the same shapes, on the model's device (the meta device in the fake step);
    returns how many."""
    import torch

    names = [n for n, m in model.named_modules()
             if isinstance(m, torch.nn.Linear) and plan.quantizes(n.removesuffix(".base_layer"))]
    for name in names:
        parent, _, child = name.rpartition(".")
        old = model.get_submodule(name)
        setattr(model.get_submodule(parent), child, gptq_linear_class()(old.in_features, old.out_features, plan,
                                                                         old.bias is not None, old.weight.device))
    if plan.sharded:
        _untie_output_head(model)
    model.is_loaded_in_4bit = True  # what fms's loader sets (PEFT and the Trainer read it)
    model.quantization_method = "gptq"
    return len(names)


def _untie_output_head(model) -> None:
    """Under FSDP fms's GPTQ loader loads with low_cpu_mem_usage, which leaves a tied output head its own tensor (an
    H200's 1B rank at 2 GPUs held one more half vocabulary × hidden parameter than its NF4 twin, and one whole
    gathered: 787 MB); the plan holds that copy too."""
    import torch

    head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and embeddings is not None and head.weight is embeddings.weight:
        head.weight = torch.nn.Parameter(torch.empty_like(embeddings.weight), requires_grad=False)


@functools.lru_cache(maxsize=1)
def gptq_linear_class():
    """A module shaped as fms's tritonv2 QuantLinear, as memory sees it: its packed buffers, and a forward and
    backward that each dequantize the whole weight into a new fp16 [in, out] tensor (the Triton launcher's one
    allocation), multiply, and keep only the packed buffers for backward."""
    import torch

    def dequantized(qweight, scales, g_idx):
        return torch.empty((g_idx.shape[0], scales.shape[1]), dtype=torch.float16, device=qweight.device)

    class GptqMatmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, qweight, scales, qzeros, g_idx):
            ctx.save_for_backward(qweight, scales, qzeros, g_idx)
            return x @ dequantized(qweight, scales, g_idx)

        @staticmethod
        def backward(ctx, grad):
            qweight, scales, _, g_idx = ctx.saved_tensors
            return grad @ dequantized(qweight, scales, g_idx).t(), None, None, None, None

    class GptqLinear(torch.nn.Module):
        def __init__(self, in_features: int, out_features: int, plan: GptqPlan, bias: bool, device):
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            group = plan.group_size if 0 < plan.group_size <= in_features else in_features
            groups = -(-in_features // group)
            with torch.device(device):
                packed = {"qweight": torch.empty(in_features * plan.bits // 32, out_features, dtype=torch.int32),
                          "qzeros": torch.empty(groups, out_features * plan.bits // 32, dtype=torch.int32)}
                for name, tensor in packed.items():
                    if plan.sharded:  # fms's FSDP patch: the int32 words viewed as float16, a frozen parameter
                        self.register_parameter(name, torch.nn.Parameter(tensor.view(torch.float16),
                                                                         requires_grad=False))
                    else:
                        self.register_buffer(name, tensor)
                self.register_buffer("scales", torch.empty(groups, out_features, dtype=torch.float16))
                self.register_buffer("g_idx", torch.empty(in_features, dtype=torch.int32))
                self.register_buffer("bias", torch.empty(out_features, dtype=torch.float16) if bias else None)

        def forward(self, x):
            qweight, qzeros = (t.view(torch.int32) for t in (self.qweight, self.qzeros))  # as fms's patched forward
            out = GptqMatmul.apply(x.reshape(-1, x.shape[-1]), qweight, self.scales, qzeros, self.g_idx)
            out = out.half().reshape(*x.shape[:-1], self.out_features)
            return out + self.bias if self.bias is not None else out

    return GptqLinear
