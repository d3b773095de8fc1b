"""Compare families, directions, thresholds, noise-band verdicts and experiment identity for comparisons.

Which columns are metrics, their family and their better direction come from the column registry
(tunebench.results.columns.registry). Each family has a default threshold and an absolute noise floor:

| family      | columns (examples)                                          | threshold | ignore below |
|-------------|-------------------------------------------------------------|-----------|--------------|
| throughput  | `steady_*tokens_per_second*`, `steady_mfu`, `steady_hfu`   | 10 %      | 0            |
| time        | `steady_step_time_*`                                        | 10 %      | 1 ms         |
| memory      | `mem_*`, `scan_mem_*` (bytes)                               | 10 %      | 1 MiB        |
| memory_mib  | `mem_nvidia_*` (nvidia-smi, MiB)                            | 10 %      | 1 MiB        |
| loss        | `train_loss` (two-sided)                                    | 5 %       | 0            |
| energy      | `energy_*`, `steady_energy_*`                               | 15 %      | 0            |
| startup, whole_run, phase | start-up and wall times, whole-run throughput, one step's phase times | informational
unless asked |
| utilization, stability, count, ratio | GPU util, CVs, token counts, padding   | informational, never flagged |

Steady step-time and throughput metrics with step samples on both sides are judged by significance and effect
size instead (tunebench.results.compare.steady): `--min_effect time=3` sets their minimum effect (default 5 %).
Every other metric, and those without samples, is flagged only when its relative change is beyond the threshold in
the bad direction AND beyond the noise band (the larger max-min range of the repeats on either side, as % of the
reference median) AND larger in absolute terms than "ignore below" (so a 0 -> 4 KiB temporaries change is not a +inf %
regression). A change of exactly the threshold is not flagged. The same test in the good direction is an improvement;
a two-sided metric beyond its band is always a regression (a loss that moves either way means the numerics
changed). Override per metric, glob or family name: ``--threshold mfu=5 --threshold memory=20
--direction train_loss=ignore``.
"""

from __future__ import annotations

import fnmatch
import logging
import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tunebench.bounds import Range
from tunebench.results.columns import environment, lookup
from tunebench.results.columns.registry import REGISTRY
from tunebench.results.columns.types import ARGUMENT, ENVIRONMENT, IDENTITY
from tunebench.vocabulary import Direction, MetricFamily

logger = logging.getLogger(__name__)

LOWER_IS_WORSE, HIGHER_IS_WORSE = Direction.LOWER_IS_WORSE, Direction.HIGHER_IS_WORSE
TWO_SIDED, IGNORE = Direction.TWO_SIDED, Direction.IGNORE
DIRECTIONS = Direction.values()

MIB = 1024**2


@dataclass(frozen=True)
class MetricRule:
    """How one metric column is judged."""

    family: MetricFamily
    direction: Direction
    threshold_pct: float
    min_abs: float = 0.0  # absolute changes at or below this are never flagged (units of the column)
    min_effect_pct: float | None = None  # judged with step samples: a significant change must also exceed this


DEFAULT_RULES: dict[MetricFamily, MetricRule] = {rule.family: rule for rule in (
    MetricRule(MetricFamily.THROUGHPUT, LOWER_IS_WORSE, 10.0, min_effect_pct=5.0),
    MetricRule(MetricFamily.MEMORY_MIB, HIGHER_IS_WORSE, 10.0, min_abs=1.0),
    MetricRule(MetricFamily.MEMORY, HIGHER_IS_WORSE, 10.0, min_abs=float(MIB)),
    MetricRule(MetricFamily.TIME, HIGHER_IS_WORSE, 10.0, min_abs=1e-3, min_effect_pct=5.0),
    MetricRule(MetricFamily.LOSS, TWO_SIDED, 5.0),
    MetricRule(MetricFamily.ENERGY, HIGHER_IS_WORSE, 15.0),
    MetricRule(MetricFamily.UTILIZATION, IGNORE, 0.0),
    MetricRule(MetricFamily.STABILITY, IGNORE, 0.0),
    MetricRule(MetricFamily.COUNT, IGNORE, 0.0),
    MetricRule(MetricFamily.RATIO, IGNORE, 0.0),
    # Informational unless asked for (--direction startup=higher_is_worse --threshold startup=20): each is one
    # noisy figure per run with no samples to test against. Start-up and wall times move 10-40 % between
    # identical runs on one H100 (the first experiment of a matrix pays CUDA's and the allocator's warm-up);
    # whole-run throughput includes that warm-up; the scanner's phase times are one step's. The steady
    # figures, which carry their samples, are the verdict (docs/compare.md).
    MetricRule(MetricFamily.STARTUP, IGNORE, 20.0, min_abs=1e-3),
    MetricRule(MetricFamily.WHOLE_RUN, IGNORE, 10.0),
    MetricRule(MetricFamily.PHASE, IGNORE, 10.0, min_abs=1e-3),
)}

DEFAULT_KEYS: tuple[str, ...] = (
    "scenario",
    "framework_config",
    "peft_method",
    "model_name_or_path",
    "num_gpus",
    "per_device_train_batch_size",
    "max_seq_len",
    "gpu_name",
)

