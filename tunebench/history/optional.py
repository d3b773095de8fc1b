"""The history extra's libraries (DuckDB, ruptures), imported on first use with one clear line when absent."""

from __future__ import annotations

import importlib
import logging

from tunebench.errors import InputError, InputProblem

logger = logging.getLogger(__name__)

INSTALL = "pip install 'tunebench[history]'"


def require(module: str, purpose: str):
    """The module, or an InputError naming it and the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError([InputProblem("environment", module, f"not installed; {purpose} needs it",
                                       INSTALL)]) from None
