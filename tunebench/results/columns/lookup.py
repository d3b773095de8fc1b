"""Questions asked of the column registry: a column's declaration (here or by a tracker plugin), kind, compare
family, direction and unit, and which produced columns are declared nowhere."""

from __future__ import annotations

import functools
import logging

from tunebench.results.columns.registry import REGISTRY
from tunebench.results.columns.types import ARGUMENT, ENVIRONMENT, IDENTITY, METRIC, OUTCOME, Column
from tunebench.vocabulary import Direction

logger = logging.getLogger(__name__)

_EXACT = {c.name: c for c in REGISTRY if c.pattern is None}
_PATTERNS = [c for c in REGISTRY if c.pattern is not None]
# Per-rank spread of the scanner's memory and time columns (docs/reference/columns.md).
_RANK_SUFFIXES = ("_min", "_mean")


@functools.lru_cache(maxsize=1)
def plugin_columns() -> dict[str, Column]:
    """The columns other packages' trackers declare (their `COLUMNS`), by name; a plugin that does not import
    declares none (it is not run either)."""
    from tunebench.telemetry.trackers import TRACKERS

    found: dict[str, Column] = {}
    for name in TRACKERS.names():
        if name in TRACKERS.builtins:
            continue
        # another package's bug: its columns stay undeclared (the command line names the broken plugin)
        declared = getattr(TRACKERS.try_load(name), "COLUMNS", ())
        found.update({c.name: c for c in declared if isinstance(c, Column) and c.name not in _EXACT})
    return found


def lookup(name: str) -> Column | None:
    """The declaration of a column (here, or by a tracker plugin), or None when it is not declared (an argument,
    or a new column)."""
    column = _EXACT.get(name) or plugin_columns().get(name)
    if column is not None:
        return column
    for suffix in _RANK_SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and base.startswith(("scan_mem_", "scan_time_")):
            parent = lookup(base)
            if parent is not None:
                return Column(name, parent.kind, parent.unit, f"{suffix[1:]} over ranks of `{base}`",
                              parent.section, parent.direction, parent.family)
    return next((c for c in _PATTERNS if c.pattern.match(name)), None)


def text_columns() -> list[str]:
    """Declared columns whose cells are words, whatever they look like: read back from a CSV as text (an id or a
    git hash of digits keeps its leading zeros, a driver version stays a version, a scenario called 2024 a name)."""
    return [c.name for c in REGISTRY if c.unit == "-" and c.pattern is None and c.kind in (IDENTITY, OUTCOME,
                                                                                          ENVIRONMENT)]


def kind_of(name: str) -> str:
    """The column's kind; undeclared columns are arguments (every training argument is a column)."""
    column = lookup(name)
    return column.kind if column is not None else ARGUMENT


def metric_family(name: str) -> str | None:
    """The compare family of a numeric metric, or None for anything else."""
    column = lookup(name)
    return column.family if column is not None and column.kind == METRIC else None


def direction(name: str) -> Direction:
    """Which way the column gets worse (IGNORE: informational, or not a declared metric)."""
    column = lookup(name)
    return column.direction if column is not None else Direction.IGNORE


def unit(name: str) -> str:
    column = lookup(name)
    return column.unit if column is not None else "-"


def undeclared(names, known_arguments: set[str]) -> list[str]:
    """Columns neither declared here nor a training argument: each needs a declaration before it ships."""
    return sorted(n for n in names if lookup(n) is None and n not in known_arguments)
