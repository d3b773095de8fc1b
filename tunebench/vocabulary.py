"""tunebench's words, one typed vocabulary per idea: a misspelt status, family or direction fails where it is written.

Each is a `str` enumeration, so a member equals, hashes, prints and is written to CSV/JSON as its plain text
(`Status.OK == "ok"`), and text read back (a row, a YAML value, an option) becomes a member through `Word.parse`,
which names the allowed words when it is none of them. Executors and launchers are named by their registries
(plugins add names); the built-in names are listed here.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import Literal

logger = logging.getLogger(__name__)


class Word(str, Enum):
    """A str enumeration that prints and formats as its value (what Python 3.11's StrEnum does, on 3.10 too)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def parse(cls, text: object, what: str | None = None):
        """The member spelt `text`; ValueError naming the allowed words otherwise."""
        try:
            return cls(text)
        except ValueError:
            allowed = ", ".join(member.value for member in cls)
            raise ValueError(f"{what or cls.__name__.lower()} must be one of {allowed}, got {text!r}") from None

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class Status(Word):
    """How an experiment ended (its row's `status`)."""

    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"
    DRY_RUN = "dry_run"


FAILED = (Status.OOM, Status.ERROR, Status.TIMEOUT)  # ran and did not finish (a tuple: `x in FAILED` for any x)


class Device(Word):
    """Where experiments run: `auto` is cuda when nvidia-smi lists GPUs, else cpu."""

    AUTO = "auto"
    CUDA = "cuda"
    CPU = "cpu"


class Executor(Word):
    """The built-in executors (tunebench.execution.executors); plugins register more names."""

    LOCAL = "local"
    RAY = "ray"
    SLURM = "slurm"


class Launcher(Word):
    """The built-in launchers (tunebench.execution.launchers); plugins register more names."""

    PYTHON = "python"
    FORKSERVER = "forkserver"
    TORCHRUN = "torchrun"
    ACCELERATE = "accelerate"


class Objective(Word):
    """What `tune` optimises."""

    TOKENS_PER_SECOND = "tokens_per_second"
    JOULES_PER_TOKEN = "joules_per_token"
    COST = "cost"


# PEFT methods of the training entry (experiment.arguments.PeftArguments); a typed field, so a Literal.
PeftMethod = Literal["none", "lora", "prompt-tuning"]


class Direction(Word):
    """Which way a metric gets worse: the column registry declares it, compare judges by it, `--direction`
    overrides it. `ignore`: informational, never flagged."""

    LOWER_IS_WORSE = "lower_is_worse"  # higher is better: throughput, MFU
    HIGHER_IS_WORSE = "higher_is_worse"  # lower is better: memory, time, energy
    TWO_SIDED = "two_sided"  # any move is a change: loss
    IGNORE = "ignore"

    @property
    def better(self) -> str | None:
        """The better direction in one word, for tables: higher, lower, either way (two-sided), or None."""
        return {"lower_is_worse": "higher", "higher_is_worse": "lower", "two_sided": "two_sided"}.get(self.value)


class MetricFamily(Word):
    """A metric's compare family: its threshold, noise floor and default direction (results.compare_rules)."""

    THROUGHPUT = "throughput"
    MEMORY_MIB = "memory_mib"
    MEMORY = "memory"
    TIME = "time"
    LOSS = "loss"
    ENERGY = "energy"
    UTILIZATION = "utilization"
    STABILITY = "stability"
    COUNT = "count"
    RATIO = "ratio"
    STARTUP = "startup"
    WHOLE_RUN = "whole_run"
    PHASE = "phase"
