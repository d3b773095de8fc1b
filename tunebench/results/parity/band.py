"""The band of loss trajectories that mean "the same numerics", from repeat noise: what loss parity judges by.

A band run is the baseline again with its micro-batches' rows permuted (`loss_band_seed` k > 0: framework configs
`loss-band-1`, `loss-band-2`, `loss-band-3`): the same examples in the same steps and shapes, the same arithmetic
reordered, so its trajectory differs from the baseline's by rounding alone, grown by training like the rounding
of any other reordering. Another run of the baseline itself (`--repeats`) is a band run too (on a GPU its atomics
reorder sums; on a CPU it repeats the baseline to the bit). Changing the seed or the data order instead would put
other examples in each step: their loss differs by sampling noise, one to two orders of magnitude above rounding
(docs/evidence/loss-parity-cpu.md), and a band that wide hides an optimizer change.

The band is the largest `loss_parity_max_rel_diff` of the band runs against their baseline. A run is the same
numerics while its own difference stays within MARGIN × band (never below MIN_TOLERANCE). The band comes from the
results folder when it holds band runs of the run's baseline, else from the band data kept in loss_band.csv (one
row per device, dtype, model, PEFT method, corpus, learning rate and step count, appended from evidence runs by
docs/evidence/common/loss_band_rows.py), else there is none and loss parity says so and uses the fixed tolerance.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

logger = logging.getLogger(__name__)

BAND_KEY = "loss_band_seed"
KIND_KEY = "loss_band_kind"  # rows (the default) or last_bit (experiment.last_bit): a band run either way
BAND_FILE = Path(__file__).with_name("loss_band.csv")
# Two: a band of three runs is the largest of three draws of the same spread; another draw of it falls beyond
# that one time in four, and beyond twice that almost never (CPU: reordered kernels reached 0.66-0.94 of the band,
# docs/evidence/loss-parity-cpu.md; H100, uniform corpus: the reorderings of issue R within 2x of each other).
MARGIN = 2.0
# float32 rounding of the loss itself (a sum over thousands of tokens) is a few parts in 10^7.
MIN_TOLERANCE = 1e-6
# The experiment arguments a band measured in one place applies to elsewhere only when all are equal.
KEYS = ("torch_dtype", "model_name_or_path", "peft_method", "synthetic_corpus", "learning_rate", "max_steps")
TABLE_COLUMNS = ["source", "device", *KEYS, "runs", "band_max_rel_diff"]


@dataclass(frozen=True)
class Band:
    """A band: its width (relative), how many band runs gave it and where it came from."""

    width: float
    runs: int
    source: str

    @property
    def tolerance(self) -> float:
        return max(MARGIN * self.width, MIN_TOLERANCE)


def is_band_run(run) -> bool:
    """A run of the baseline's numerics: a band seed is all its framework config sets (or it sets nothing)."""
    return bool(run.arguments.get(BAND_KEY)) and set(run.fc_keys) <= {BAND_KEY, KIND_KEY}


def band_runs(baseline, runs: list) -> list:
    """The band runs of `baseline` among `runs`: other repeats of it, and runs differing from it in the band seed
    alone (same scenario, devices and every other argument)."""
    found = []
    for run in runs:
        if run.experiment_id == baseline.experiment_id:
            if run.repeat != baseline.repeat:
                found.append(run)
            continue
        if not is_band_run(run) or (run.scenario, run.num_gpus, run.device_type) != \
                (baseline.scenario, baseline.num_gpus, baseline.device_type):
            continue
        keys = (set(run.arguments) | set(baseline.arguments)) - {BAND_KEY, KIND_KEY}
        if all(run.arguments.get(k) == baseline.arguments.get(k) for k in keys):
            found.append(run)
    return found


def argument(arguments: dict, key: str):
    """The run's value of an argument: as resolved, else the training entry's default (a key the YAML left out)."""
    if key in arguments:
        return arguments[key]
    from tunebench.experiment.arguments import ENTRY_GROUPS

    for group in ENTRY_GROUPS.values():
        for field in dataclasses.fields(group):
            if field.name == key:
                return field.default
    return None


def _same(a, b) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(a) == str(b)


@functools.lru_cache(maxsize=4)
def band_table(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=TABLE_COLUMNS)
    return pd.read_csv(path, keep_default_na=False)


def table_band(device: str, arguments: dict) -> Band | None:
    """The widest band kept in the table for this device and these arguments (KEYS), or None."""
    table = band_table(BAND_FILE)
    matches = [row for row in table.to_dict("records") if str(row["device"]) == device
               and all(_same(row[k], argument(arguments, k)) for k in KEYS)]
    if not matches:
        return None
    widest = max(matches, key=lambda row: float(row["band_max_rel_diff"]))
    return Band(float(widest["band_max_rel_diff"]), int(widest["runs"]), f"table: {widest['source']}")


def describe_case(device: str, arguments: dict) -> str:
    return f"{device}, " + ", ".join(f"{k}={argument(arguments, k)}" for k in KEYS)


def band_rows(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Band measurements of a results table (its parity columns computed): one row per baseline whose band came
    from band runs in its folder, in the table's columns."""
    if "loss_parity_band_source" not in frame.columns:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    rows = []
    baselines = frame[(frame["framework_config"] == "none") & frame["loss_parity_band_source"].astype(str)
                      .str.startswith("folder")].drop_duplicates("experiment_id")
    for record in baselines.to_dict("records"):
        gpu = record.get("gpu_name")
        device = gpu if isinstance(gpu, str) and gpu else str(record.get("device_type"))
        values = {k: record.get(k) if isinstance(record.get(k), str) or pd.notna(record.get(k)) else argument({}, k)
                  for k in KEYS}
        rows.append({"source": source, "device": device, **values,
                     "runs": int(record["loss_parity_band_runs"]), "band_max_rel_diff": record["loss_parity_band"]})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)