# The steady window's environment (clocks, temperature, ...) moves a little every run: compare names it only when
# it moved enough to matter (tunebench.telemetry.environment_summary.explain), never as a plain difference.
ENVIRONMENT_COLUMNS = frozenset(c.name for c in REGISTRY if c.kind == ENVIRONMENT and c.pattern is None
                                and c.section != environment.SECTION) | {
    f"{package}_version" for package in ("torch", "transformers", "trl", "peft", "accelerate", "datasets")}


def metric_family(column: str) -> str | None:
    """The family a column belongs to, or None when it is not a numeric metric."""
    return lookup.metric_family(column)


def is_argument_column(column: str) -> bool:
    """True for columns that describe how the experiment was configured (compared as 'changed arguments').
    experiment_id hashes the arguments, so it differs whenever one does: showing it adds nothing."""
    return lookup.kind_of(column) in (ARGUMENT, IDENTITY) and column != "experiment_id"


def _parse_assignments(items: list[str] | None, option: str) -> dict[str, str]:
    """Parse ``name=value`` pairs, accepting comma-separated lists too."""
    parsed: dict[str, str] = {}
    for item in items or []:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, value = part.partition("=")
            if not sep or not name.strip() or not value.strip():
                raise ValueError(f"{option} {part!r}: expected NAME=VALUE, e.g. {option} mfu=5")
            parsed[name.strip()] = value.strip()
    return parsed


# A threshold or minimum effect in percent: NaN, infinities and values no change could reach are refused.
PERCENT_RANGE = Range(0, 10_000)


def parse_thresholds(items: list[str] | None, option: str = "--threshold") -> dict[str, float]:
    """``["mfu=5", "memory=20%"]`` -> ``{"mfu": 5.0, "memory": 20.0}`` (percent); also ``--min_effect``."""
    result: dict[str, float] = {}
    for name, value in _parse_assignments(items, option).items():
        try:
            pct = float(value.rstrip("%"))
        except ValueError:
            raise ValueError(f"{option} {name}={value}: the value must be a percentage, e.g. {name}=10") from None
        if PERCENT_RANGE.problem(pct):
            raise ValueError(f"{option} {name}={value}: the value must be a percentage {PERCENT_RANGE.describe()}")
        result[name] = pct
    return result


def parse_min_effects(items: list[str] | None) -> dict[str, float]:
    """``["time=3", "steady_mfu=8"]`` -> ``{"time": 3.0, "steady_mfu": 8.0}`` (percent)."""
    return parse_thresholds(items, "--min_effect")


def parse_directions(items: list[str] | None) -> dict[str, str]:
    """``["train_loss=ignore"]`` -> ``{"train_loss": "ignore"}``, validated against DIRECTIONS."""
    result = _parse_assignments(items, "--direction")
    for name, value in result.items():
        if value not in DIRECTIONS:
            raise ValueError(f"--direction {name}={value}: direction must be one of {', '.join(DIRECTIONS)}")
    return result


def _override_for(column: str, family: str, overrides: dict[str, object]):
    """Most specific override wins: exact column name, then a glob, then the family name."""
    if column in overrides:
        return overrides[column]
    for pattern, value in overrides.items():
        if any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(column, pattern):
            return value
    return overrides.get(family)


def rule_for(
    column: str,
    thresholds: dict[str, float] | None = None,
    directions: dict[str, str] | None = None,
    min_effects: dict[str, float] | None = None,
) -> MetricRule | None:
    """The rule for a metric column after overrides, or None when the column is not a metric."""
    family = metric_family(column)
    if family is None:
        return None
    default = DEFAULT_RULES[family]
    # An informational family stays so whatever the column's better direction, until a --direction override.
    direction = default.direction if default.direction == IGNORE else lookup.direction(column)
    rule = replace(default, direction=direction)
    threshold = _override_for(column, family, thresholds or {})
    if threshold is not None:
        rule = replace(rule, threshold_pct=float(threshold))
    direction = _override_for(column, family, directions or {})
    if direction is not None:
        rule = replace(rule, direction=Direction(direction))
    min_effect = _override_for(column, family, min_effects or {}) if rule.min_effect_pct is not None else None
    if min_effect is not None:
        rule = replace(rule, min_effect_pct=float(min_effect))
    return rule


def unknown_override_names(names: list[str], columns: list[str]) -> list[str]:
    """Override names that match no family and no column: almost always a typo worth an error."""
    families = set(DEFAULT_RULES)
    unknown = []
    for name in names:
        if name in families or name in columns:
            continue
        if any(ch in name for ch in "*?[") and any(fnmatch.fnmatchcase(c, name) for c in columns):
            continue
        unknown.append(name)
    return unknown


