"""The training entry's seam to fms-acceleration: `AccelerationFramework` driven as fms-hf-tuning's trainer drives it.

1. `framework = AccelerationFramework(<the experiment's fms_plugins.yaml>)`;
2. its `model_loader` when a plugin loads the model (GPTQ, bitsandbytes), from a checkpoint folder;
3. `augmentation(model, sft_config, (peft_config,))`: the GPTQ and bnb plugins add LoRA themselves and hand back None;
4. the trainer built with the PEFT config that comes back;
5. `get_callbacks_and_ready_for_train(model, trainer.accelerator)`: foak patches the model here; its callbacks are
   the trainer's.

Every fms experiment runs in a fresh interpreter (never a fork of the preload server): fms allows one custom loader
per process, and GPTQ and foak patch peft's and transformers' classes for the whole process. Each step that can
change process-wide state runs inside `compat.Restored`, and what it put back is part of the row's `fms_patches`.
"""

from __future__ import annotations

import importlib.metadata
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tunebench.experiment.fms import compat
from tunebench.experiment.fms.settings import FmsPlugins

logger = logging.getLogger(__name__)

CONFIG_FILE = "fms_plugins.yaml"  # in the experiment folder: the file AccelerationFramework reads (and a repro)


@dataclass
class FmsRun:
    """One experiment's AccelerationFramework and what was done to make it run."""

    plugins: FmsPlugins
    framework: Any
    patches: list[str] = field(default_factory=list)
    checkpoint: str | None = None  # the folder the plugin loaded the model from

    @classmethod
    def start(cls, plugins: FmsPlugins, folder: Path) -> FmsRun:
        """Import fms with only the plugins `plugins` needs, apply the compatibility fixes, and make the framework."""
        fms = compat.import_framework(plugins.packages)
        patches = compat.patch_moved_imports()
        if plugins.foak_base_layer == "bitsandbytes":
            import fms_acceleration_foak.fused_ops.unsloth_lora.bnb.fast_lora  # noqa: F401 - it holds the name

            patches += compat.mend_foak_bnb()
        path = Path(folder) / CONFIG_FILE
        path.write_text(yaml.safe_dump({"plugins": dict(plugins.body)}, sort_keys=True))
        return cls(plugins, fms.AccelerationFramework(str(path)), patches)

    def _contained(self, step: str, call, *args, **kwargs):
        with compat.Restored() as restored:
            result = call(*args, **kwargs)
        self.patches += [f"{step} left {name} changed: restored" for name in restored.restored]
        return result

    @property
    def loads_model(self) -> bool:
        return bool(self.framework.requires_custom_loading)

    def load_model(self, model_args, init_device: str, seed: int, sharded: bool = False):
        """The plugin's model loader on the experiment's checkpoint folder (tunebench.experiment.fms.bases: written
        first for random weights), the RNG then where the random init left it. `sharded`: FSDP over several
        processes, which fms's loaders learn from accelerate's variable (below)."""
        import os

        from tunebench.experiment.fms.bases import checkpoint_for
        from tunebench.experiment.models import weights_dtype
        from tunebench.experiment.quantization import restore_rng_state

        if sharded and os.environ.get("ACCELERATE_USE_FSDP", "").lower() != "true":
            # fms's loaders decide FSDP by ACCELERATE_USE_FSDP, which `accelerate launch` sets from an FSDP config
            # file (fms's way); tunebench asks for FSDP through TrainingArguments, which does not set it. Without it
            # the bnb loader stores 4-bit weights as uint8 (FSDP cannot flatten them) and the GPTQ loader spreads
            # one rank's model over every visible GPU.
            os.environ["ACCELERATE_USE_FSDP"] = "true"
            self.patches.append("ACCELERATE_USE_FSDP=true (as accelerate launch sets it for FSDP; fms's loaders "
                                "read it)")
        path = checkpoint_for(self.plugins, model_args.model_name_or_path, model_args.torch_dtype,
                              model_args.attn_implementation, init_device, seed)
        model = self.load(path, weights_dtype(str(path), model_args.torch_dtype), model_args.attn_implementation)
        restore_rng_state(path, init_device)
        return model

    def load(self, checkpoint: str | Path, torch_dtype, attn_implementation: str | None):
        """The plugin's model loader on a checkpoint folder (fms's loaders read from_pretrained folders only)."""
        self.checkpoint = str(checkpoint)
        kwargs = {"torch_dtype": torch_dtype, "low_cpu_mem_usage": False}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        return self._contained("model_loader", self.framework.model_loader, self.checkpoint, **kwargs)

    def augment(self, model, sft_config, peft_config):
        """(model, peft_config) after the plugins' augmentation; the PEFT config is None where a plugin added LoRA."""
        if not getattr(model.config, "architectures", None):  # what save_pretrained writes; fms checks it
            model.config.architectures = [type(model).__name__]
        if not self.framework.requires_augmentation:
            return model, peft_config
        model, (peft_config,) = self._contained("augmentation", self.framework.augmentation, model, sft_config,
                                                (peft_config,))
        return model, peft_config

    def ready(self, model, trainer) -> None:
        """Patch the model (foak's kernels) and the accelerator; the plugins' callbacks join the trainer's."""
        callbacks = self._contained("get_callbacks_and_ready_for_train",
                                    self.framework.get_callbacks_and_ready_for_train, model, trainer.accelerator)
        for callback in callbacks:
            trainer.add_callback(callback)

    def columns(self) -> dict[str, Any]:
        """The row's fms columns: the plugin paths, their packages' versions, every patch applied."""
        from tunebench.experiment.fms.bases import quantization_label

        columns = {"fms_plugins": self.plugins.label(),
                   "fms_versions": ";".join(f"{compat.DISTRIBUTION.get(p, p)}=={_version(p)}"
                                            for p in self.plugins.packages),
                   "fms_patches": ";".join([*self.patches, *_model_patches()]) or None}
        if self.plugins.base != "model":
            checkpoint = Path(self.checkpoint) if self.checkpoint else None
            columns["quantization"] = quantization_label(self.plugins, checkpoint)
        return columns


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(compat.DISTRIBUTION.get(package, package))
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _model_patches() -> list[str]:
    """fms's ModelPatcher history: each rule with the number of modules it patched (foak's kernels)."""
    try:
        from fms_acceleration.model_patcher import ModelPatcher
    except ImportError:
        return []
    counts: dict[str, int] = {}
    for entry in ModelPatcher.history:
        counts[entry.rule_id] = counts.get(entry.rule_id, 0) + 1
    return [f"rule {rule} x{count}" for rule, count in sorted(counts.items())]
