"""What a comparison found (CompareResult): shared by the comparison and the renderers of its findings."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

logger = logging.getLogger(__name__)


@dataclass
class CompareResult:
    """Everything a comparison found; ``exit_code`` is 0 (clean) or 1 (at least one regression)."""

    exit_code: int
    markdown: str
    comparison: pd.DataFrame  # one row per (matched experiment, metric) with its verdict
    outliers: pd.DataFrame  # every finding: regression, unstable, improvement, failed, fixed, missing, new
    changed_arguments: pd.DataFrame  # label, argument, reference, new
    keys: list[str]
    notes: list[str] = field(default_factory=list)
    environment: list[tuple[str, str, str]] = field(default_factory=list)  # column, reference, results
    files: list[Path] = field(default_factory=list)

    @property
    def regressions(self) -> pd.DataFrame:
        return self.outliers[self.outliers["regression"]]
