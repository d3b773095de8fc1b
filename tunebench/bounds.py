"""Ranges of numeric inputs (options, arguments, values read from files): finite, within bounds, and described
the same way in messages, `--help` and the docs."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Range:
    """The values a numeric argument may take: [low, high], either end open or absent, plus exceptions."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: tuple = ()  # values allowed outside the range (max_steps -1: train by epochs)

    def problem(self, value) -> str | None:
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value in self.also:
            return None
        ok = isinstance(value, int) or math.isfinite(value)  # a 400-digit int is finite, and too large for a float
        if ok and self.low is not None:
            ok = value > self.low if self.low_open else value >= self.low
        if ok and self.high is not None:
            ok = value < self.high if self.high_open else value <= self.high
        return None if ok else f"{value} is out of range: expected {self.describe()}"

    def describe(self) -> str:
        def number(value: float) -> str:
            return f"{int(value):,}" if float(value).is_integer() else repr(value)

        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {number(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {number(self.high)}")
        text = " and ".join(parts) or "a finite number"
        return text + "".join(f" (or {v})" for v in self.also)


# Above these a value is a typo, and worse: Process.join / threading waits overflow past ~2**31 s, and a Slurm
# time limit is in minutes. 30 days is longer than any fine-tuning benchmark is meant to run.
MAX_SECONDS = 30 * 24 * 3600
MAX_MINUTES = MAX_SECONDS // 60
MAX_COUNT = 2**20  # batch sizes, sequence lengths, steps of one option: more is never meant
SECONDS = Range(0, MAX_SECONDS, low_open=True)
COUNT = Range(1, MAX_COUNT)  # the values of a matrix (GPUs, batch sizes, sequence lengths)
