"""PEFT's "has bitsandbytes a 4-bit layer?" answered from its version while the preload server holds it deferred.

Every LoRA wrap imports PEFT's bitsandbytes layers, and that module asks `is_bnb_4bit_available()`, which reads
`bitsandbytes.nn`: bitsandbytes' whole import, 2.6-3.3 s on an H200 after the stack (issue AE,
docs/evidence/matrix-wall-h200.md, call I), paid by every LoRA experiment that quantizes nothing. PEFT uses those
layers only for a model loaded in 4 or 8 bits, and such a model has imported bitsandbytes already; so until
bitsandbytes has run its own import, the answer comes from its installed version, and after, from PEFT's own check.
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys

from tunebench.experiment.deferred_module import loaded

logger = logging.getLogger(__name__)

FIRST_WITH_LINEAR4BIT = (0, 39)  # bitsandbytes.nn.Linear4bit appeared in 0.39.0


def has_linear4bit(version: str) -> bool:
    """What `hasattr(bitsandbytes.nn, "Linear4bit")` gives for a bitsandbytes of that version."""
    from packaging.version import Version

    return Version(version).release[:2] >= FIRST_WITH_LINEAR4BIT


def answer_from_the_version() -> int:
    """Put the version's answer in place of PEFT's `is_bnb_4bit_available` wherever a loaded module holds it (PEFT's
    tuners import it by name), until bitsandbytes is loaded; how many references were replaced."""
    import peft.import_utils

    original = peft.import_utils.is_bnb_4bit_available
    if getattr(original, "__wrapped_by_tunebench__", False):
        return 0
    answer = has_linear4bit(importlib.metadata.version("bitsandbytes"))

    def is_bnb_4bit_available() -> bool:
        return original() if loaded("bitsandbytes") else answer

    is_bnb_4bit_available.__wrapped__ = original
    is_bnb_4bit_available.__wrapped_by_tunebench__ = True
    is_bnb_4bit_available.cache_clear = getattr(original, "cache_clear", lambda: None)
    replaced = 0
    for name, module in list(sys.modules.items()):
        # PEFT's own modules only, read through __dict__: another module's __getattr__ (a lazy module, the deferred
        # placeholder itself) could import what it holds
        if (name == "peft" or name.startswith("peft.")) and \
                getattr(module, "__dict__", {}).get("is_bnb_4bit_available") is original:
            module.is_bnb_4bit_available = is_bnb_4bit_available
            replaced += 1
    return replaced
