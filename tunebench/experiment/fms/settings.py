"""The `fms_plugins` setting: fms-acceleration's `plugins:` body (as in its sample configurations), typed.

What a body asks for is read here once (tests/test_layout.py: one reader): the quantized base it loads (GPTQ or
bitsandbytes), whether foak's fused kernels run, and which fms packages serve it. The paths are those the plugins
register themselves under (`AccelerationPlugin.register_plugin`); a path no plugin registers is named as unknown
before anything runs, since fms would ignore it and train the plain model under the config's name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# Each configuration path a plugin registers (fms-acceleration 0.6, its plugins' register_plugin calls) and the
# package that registers it. `training.attention` is aadp's multipack/padding-free pair.
PACKAGE_OF_PATH = {
    "peft.quantization.auto_gptq": "fms_acceleration_peft",
    "peft.quantization.bitsandbytes": "fms_acceleration_peft",
    "peft.quantization.fused_ops_and_kernels": "fms_acceleration_foak",
    "training.fused_ops_and_kernels": "fms_acceleration_foak",
    "training.attention": "fms_acceleration_aadp",
    "training.dataloader.multipack": "fms_acceleration_aadp",
    "training.moe.scattermoe": "fms_acceleration_moe",
    "training.odm.odm": "fms_acceleration_odm",
    "training.mamba.cp": "fms_acceleration_mcp",
}
FRAMEWORK_PACKAGE = "fms_acceleration"
# pip's names of the packages (the fix of a missing one names them).
DISTRIBUTION = {FRAMEWORK_PACKAGE: "fms-acceleration", **{p: p.replace("_", "-") for p in PACKAGE_OF_PATH.values()}}
INSTALL_FIX = "`python scripts/install_deps.py --fms` installs fms-acceleration, -peft and -foak this way"
GPTQ_PATH = "peft.quantization.auto_gptq"
BNB_PATH = "peft.quantization.bitsandbytes"
FOAK_PATHS = ("peft.quantization.fused_ops_and_kernels", "training.fused_ops_and_kernels")


def _lookup(body: Mapping[str, Any], path: str) -> Any:
    node: Any = body
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def unknown_paths(body: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The body's paths no plugin registers: each named where it leaves every registered path (not below)."""
    found = []
    for key, value in body.items():
        path = f"{prefix}{key}"
        if path in PACKAGE_OF_PATH:
            continue
        if isinstance(value, Mapping) and any(k.startswith(f"{path}.") for k in PACKAGE_OF_PATH):
            found.extend(unknown_paths(value, f"{path}."))
        else:
            found.append(path)
    return found


@dataclass(frozen=True)
class FmsPlugins:
    """An fms `plugins:` body (empty: no fms plugin). Read-only views of what it asks for."""

    body: Mapping[str, Any] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.body)

    def section(self, path: str) -> Any:
        """The body's value at a dotted path, or None."""
        return _lookup(self.body, path)

    @property
    def paths(self) -> list[str]:
        """The registered paths the body uses (sorted)."""
        return sorted(p for p in PACKAGE_OF_PATH if self.section(p) is not None)

    @property
    def unknown_paths(self) -> list[str]:
        """Paths of the body that no fms plugin registers: fms would ignore them."""
        return unknown_paths(self.body)

    @property
    def packages(self) -> list[str]:
        """The fms packages the body needs, the framework first."""
        return [FRAMEWORK_PACKAGE, *sorted({PACKAGE_OF_PATH[p] for p in self.paths})] if self.enabled else []

    @property
    def base(self) -> str:
        """The base the plugins load: `gptq`, `bnb` (bitsandbytes through fms's loader) or `model` (as it is)."""
        if self.section(GPTQ_PATH) is not None:
            return "gptq"
        return "bnb" if self.section(BNB_PATH) is not None else "model"

    @property
    def foak(self) -> Mapping[str, Any] | None:
        """foak's section (fused LoRA, fast loss, RMSNorm, RoPE switches), or None."""
        for path in FOAK_PATHS:
            found = self.section(path)
            if isinstance(found, Mapping):
                return found
        return None

    @property
    def foak_base_layer(self) -> str | None:
        """The quantized base foak's fused LoRA is written for (`auto_gptq` by fms's default), when it fuses LoRA."""
        foak = self.foak
        if not foak or not foak.get("fused_lora"):
            return None
        return str(foak.get("base_layer", "auto_gptq"))

    @property
    def adds_adapters(self) -> bool:
        """The plugins install LoRA themselves (fms's accelerated GPTQ and bnb paths hand the trainer no PEFT
        config); `no_peft_model: true` leaves it to the trainer (baseline-peft-bnb)."""
        if self.base == "gptq":
            return True
        bnb = self.section(BNB_PATH)
        return isinstance(bnb, Mapping) and not bnb.get("no_peft_model", False)

    def label(self) -> str:
        """The row's `fms_plugins` column: the plugin paths it used, `+`-joined (`auto_gptq+fused_ops_and_kernels`)."""
        return "+".join(p.rsplit(".", 1)[-1] for p in self.paths) or "none"

    def text(self) -> str:
        """The body as the typed value carries it (sorted JSON)."""
        return json.dumps(self.body, sort_keys=True) if self.body else ""


def fms_plugins_of(value: Any) -> FmsPlugins:
    """The setting from its typed value (the JSON text a spec carries) or a mapping; ValueError when it is neither
    empty, a mapping, nor JSON text of one."""
    if value in (None, "", {}):
        return FmsPlugins()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"fms_plugins is not a mapping (JSON text of one): {exc.msg}") from None
    if not isinstance(value, Mapping):
        raise ValueError(f"fms_plugins is a {type(value).__name__}, not a mapping of plugin sections")
    if isinstance(value.get("plugins"), Mapping) and len(value) == 1:
        value = value["plugins"]  # a whole sample configuration file's content: its `plugins:` body
    return FmsPlugins(dict(value))


def needed_arguments(plugins: FmsPlugins) -> dict[str, Any]:
    """The training arguments a body needs to run, as fms's own scenarios give them: GPTQ-LoRA runs in float16
    (its dequantization returns fp16 and the plugin asserts fp16; fms-acceleration issue 84)."""
    if plugins.base == "gptq":
        return {"fp16": True, "torch_dtype": "float16"}
    return {}
