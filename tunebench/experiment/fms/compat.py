"""What lets fms-acceleration's plugins run on today's libraries, and keeps what they change process-wide in check.

- Only the plugin packages a config needs are imported: `import fms_acceleration` imports every installed
  `fms_acceleration_*`, so one that cannot import (aadp on trl >= 0.20: `DataCollatorForCompletionOnlyLM` is gone)
  failed every fms config. The others are hidden from that loop (`sys.modules[name] = None`).
- transformers 5 moved `no_init_weights` out of `modeling_utils`, where fms's GPTQ loader imports it from.
- foak's bnb dequantization calls bitsandbytes' C functions with their pre-0.50 arguments (a TypeError on 0.50);
  it is routed through bitsandbytes' public `dequantize_4bit`, the same kernel behind a stable signature.
- fms's GPTQ loader turns `torch.nn.init`'s initialisers into no-ops and never restores them (LoRA's A matrices then
  start as uninitialised memory and the loss is NaN), and its plugin replaces `AutoModelForCausalLM.from_config`:
  `Restored` puts back everything a call changed, and says what it did.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tunebench.experiment.fms.settings import DISTRIBUTION, FRAMEWORK_PACKAGE, PACKAGE_OF_PATH

logger = logging.getLogger(__name__)

# Every plugin package fms_acceleration's __init__ imports when installed (fms_acceleration.constants.PLUGINS).
PLUGIN_PACKAGES = sorted({*PACKAGE_OF_PATH.values(), "fms_acceleration_odm"})
# What a broken package's import error means and how to mend it, by the text of the error.
KNOWN_BREAKAGES = {
    "DataCollatorForCompletionOnlyLM": "this trl no longer has DataCollatorForCompletionOnlyLM (removed in trl 0.20), "
                                       "which aadp imports; fix: run aadp's configs with trl<0.20 (and flash-attn), "
                                       "or uninstall fms-acceleration-aadp",
}


def installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent package that fails, or a module hidden as None
        return False


def missing_packages(packages: Iterable[str]) -> list[str]:
    """pip's names of the packages not installed here."""
    return [DISTRIBUTION.get(p, p) for p in packages if not installed(p)]


def import_framework(packages: Iterable[str]):
    """fms_acceleration with only `packages` of its plugins registered; ImportError naming the package (and the
    known cause) when one of them cannot be imported. Call once per process, before anything else imports fms."""
    wanted = set(packages)
    for name in PLUGIN_PACKAGES:
        if name not in wanted and name not in sys.modules:
            sys.modules[name] = None  # find_spec answers None: fms_acceleration's loop skips it
    for name in [FRAMEWORK_PACKAGE, *sorted(wanted - {FRAMEWORK_PACKAGE})]:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import failure of a plugin is reported, with its cause
            raise ImportError(import_failure(culprit(exc, wanted | {name}), exc)) from exc
    return importlib.import_module(FRAMEWORK_PACKAGE)


def culprit(exc: BaseException, candidates: set[str]) -> str:
    """The fms package an import failure comes from: the deepest frame of its traceback inside a plugin package
    (importing the framework imports its plugins), else the framework."""
    found = FRAMEWORK_PACKAGE
    frame = exc.__traceback__
    while frame is not None:
        top = frame.tb_frame.f_globals.get("__name__", "").split(".")[0]
        if top in candidates and top != FRAMEWORK_PACKAGE:
            found = top
        frame = frame.tb_next
    return found


def import_failure(package: str, exc: BaseException) -> str:
    """One line: which fms package cannot be imported, why, and the fix where the cause is known."""
    text = "".join(traceback.format_exception_only(exc)).strip().splitlines()[-1]
    known = next((meaning for marker, meaning in KNOWN_BREAKAGES.items() if marker in text), None)
    return f"{DISTRIBUTION.get(package, package)} cannot be imported here ({text[:300]})" + (
        f": {known}" if known else "")


def patch_moved_imports() -> list[str]:
    """Put names fms's code imports back where it looks for them; returns what was patched."""
    import transformers.modeling_utils as modeling_utils

    patched = []
    if not hasattr(modeling_utils, "no_init_weights"):
        from transformers.initialization import no_init_weights

        modeling_utils.no_init_weights = no_init_weights
        patched.append("transformers.modeling_utils.no_init_weights (moved to transformers.initialization)")
    return patched


def foak_bnb_dequantize(weight, quant_state=None, out=None):
    """foak's `fast_dequantize` through bitsandbytes' public API: the same blockwise NF4/FP4 dequantization (nested
    absmax included) and the same transposition of a weight stored as one row."""
    if quant_state is None:
        return weight
    import bitsandbytes.functional as bnb_functional

    return bnb_functional.dequantize_4bit(weight, quant_state, out=out)


def mend_foak_bnb() -> list[str]:
    """Replace foak's `fast_dequantize` wherever its modules hold it; returns what was replaced."""
    mended = []
    for name, module in list(sys.modules.items()):
        if name.startswith("fms_acceleration_foak") and module is not None \
                and callable(getattr(module, "fast_dequantize", None)) \
                and module.fast_dequantize is not foak_bnb_dequantize:
            module.fast_dequantize = foak_bnb_dequantize
            mended.append(f"{name}.fast_dequantize -> bitsandbytes.functional.dequantize_4bit")
    return mended


def _init_functions() -> list[tuple[Any, str]]:
    import torch

    return [(torch.nn.init, name) for name in dir(torch.nn.init) if name.endswith("_") and not name.startswith("_")]


def _loader_attributes() -> list[tuple[Any, str]]:
    import transformers
    import transformers.modeling_utils as modeling_utils

    return [(transformers.AutoModelForCausalLM, "from_config"), (modeling_utils, "_init_weights")]


_ABSENT = object()


@dataclass
class Restored:
    """A context that puts back the initialisers of torch.nn.init and the loader attributes fms replaces, and
    records (`restored`) each one it found changed."""

    restored: list[str] = field(default_factory=list)
    _saved: list[tuple[Any, str, Any]] = field(default_factory=list)

    def __enter__(self) -> Restored:
        self._saved = [(owner, name, owner.__dict__.get(name, _ABSENT) if isinstance(owner, type)
                        else getattr(owner, name, _ABSENT)) for owner, name in _init_functions() + _loader_attributes()]
        return self

    def __exit__(self, *exc_info) -> None:
        for owner, name, value in self._saved:
            now = owner.__dict__.get(name, _ABSENT) if isinstance(owner, type) else getattr(owner, name, _ABSENT)
            if now is value:
                continue
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
            self.restored.append(f"{getattr(owner, '__name__', owner)}.{name}")
        if self.restored:
            logger.info("restored what fms changed process-wide: %s", ", ".join(self.restored))
