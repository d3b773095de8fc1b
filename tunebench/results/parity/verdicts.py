"""Loss parity: does an acceleration setting keep the loss? Each experiment's per-step loss trajectory against
its baseline's, from the experiment folders alone.

The baseline of an experiment is the same scenario with the null framework config (`none`) on the same number of
devices, whose resolved arguments equal the experiment's in every key the framework config does not set: the
same model, batch, sequence length, seed and data. Both trajectories are the per-step losses in steps.json (the
sum of a step's micro-batch losses, as the Trainer logs them). Two figures describe the difference: the largest
relative difference over the common steps, and the signed relative difference at the last common step. A
difference beyond the tolerance is a `measurement_warning`: the speed-up (or memory saving) came with other
numerics. The tolerance comes from the band of repeat noise (tunebench.results.parity.band: the baseline's band
runs in the folder, else the band data kept for the case); with neither, `loss_parity_band_source` says so and
the fixed tolerance of the dtype below is used.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tunebench.experiment.spec import BASELINE, SPEC_FILE
from tunebench.readback import Unreadable, load_json
from tunebench.results.folder import experiment_folders
from tunebench.results.parity.band import Band, band_runs, describe_case, table_band
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

STEPS_FILE = "steps.json"
# Relative loss difference that counts as the same numerics where no band was measured, by the weights' dtype
# (the band replaces it wherever one exists). bf16/fp16: kernels that reorder the same arithmetic (checkpointing's
# recompute, Liger's fused kernels, torch.compile's graphs) moved the per-step loss of llama-3.2-1b and
# llama-3.1-8b on H100 by at most 0.073 % (torch.compile, 8B LoRA, uniform corpus); the tolerance is about three
# times that (docs/evidence/acceleration-h100.md, "Loss-parity tolerance"). float32 on CPU: the same reorderings
# give identical losses to 1e-7 (tests/tunebench/results/parity/test_verdicts.py), so 1e-4 is generous.
TOLERANCE = {"bfloat16": 0.002, "float16": 0.002, "float32": 0.0001}
DEFAULT_TOLERANCE = 0.002


@dataclass(frozen=True)
class Trajectory:
    experiment_id: str
    repeat: int
    scenario: str
    framework_config: str
    fc_keys: frozenset
    num_gpus: int
    device_type: str
    arguments: dict
    losses: dict[int, float]
    parity_baseline: str = BASELINE  # the framework config this run's loss is judged against


def _read(folder: Path) -> Trajectory | None:
    """The folder's trajectory, or None when it has no complete, readable one."""
    try:
        spec = load_json(folder / SPEC_FILE, dict)
        steps = load_json(folder / STEPS_FILE, list)
    except (OSError, Unreadable):
        return None  # an unreadable folder's row says so already (summaries); no parity is guessed for it
    losses = {}
    for record in steps:
        if isinstance(record, dict) and isinstance(record.get("step"), int) and _finite(record.get("loss")):
            losses[record["step"]] = float(record["loss"])
    detail = spec.get("framework_config_detail")
    fc_args = detail.get("arguments") if isinstance(detail, dict) else None
    arguments = spec.get("arguments")
    if not losses or not isinstance(arguments, dict) or not isinstance(spec.get("experiment_id"), str):
        return None
    wanted = detail.get("parity_baseline") if isinstance(detail, dict) else None
    return Trajectory(spec["experiment_id"], int(spec.get("repeat") or 1), str(spec.get("scenario")),
                      str(spec.get("framework_config")), frozenset(fc_args or {}), spec.get("num_gpus"),
                      str(spec.get("device_type")), arguments, losses,
                      wanted if isinstance(wanted, str) and wanted else BASELINE)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def baseline_of(run: Trajectory, runs: list[Trajectory]) -> Trajectory | None:
    """The run's baseline among `runs` (the same repeat when there is one), or None: its framework config's
    `parity_baseline` (`none` unless it names one, e.g. a fused kernel over the quantized base it accelerates) in the
    same scenario on as many devices, equal in every argument neither framework config sets."""
    if run.framework_config == BASELINE:
        return run
    candidates = []
    for other in runs:
        if (other.framework_config != run.parity_baseline or other.scenario != run.scenario
                or other.num_gpus != run.num_gpus or other.device_type != run.device_type):
            continue
        keys = (set(run.arguments) | set(other.arguments)) - set_by(run) - set_by(other)
        if all(run.arguments.get(k) == other.arguments.get(k) for k in keys):
            candidates.append(other)
    same_repeat = [c for c in candidates if c.repeat == run.repeat]
    return (same_repeat or sorted(candidates, key=lambda c: c.repeat) or [None])[0]


