"""Scaling across GPU counts: each multi-GPU row against the same work on one GPU (its twin), from the experiment
folders alone: how much of the ideal N× it reached, and how much of its step the N GPUs added.

A multi-GPU row's twin is a one-GPU row of the same results folder whose per-device work is the same: every
resolved argument equal (framework configs' included) except those that only say how the work is shared (the
parallelism's own settings: FSDP's, DDP's, and the storage dtype of 4-bit weights, which `auto` sets by
parallelism), with activation checkpointing compared as one setting whichever switch turned it on (the Trainer's
`gradient_checkpointing` on one GPU, FSDP's `activation_checkpointing` on several). Each device then does the twin's
work, so N GPUs ideally give N times its rate: `scaling_efficiency` = tokens/s ÷ (N × the twin's tokens/s), and
`comm_exposed_share` = (step − the twin's step) ÷ step, steady medians both: the communication that compute did not
hide, with the slow-down NCCL's kernels cause in the compute beside them. (Not from the scanner's NCCL kernel
times: a collective's kernel also runs while it waits for the slowest rank, so its time on the rank that arrives
first measured up to 10× that on the last, 4 × H100, docs/evidence/gpu-counts-h100.md.)
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tunebench.experiment.sharding import config_dict
from tunebench.experiment.spec import SPEC_FILE
from tunebench.readback import Unreadable, load_json
from tunebench.results.folder import experiment_folders
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

RATE = "steady_nonpad_tokens_per_second"
# How the work is shared, not what it is: never part of the twin's match.
SHARING_KEYS = frozenset({"fsdp", "fsdp_config", "ddp_find_unused_parameters", "ddp_bucket_cap_mb",
                          "bnb_4bit_quant_storage", "gradient_checkpointing", "gradient_checkpointing_kwargs",
                          "activation_checkpointing"})


@dataclass(frozen=True)
class Work:
    experiment_id: str
    num_gpus: int
    device_type: str
    workload: tuple  # sorted (key, value) pairs of what one device computes


def _checkpointed(arguments: dict) -> bool:
    for key in ("activation_checkpointing", "gradient_checkpointing"):
        if arguments.get(key) is True:
            return True
    return bool(config_dict(arguments.get("fsdp_config")).get("activation_checkpointing"))


def work_of(spec: dict) -> Work | None:
    """The per-device work of an experiment from its spec.json (None when the spec lacks what it needs)."""
    arguments, num_gpus = spec.get("arguments"), spec.get("num_gpus")
    if not (isinstance(arguments, dict) and isinstance(num_gpus, int)
            and isinstance(spec.get("experiment_id"), str)):
        return None
    kept = {k: repr(v) for k, v in arguments.items() if k not in SHARING_KEYS}
    kept["activation_checkpointing"] = repr(_checkpointed(arguments))
    return Work(spec["experiment_id"], num_gpus, str(spec.get("device_type")), tuple(sorted(kept.items())))


def scaling_columns(output_dir: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with scaling_efficiency, comm_exposed_share and scaling_baseline_id on every ok multi-GPU row whose
    one-GPU twin is in the folder (ok)."""
    if frame.empty or "experiment_id" not in frame.columns or RATE not in frame.columns:
        return frame
    frame = frame.copy()
    works = {}
    for folder in experiment_folders(output_dir):
        try:
            work = work_of(load_json(folder / SPEC_FILE, dict))
        except (OSError, Unreadable):
            continue
        if work is not None:
            works[work.experiment_id] = work
    ok = frame[frame.get("status") == Status.OK] if "status" in frame.columns else frame.iloc[0:0]
    rates = pd.to_numeric(ok[RATE], errors="coerce")
    steps = pd.to_numeric(ok.get("steady_step_time_median", pd.Series(index=ok.index, dtype=float)), errors="coerce")
    twins = [w for w in works.values() if w.num_gpus == 1 and w.experiment_id in set(ok["experiment_id"])]
    for index, row in ok.iterrows():
        run = works.get(row["experiment_id"])
        if run is None or run.num_gpus < 2 or not _positive(rates.get(index)):
            continue
        matched = [t for t in twins if t.device_type == run.device_type and t.workload == run.workload]
        chosen = ok["experiment_id"].isin({t.experiment_id for t in matched}) & rates.map(_positive)
        if not chosen.any():
            continue
        frame.loc[index, "scaling_efficiency"] = float(rates[index]) / (run.num_gpus * rates[chosen].mean())
        if _positive(steps.get(index)) and steps[chosen].map(_positive).all():
            frame.loc[index, "comm_exposed_share"] = 1 - steps[chosen].mean() / float(steps[index])
        frame.loc[index, "scaling_baseline_id"] = ";".join(sorted(ok.loc[chosen, "experiment_id"].unique()))
    return frame


def _positive(value: Any) -> bool:
    """A rate or a step time that can divide (the reader leaves impossible ones empty; a 0 would give inf)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
