"""The checkpoint folder fms's model loader reads for an experiment: fms's loaders take from_pretrained folders only.

- GPTQ (`peft.quantization.auto_gptq`): a local GPTQ folder as given; random weights (a preset, a config-only
  folder) or a local unquantized checkpoint as a round-to-nearest GPTQ checkpoint written once
  (tunebench.experiment.fms.gptq), cached in `$TUNEBENCH_CACHE/models` beside the bitsandbytes ones.
- bitsandbytes (`peft.quantization.bitsandbytes`): a local checkpoint as given; random weights as the same random
  checkpoint tunebench's own 4-bit path loads (tunebench.experiment.quantization), so both quantize the same weights.
The random weights are those the unquantized baseline trains (same seed, dtype and init device), and the RNG state
after them is restored after loading, so LoRA's initialisation draws what it draws in the baseline.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tunebench.experiment.fms.gptq import GptqLayout, gptq_method, is_gptq_folder, write_checkpoint
from tunebench.experiment.fms.settings import FmsPlugins
from tunebench.experiment.models import random_builder, random_init_of, weights_dtype
from tunebench.experiment.quantization import random_checkpoint

logger = logging.getLogger(__name__)

GPTQ_KIND = "gptq-rtn-4bit-g128"
LAYOUT = GptqLayout(bits=4, group_size=128)


def gptq_definition(model_type: str):
    """fms's GPTQ model definition for a model type (which linears it quantizes); KeyError when it has none."""
    from fms_acceleration_peft.gptqmodel.models.auto import MODEL_MAP

    return MODEL_MAP[model_type]


def checkpoint_for(plugins: FmsPlugins, model_name_or_path: str, torch_dtype: str, attn_implementation: str | None,
                   init_device: str, seed: int) -> Path:
    """The folder the plugin's loader reads (written first when the experiment's weights have none)."""
    dtype = weights_dtype(model_name_or_path, torch_dtype)
    random_init = random_init_of(model_name_or_path)
    if plugins.base == "gptq":
        if not random_init and is_gptq_folder(model_name_or_path):
            return Path(model_name_or_path)
        return _gptq_of(model_name_or_path, dtype, attn_implementation, init_device, seed, random_init)
    if not random_init:
        return Path(model_name_or_path)
    config, build = random_builder(model_name_or_path, dtype, attn_implementation, init_device)
    return random_checkpoint(config, dtype, seed, init_device, build)


def _gptq_of(model_name_or_path: str, dtype, attn_implementation, init_device: str, seed: int,
             random_init: bool) -> Path:
    from tunebench.experiment.models import load_config

    config = load_config(model_name_or_path)
    definition = gptq_definition(config.model_type)
    if random_init:
        _, build = random_builder(model_name_or_path, dtype, attn_implementation, init_device)
    else:  # a local checkpoint's own weights, quantized the same way (its folder and files identify it)
        config.name_or_path = _fingerprint(model_name_or_path)

        def build():
            from transformers import AutoModelForCausalLM

            return AutoModelForCausalLM.from_pretrained(model_name_or_path, dtype=dtype, device_map={"": init_device})
    return random_checkpoint(config, dtype, seed, init_device, build, kind=GPTQ_KIND,
                             save=lambda model, folder: write_checkpoint(model, folder, definition, LAYOUT))


def _fingerprint(folder: str) -> str:
    """A local checkpoint's identity for the cache: its path and its files' sizes and times."""
    files = sorted((p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in Path(folder).iterdir() if p.is_file())
    return json.dumps([str(Path(folder).resolve()), files])


def quantization_label(plugins: FmsPlugins, checkpoint: Path | None) -> str:
    """The row's `quantization` column for an fms base: e.g. `gptq-4bit-g128-rtn`, `bnb-4bit-nf4-dq`."""
    if plugins.base == "gptq":
        method = gptq_method(checkpoint) if checkpoint else "rtn"
        try:
            config = json.loads((Path(checkpoint) / "quantize_config.json").read_text()) if checkpoint else {}
        except (OSError, ValueError):
            config = {}
        return f"gptq-{config.get('bits', LAYOUT.bits)}bit-g{config.get('group_size', LAYOUT.group_size)}-{method}"
    if plugins.base == "bnb":
        section = plugins.section("peft.quantization.bitsandbytes") or {}
        return f"bnb-4bit-{section.get('quant_type', 'nf4')}-dq"  # fms's loader always double-quantizes
    return "none"
