"""What a CSV column is declared as (Column): its kind, unit, direction, compare family and reference-page section."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from tunebench.results.columns.declared import S_KERNEL, S_LEARN, S_PROJ
from tunebench.results.columns.environment import SECTION as S_RUN_ENV
from tunebench.vocabulary import Direction, MetricFamily

logger = logging.getLogger(__name__)

IDENTITY, ARGUMENT, OUTCOME, METRIC, ENVIRONMENT, BOOKKEEPING = (
    "identity", "argument", "outcome", "metric", "environment", "bookkeeping")
# A metric's direction (tunebench.vocabulary.Direction, the word compare judges by): HIGHER = higher is better.
HIGHER, LOWER, TWO_SIDED = Direction.LOWER_IS_WORSE, Direction.HIGHER_IS_WORSE, Direction.TWO_SIDED


@dataclass(frozen=True)
class Column:
    name: str  # exact name, or a pattern with <placeholders> (e.g. scan_comm_<kind>_bytes)
    kind: str
    unit: str  # "s", "bytes", "MiB", "tokens/s", "fraction", "%", "J", "J/token", "FLOP", "count", "-"
    meaning: str
    section: str  # docs/reference/columns.md table it is listed in
    direction: Direction = Direction.IGNORE  # which way the metric gets worse; IGNORE = informational
    family: MetricFamily | None = None  # compare family (thresholds, noise floors); None for non-metrics

    def __post_init__(self):
        # A misspelt family or direction fails here, when the registry is imported, not mid-compare.
        object.__setattr__(self, "direction", Direction.parse(self.direction, f"column {self.name}: direction"))
        if self.family is not None:
            object.__setattr__(self, "family", MetricFamily.parse(self.family, f"column {self.name}: family"))

    @property
    def pattern(self) -> re.Pattern | None:
        if "<" not in self.name:
            return None
        return re.compile("^" + re.sub(r"<[^>]+>", r"[A-Za-z0-9_]+?", self.name) + "$")


def _m(name, unit, direction, family, section, meaning):
    return Column(name, METRIC, unit, meaning, section, direction or Direction.IGNORE, family)


def _k(name, kind, unit, section, meaning):
    return Column(name, kind, unit, meaning, section)


S_ID, S_OUT, S_STEADY, S_ACCEL, S_RUN, S_START, S_MEM, S_SIDE, S_SCAN, S_COMM, S_PRED, S_ENV, S_BOOK = (
    "Identity and configuration", "Outcome", "Steady-state throughput (the headline)",
    "Acceleration: torch.compile and loss parity",
    "Whole-run throughput (Hugging Face-compatible)", "Start-up", "Memory (harness)", "nvidia-smi sidecar",
    "Scanner", "Collectives (scanner)", "Memory prediction (--plan)", "Environment", "Bookkeeping")
SECTIONS = (S_ID, S_OUT, S_STEADY, S_ACCEL, S_LEARN, S_RUN, S_START, S_MEM, S_SIDE, S_SCAN, S_COMM, S_KERNEL, S_PRED,
            S_PROJ, S_ENV, S_RUN_ENV, S_BOOK)