PRECISION = frozenset({"bf16", "fp16"})


def set_by(run: Trajectory) -> frozenset:
    """The arguments a run's framework config decides: its own keys, and with one of bf16/fp16 both (mixed precision
    is one choice: the other flag was turned off for it, tunebench.matrix.habits)."""
    return run.fc_keys | (PRECISION if run.fc_keys & PRECISION else frozenset())


def max_rel_diff(run: Trajectory, baseline: Trajectory) -> tuple[int, float | None, float | None]:
    """(common steps, largest |relative difference| over them, signed relative difference at the last one)."""
    steps = sorted(set(run.losses) & set(baseline.losses))
    if not steps:
        return 0, None, None
    relative = [(run.losses[s] - baseline.losses[s]) / abs(baseline.losses[s]) if baseline.losses[s] else 0.0
                for s in steps]
    return len(steps), max(abs(r) for r in relative), relative[-1]


def compare(run: Trajectory, baseline: Trajectory, band: Band | None = None, no_band: str = "") -> dict[str, Any]:
    """loss_parity_* of one run against its baseline: within the band's tolerance when there is a band, else
    within the dtype's fixed tolerance (`no_band` says why there is none)."""
    count, largest, final = max_rel_diff(run, baseline)
    dtype = str(run.arguments.get("torch_dtype"))
    tolerance = band.tolerance if band else TOLERANCE.get(dtype, DEFAULT_TOLERANCE)
    row: dict[str, Any] = {"loss_parity_baseline": baseline.experiment_id, "loss_parity_steps": count,
                           "loss_parity_tolerance": tolerance,
                           "loss_parity_band": band.width if band else None,
                           "loss_parity_band_runs": band.runs if band else None,
                           "loss_parity_band_source": band.source if band else
                           f"none: {no_band or 'no band'}; the fixed {dtype} tolerance"}
    if not count:
        return row
    row["loss_parity_max_rel_diff"] = largest
    row["loss_parity_final_rel_diff"] = final
    row["loss_parity_ok"] = largest <= tolerance
    return row


def band_of(baseline: Trajectory, runs: list[Trajectory], device: str) -> tuple[Band | None, str]:
    """(the band of the baseline's numerics, why there is none): from its band runs in the folder, else from the
    band data kept for its case."""
    members = band_runs(baseline, runs)
    widths = [max_rel_diff(member, baseline)[1] for member in members]
    widths = [w for w in widths if w is not None]
    why = ""
    if widths and max(widths) > 0:
        return Band(max(widths), len(widths), f"folder: {len(widths)} band run(s)"), ""
    if widths:
        why = (f"the {len(widths)} band run(s) repeat the baseline to the bit (one row per micro-batch leaves "
               "nothing to reorder); ")
    kept = table_band(device, baseline.arguments)
    if kept is not None:
        return kept, ""
    return None, why + f"no band runs of the baseline here, none kept for {describe_case(device, baseline.arguments)}"


def warning(parity: dict[str, Any]) -> str | None:
    """The measurement warning of a run whose loss left the tolerance, or None."""
    if parity.get("loss_parity_ok") is not False:
        return None
    def pct(value: float, sign: str = "") -> str:
        return f"{100 * value:{sign}.3g} %"

    return (f"loss differs from the baseline {parity['loss_parity_baseline']} by up to "
            f"{pct(parity['loss_parity_max_rel_diff'])} over {parity['loss_parity_steps']} steps (final "
            f"{pct(parity['loss_parity_final_rel_diff'], '+')}; tolerance {pct(parity['loss_parity_tolerance'])}"
            f"{_band_words(parity)}): this setting changes the numerics")