def format_value(column: str, value: float) -> str:
    """Human units for one metric value: bytes -> GiB/MiB, seconds -> s/ms, fractions -> %; empty for NaN."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if v != v:  # NaN
        return ""
    unit = lookup.unit(column)
    if unit == "bytes":
        return f"{v / 1024**3:,.2f} GiB" if abs(v) >= 1024**3 else f"{v / MIB:,.1f} MiB"
    if unit == "MiB":
        return f"{v:,.0f} MiB"
    if unit == "s":
        return f"{v:,.3f} s" if abs(v) >= 1 else f"{v * 1000:,.2f} ms"
    if unit == "fraction":
        return f"{v * 100:.2f} %"
    if unit in ("%",):
        return f"{v:.1f} %"
    if unit.endswith("/s"):
        return f"{v:,.1f}"
    if unit == "FLOP":
        return f"{v / 1e12:,.1f} TFLOP"
    if metric_family(column) == "loss":
        return f"{v:.4f}"
    return plain_number(v)


def plain_number(value: float, digits: int = 4) -> str:
    """A number as a reader writes it: grouped digits, never an exponent where the figure has a sensible place
    value (`11,260` tokens, not `1.126e+04`); `digits` significant digits below 1 000."""
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        return ""
    if abs(v) >= 1000 or (v == int(v) and abs(v) < 2**53):
        return f"{v:,.0f}"
    return f"{v:,.{digits}g}" if abs(v) >= 1e-4 or v == 0 else f"{v:.{digits}g}"


def display_scale(column: str) -> tuple[float, str]:
    """(divisor, unit) to plot a metric in human units: bytes -> GiB, fractions -> %."""
    unit = lookup.unit(column)
    if unit == "bytes":
        return 1024**3, "GiB"
    if unit == "fraction":
        return 0.01, "%"
    return 1.0, "" if unit == "-" else unit


# --------------------------------------------------------------------------- values, verdicts, labels
def canonical(value) -> str:
    """A comparable string for a key/argument cell: NaN -> '', 1.0 -> '1', True/'True' -> 'true'."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    text = str(value).strip()
    if text.lower() in ("true", "false"):
        return text.lower()
    try:
        number = float(text)
    except ValueError:
        return text
    return canonical(number) if math.isfinite(number) else text


def judge(ref: float, new: float, ref_spread: float, new_spread: float, rule: MetricRule) -> dict:
    """Verdict for one metric of one experiment from medians and repeat spreads (max - min)."""
    out = {"delta": np.nan, "delta_pct": np.nan, "noise_pct": np.nan}
    if rule.direction == IGNORE:
        return {**out, "verdict": "ignored"}
    if math.isnan(ref) or math.isnan(new):
        return {**out, "verdict": "no_data"}
    delta = new - ref
    spread = max(
        ref_spread if not math.isnan(ref_spread) else 0.0, new_spread if not math.isnan(new_spread) else 0.0
    )
    if ref != 0:
        delta_pct = 100.0 * delta / abs(ref)
        noise_pct = 100.0 * spread / abs(ref)
    else:
        delta_pct = 0.0 if delta == 0 else math.copysign(math.inf, delta)
        noise_pct = 0.0 if spread == 0 else math.inf
    out = {"delta": delta, "delta_pct": delta_pct, "noise_pct": noise_pct}
    eps = 1e-9  # a change of exactly the threshold is not flagged, whatever the float rounding
    if abs(delta) <= rule.min_abs or abs(delta_pct) <= rule.threshold_pct + eps:
        return {**out, "verdict": "within_threshold"}
    if abs(delta_pct) <= noise_pct + eps:
        return {**out, "verdict": "within_noise"}
    if rule.direction == TWO_SIDED:
        return {**out, "verdict": "regression"}
    worse = delta < 0 if rule.direction == LOWER_IS_WORSE else delta > 0
    return {**out, "verdict": "regression" if worse else "improvement"}


def first_error_line(text) -> str:
    """The exception line of a traceback (e.g. 'torch.OutOfMemoryError: ...'), else its first line."""
    if not isinstance(text, str) or not text.strip():
        return ""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.replace(".", "").replace("_", "").isalnum() and head.endswith(
            ("Error", "Exception", "Interrupt", "Exit")
        ):
            return line
    return lines[0]


def experiment_labels(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Short labels from the key columns whose values vary, e.g. 'fw=fsdp · peft=lora · gpus=2 · bs=8'."""
    varying = [k for k in keys if frame[k].map(canonical).nunique() > 1] or keys[:1]

    def label(row) -> str:
        parts = []
        for k, v in row.items():
            text = canonical(v) or "∅"
            if k == "model_name_or_path":
                text = text.rstrip("/").rsplit("/", 1)[-1]  # the hub org / local dir adds width, not meaning
            parts.append(text if k in _VALUE_ONLY_LABEL_KEYS else f"{_LABEL_ALIASES.get(k, k)}={text}")
        return " · ".join(parts)

    return frame[varying].apply(label, axis=1)


# Values that read on their own; every other key is shown as alias=value ('2 · 8 · none' says nothing).
_VALUE_ONLY_LABEL_KEYS = {"scenario", "model_name_or_path", "gpu_name"}
_LABEL_ALIASES = {
    "framework_config": "fw",
    "peft_method": "peft",
    "num_gpus": "gpus",
    "per_device_train_batch_size": "bs",
    "max_seq_len": "seq",
    "effective_batch_size": "ebs",
    "gradient_accumulation_steps": "gas",
}
