"""Whether an experiment's fms plugins can run, before anything runs: input problems (exit 2, with the fix) and
reasons to skip one experiment (its row is `skipped`; the matrix goes on).

Problems are the input's: a body fms would not understand (a path no plugin registers, a value a plugin refuses),
fms packages missing where the experiment would run, or both fms's loader and tunebench's bitsandbytes path asked
to quantize. Skips are the experiment's: a plugin package that cannot be imported here (aadp on trl >= 0.20), a
Triton kernel asked of a CPU, a quantized base without LoRA, an architecture a plugin restricts itself to, a model
type fms's GPTQ loader has no definition for, a package a plugin requires.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tunebench.experiment.fms import checks
from tunebench.experiment.fms.compat import missing_packages
from tunebench.experiment.fms.settings import INSTALL_FIX, PACKAGE_OF_PATH, FmsPlugins, fms_plugins_of
from tunebench.experiment.quantization import bit_widths

logger = logging.getLogger(__name__)

Problem = tuple[str, str, str]  # (key, message, fix)


def plugins_of(model: Mapping[str, Any]) -> FmsPlugins:
    """The model group's fms setting (a spec's `entry["model"]`); an unreadable one counts as none here (problems()
    reports it)."""
    try:
        return fms_plugins_of(model.get("fms_plugins"))
    except ValueError:
        return FmsPlugins()


def problems(model: Mapping[str, Any], device_type: str, installed_here: bool) -> list[Problem]:
    """Exit-2 problems of the model group's fms setting."""
    try:
        plugins = fms_plugins_of(model.get("fms_plugins"))
    except ValueError as exc:
        return [("fms_plugins", str(exc), "write fms's `plugins:` mapping, e.g. {peft: {quantization: {auto_gptq: "
                                          "{kernel: triton_v2, from_quantized: true}}}}")]
    if not plugins.enabled:
        return []
    found = [("fms_plugins", f"{path!r} is a path no fms plugin registers (fms would ignore it and train the plain "
                             "model under this config's name)", "use one of: " + ", ".join(sorted(PACKAGE_OF_PATH)))
             for path in plugins.unknown_paths]
    if not plugins.paths:  # sections without a plugin's settings ({peft: {}}): fms would load nothing either
        return found or [("fms_plugins", "names no fms plugin's settings (its sections are empty: fms would train the "
                                         "plain model under this config's name)", "give a plugin's settings, e.g. "
                                         "{peft: {quantization: {auto_gptq: {kernel: triton_v2, from_quantized: "
                                         "true}}}}, or leave fms_plugins out")]
    if plugins.base != "model" and any(bit_widths(model)):
        found.append(("fms_plugins", f"fms's {plugins.base} loader quantizes the base, and load_in_4bit/load_in_8bit "
                                     "asks tunebench's bitsandbytes path to as well", "keep one of the two"))
    missing = missing_packages(plugins.packages)
    if missing and (installed_here or device_type == "cpu"):
        return [*found, ("fms_plugins", f"fms-acceleration's plugins need {', '.join(missing)}, not installed here",
                         f"pip install --no-deps {' '.join(missing)} (--no-deps keeps numpy: the fms wheels pin "
                         f"numpy<2 in their metadata only; {INSTALL_FIX})")]
    if missing or found:
        return found
    for error in checks.facts(plugins.text()).get("config_errors", []):
        found.append(("fms_plugins", f"fms refuses the config: {error}", "set the value fms names"))
    return found


def skip_reason(model: Mapping[str, Any], peft_method: str, model_name_or_path: str, device_type: str) -> str | None:
    """Why fms's plugins cannot run this experiment here (its row is skipped with the reason), or None."""
    plugins = plugins_of(model)
    if not plugins.enabled:
        return None
    if plugins.base != "model" and peft_method != "lora":
        return (f"fms's {plugins.base} base has frozen quantized weights: only LoRA adapters train on it (peft_method "
                f"is {peft_method!r}; pair this framework config with a LoRA scenario)")
    if device_type == "cpu" and (plugins.base == "gptq" or plugins.foak):
        kernel = "GPTQ dequantization is a Triton GPU kernel" if plugins.base == "gptq" else \
            "fused ops (foak) are Triton GPU kernels"
        return f"fms's {kernel}: there is none for the CPU (run it on a GPU)"
    if missing_packages(plugins.packages):
        return None  # planned or written out for a machine that has them (problems() names them where it matters)
    facts = checks.facts(plugins.text())
    return _broken(facts, plugins) or _unsupported_model(facts, plugins, model_name_or_path)


def _broken(facts: dict[str, Any], plugins: FmsPlugins) -> str | None:
    if facts.get("error"):
        return facts["error"]
    broken = [why for package, why in facts.get("packages", {}).items() if why and package in plugins.packages]
    if broken:
        return "; ".join(broken)
    return "; ".join(facts.get("requires", [])) or None


def _unsupported_model(facts: dict[str, Any], plugins: FmsPlugins, model_name_or_path: str) -> str | None:
    from tunebench.experiment.models import load_config, resolve_model_source

    if resolve_model_source(model_name_or_path).kind == "hub":
        return None  # its config needs the network; fms's own check fails the run if it must
    config = load_config(model_name_or_path)
    architecture = causal_lm_class(config)
    for plugin, allowed in facts.get("restricted_archs", []):
        if architecture not in allowed:
            return (f"fms's {plugin} supports only {', '.join(allowed)}; {model_name_or_path} is {architecture} "
                    "(fms refuses it at augmentation)")
    types = facts.get("gptq_model_types")
    if plugins.base == "gptq" and types is not None and config.model_type not in types:
        return (f"fms's GPTQ loader has no model definition for {config.model_type!r} (it has: "
                f"{', '.join(types)})")
    return None


def causal_lm_class(config) -> str:
    """The class AutoModelForCausalLM builds for a config: what fms compares with a plugin's restricted archs."""
    if getattr(config, "architectures", None):
        return config.architectures[0]
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type, type(config).__name__)