def _band_words(parity: dict[str, Any]) -> str:
    if parity.get("loss_parity_band") is None:
        return ", no band measured"
    return (
        f", band of repeat noise {100 * parity['loss_parity_band']:.3g} % from the {parity['loss_parity_band_source']}"
    )


def parity_columns(output_dir: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with loss_parity_* on every ok row whose baseline is in the folder, its warning joined to the
    row's measurement_warning. Baseline rows are compared with themselves (0)."""
    if frame.empty or "experiment_id" not in frame.columns:
        return frame
    runs = [run for run in map(_read, experiment_folders(output_dir)) if run is not None]
    by_key = {(run.experiment_id, run.repeat): run for run in runs}
    frame = frame.copy()
    bands: dict[tuple[str, int], tuple[Band | None, str]] = {}
    for index, row in frame.iterrows():
        if row.get("status") != Status.OK:
            continue
        repeat = int(row["repeat"]) if _finite(row.get("repeat")) else 1
        run = by_key.get((row["experiment_id"], repeat))
        baseline = baseline_of(run, runs) if run is not None else None
        if baseline is None:  # the parity columns stay empty: the row says why
            _set(frame, index, "loss_parity_note", missing_baseline_note(row, run, frame))
            continue
        gpu = row.get("gpu_name")  # the band data is kept per device: the GPU's name, else `cpu`
        device = gpu if isinstance(gpu, str) and gpu else run.device_type
        band_key = (baseline.experiment_id, baseline.repeat)
        if band_key not in bands:
            bands[band_key] = band_of(baseline, runs, device)
        parity = compare(run, baseline, *bands[band_key])
        for key, value in parity.items():
            _set(frame, index, key, value)
        text = warning(parity)
        if text:
            current = row.get("measurement_warning")
            current = current if isinstance(current, str) and current else ""
            frame.at[index, "measurement_warning"] = "; ".join(w for w in (current, text) if w)
    return frame


def _set(frame: pd.DataFrame, index, key: str, value: Any) -> None:
    if key not in frame.columns:
        frame[key] = pd.Series([None] * len(frame), index=frame.index, dtype=object)
    frame.at[index, key] = value


def missing_baseline_note(row: pd.Series, run: Trajectory | None, frame: pd.DataFrame) -> str:
    """Why an ok row has no loss parity: it logged no per-step loss, its baseline (framework config `none`, same
    scenario and devices) is absent from the folder, or the baseline did not finish or logged no loss."""
    if run is None:
        return f"no per-step loss in this experiment's {STEPS_FILE}: nothing to compare"
    same = frame[(frame.get("framework_config") == run.parity_baseline) & (frame.get("scenario") == run.scenario)
                 & (pd.to_numeric(frame.get("num_gpus"), errors="coerce") == run.num_gpus)] \
        if {"framework_config", "scenario", "num_gpus"} <= set(frame.columns) else frame.iloc[0:0]
    if same.empty:
        wanted = "`none` (null)" if run.parity_baseline == BASELINE else f"`{run.parity_baseline}`"
        return (f"no baseline in this folder: add framework config {wanted} to scenario {run.scenario!r} on "
                f"{run.num_gpus} device(s), with the same arguments")
    failed = same[same.get("status") != Status.OK] if "status" in same.columns else same.iloc[0:0]
    if len(failed) == len(same):
        first = failed.iloc[0]
        return f"its baseline {first.get('experiment_id')} ended {first.get('status')}: no loss to compare with"
    return (f"no baseline with the same arguments and a per-step loss in this folder (scenario {run.scenario!r}, "
            f"framework config `{run.parity_baseline}`): the arguments the framework configs do not set must match")
