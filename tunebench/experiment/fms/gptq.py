"""GPTQ bases for random weights: the 4-bit checkpoint fms's GPTQ loader reads, made from a preset's random weights.

A preset or a config-only folder has no GPTQ checkpoint to load. tunebench builds the random weights the
unquantized baseline trains (same seed, same dtype, same init device), quantizes every layer fms's GPTQ model
definition quantizes by round-to-nearest (symmetric, per group of input columns: GPTQ's own quantizer without its
error-correcting calibration; the `gptq_method` column says `rtn`), packs them in the GPTQ v1 layout and writes the
folder once (tunebench.experiment.quantization.random_checkpoint caches it). The layout, per quantized linear of
`in` inputs and `out` outputs, group size `g`:

    qweight  int32 [in * bits / 32, out]   8 4-bit codes per int32, input rows packed from the low bits up
    qzeros   int32 [in / g, out * bits / 32] the zero point of each group and output, minus 1 (v1's convention)
    scales   fp16  [in / g, out]
    g_idx    int32 [in]                     the group of each input row (i // g without act-order)

and `quantize_config.json` beside `model.safetensors`. A weight is `scale * (code - zero)`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

QUANTIZE_CONFIG = "quantize_config.json"
MODEL_FILE = "model.safetensors"


@dataclass(frozen=True)
class GptqLayout:
    """How the checkpoint quantizes: bits, group size, symmetric zero points, no act-order."""

    bits: int = 4
    group_size: int = 128

    @property
    def maxq(self) -> int:
        return 2 ** self.bits - 1

    @property
    def per_int32(self) -> int:
        return 32 // self.bits

    def group(self, in_features: int) -> int:
        return self.group_size if 0 < self.group_size <= in_features else in_features

    def quantize_config(self) -> dict:
        return {"bits": self.bits, "group_size": self.group_size, "desc_act": False, "sym": True, "lm_head": False,
                "quant_method": "gptq", "checkpoint_format": "gptq", "damp_percent": 0.01, "true_sequential": True,
                "static_groups": False, "meta": {"quantizer": "tunebench", "method": "rtn"}}


def round_to_nearest(weight, layout: GptqLayout):
    """(codes int32 [out, in], scales fp16 [in/g, out], zero) of a [out, in] weight: GPTQ's symmetric quantizer
    (scale = 2 max|w| / maxq per output and group, zero point (maxq + 1) / 2), rounded against the fp16 scale the
    checkpoint stores, so that `scale * (code - zero)` is the nearest representable value."""
    import torch

    out_features, in_features = weight.shape
    g = layout.group(in_features)
    grouped = weight.float().reshape(out_features, in_features // g, g)
    top = grouped.abs().amax(dim=2)
    top = torch.where(top == 0, torch.ones_like(top), top)  # an all-zero group: GPTQ's quantizer uses [-1, 1]
    scales = (2 * top / layout.maxq).to(torch.float16)
    zero = (layout.maxq + 1) // 2
    codes = torch.round(grouped / scales.float().unsqueeze(2)) + zero
    codes = codes.clamp(0, layout.maxq).to(torch.int32).reshape(out_features, in_features)
    return codes, scales.t().contiguous(), zero


def pack_rows(codes, layout: GptqLayout):
    """int32 [rows / per_int32, cols] holding `codes` [rows, cols] (each < 2**bits), row i of a block at bit
    bits * (i % per_int32): the order GPTQ's QuantLinear.pack writes."""
    import torch

    rows, cols = codes.shape
    blocks = codes.to(torch.int64).reshape(rows // layout.per_int32, layout.per_int32, cols)
    shifts = (torch.arange(layout.per_int32, device=codes.device, dtype=torch.int64) * layout.bits).view(1, -1, 1)
    packed = (blocks << shifts).sum(dim=1)  # disjoint bits: the sum is the bitwise or
    return _as_int32(packed)


def _as_int32(values):
    """uint32 bit patterns held in int64 → the same bits as int32 (what numpy's astype(np.int32) gives)."""
    import torch

    return torch.where(values >= 2 ** 31, values - 2 ** 32, values).to(torch.int32)


def quantize_linear(weight, layout: GptqLayout) -> dict:
    """A [out, in] weight as the GPTQ v1 tensors (qweight, qzeros, scales, g_idx)."""

    out_features, in_features = weight.shape
    if in_features % 32 or out_features % 32:
        raise ValueError(f"fms's GPTQ kernel needs in and out features divisible by 32, got {in_features} x "
                         f"{out_features}")
    return pack_linear(*round_to_nearest(weight, layout), layout)


def pack_linear(codes, scales, zero: int, layout: GptqLayout) -> dict:
    """The GPTQ v1 tensors of a linear's codes [out, in], scales [in/g, out] and symmetric zero point."""
    import torch

    out_features, in_features = codes.shape
    g = layout.group(in_features)
    zeros = torch.full((in_features // g, out_features), zero - 1, dtype=torch.int32, device=codes.device)
    return {"qweight": pack_rows(codes.t().contiguous(), layout),
            "qzeros": pack_rows(zeros.t().contiguous(), layout).t().contiguous(),
            "scales": scales,
            "g_idx": (torch.arange(in_features, device=codes.device, dtype=torch.int32) // g)}


def quantized_names(model, definition) -> list[str]:
    """The linears fms's GPTQ loader makes quantized for this model: inside its repeated layers, named by its model
    definition's layer_modules (gptqmodel.models.<type>), as its from_quantized selects them."""
    from torch import nn

    suffixes = [name for group in definition.layer_modules for name in group]
    prefix = definition.layers_node + "."
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.startswith(prefix) and any(name.endswith(s) for s in suffixes)]


def write_checkpoint(model, folder: Path, definition, layout: GptqLayout = GptqLayout()) -> None:
    """`model` (random weights, in the dtype it trains in) as a GPTQ checkpoint in `folder`."""
    import torch
    from safetensors.torch import save_file

    names = set(quantized_names(model, definition))
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[int, str] = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if name in names:
                for key, value in quantize_linear(module.weight.data, layout).items():
                    tensors[f"{name}.{key}"] = value.cpu()
                if module.bias is not None:
                    tensors[f"{name}.bias"] = module.bias.data.to(torch.float16).cpu()
        for key, value in model.state_dict().items():
            owner = key.rsplit(".", 1)[0]
            if owner in names:
                continue
            # A tied weight (the output head sharing the embedding) is written under each name: fms's loader fills
            # each module from its own key (accelerate.load_checkpoint_in_model replaces the Parameter, untying it).
            tensors[key] = value.detach().to(torch.float16).cpu().clone() if value.data_ptr() in seen \
                else value.detach().to(torch.float16).cpu()
            seen.setdefault(value.data_ptr(), key)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / MODEL_FILE), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["architectures"] = config.get("architectures") or [type(model).__name__]
    config["torch_dtype"] = "float16"
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    (folder / QUANTIZE_CONFIG).write_text(json.dumps(layout.quantize_config(), indent=2, sort_keys=True))
    logger.info("wrote a GPTQ checkpoint (round-to-nearest, %d-bit, group %d) of %d linears: %s", layout.bits,
                layout.group_size, len(names), folder)


def is_gptq_folder(folder: str | Path) -> bool:
    """A local folder holding a GPTQ checkpoint (quantize_config.json, or a config.json naming gptq)."""
    folder = Path(folder)
    if (folder / QUANTIZE_CONFIG).is_file():
        return True
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    return isinstance(quant, dict) and quant.get("quant_method") == "gptq"


def gptq_method(folder: str | Path) -> str:
    """How a GPTQ checkpoint was made: `rtn` (tunebench's round-to-nearest packing), else `checkpoint` (a GPTQ
    calibration made elsewhere, as the folder was given)."""
    try:
        meta = json.loads((Path(folder) / QUANTIZE_CONFIG).read_text()).get("meta") or {}
    except (OSError, ValueError, AttributeError):
        meta = {}
    return "rtn" if meta.get("quantizer") == "tunebench" else "checkpoint"
