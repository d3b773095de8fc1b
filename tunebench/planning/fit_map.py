"""The largest micro-batch that fits a GPU, per model × framework config × PEFT × sequence length: a search on the
prediction (`benchmark.py plan --fit_map` writes `<out>/fit_map.csv`).

The prediction's reserved figure (planning.allocator_slack) grows with the micro-batch, so `fits` is true up to a
largest micro-batch and false beyond. The search starts from an affine estimate (the predictions at micro-batch 1
and 2: weights and optimizer state are fixed, activations scale with the tokens), brackets it by doubling steps
and bisects, so a row costs a handful of fake steps, each checked exactly rather than extrapolated.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pandas as pd

from tunebench.planning.allocator_slack import verdict_columns
from tunebench.planning.plan_matrix import unmodelled, with_outlier_columns
from tunebench.planning.predict import memory_text, predict, shape_and_sharding, usable_bytes
from tunebench.planning.sharding_notes import LEAD
from tunebench.planning.sharding_notes import note as sharding_note

logger = logging.getLogger(__name__)

LIMIT = 1 << 16  # micro-batches searched: far beyond any that fits a GPU at a length worth planning


def largest_fitting(fits: Callable[[int], bool], guess: int, limit: int = LIMIT) -> int:
    """The largest b in [1, limit] with fits(b), for a `fits` that is true up to some b and false after it; 0 when
    even 1 does not fit. Brackets `guess` by doubling steps away from it, then bisects."""
    guess = min(max(guess, 1), limit)
    if fits(guess):
        low, high, step = guess, None, 1
        while high is None:
            probe = min(low + step, limit)
            if probe == low:
                return low  # fits at the limit
            if fits(probe):
                low, step = probe, step * 2
            else:
                high = probe
    else:
        low, high, step = None, guess, 1
        while low is None:
            probe = max(high - step, 0)
            if probe == 0 or fits(probe):
                low = probe
            else:
                high, step = probe, step * 2
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def fit_map(experiments, capacity: int, device_name: str | None, gpu_arch: int | None) -> pd.DataFrame:
    """One row per model × framework config × PEFT × sequence length × GPUs of `experiments`: the largest
    micro-batch whose predicted reserved memory fits `capacity`, its prediction, and the next micro-batch's."""
    rows, seen, cache = [], set(), {}
    for experiment in experiments:
        key = (experiment.model_name_or_path, experiment.framework_config.name,
               experiment.entry.get("peft", {}).get("peft_method", "none"), experiment.value("data", "max_seq_len"),
               experiment.num_gpus)
        if key in seen:
            continue
        seen.add(key)
        if experiment.num_gpus < experiment.framework_config.min_gpus:  # never run so (experiment_run refuses it)
            rows.append(_row(key, device_name, capacity, None, None, None,
                             f"{key[1]} needs at least {experiment.framework_config.min_gpus} GPUs: not run on "
                             f"{experiment.num_gpus}"))
            continue
        shape, sharding = shape_and_sharding(experiment)
        # 8-bit rows keep outlier columns counted on the experiment's own micro-batch; more tokens can only add
        # columns, so the map's larger micro-batches are lower bounds there, and the row says so.
        shape, outliers = with_outlier_columns(experiment, shape)
        counted = "; ".join(filter(None, [
            f"8-bit outlier columns counted at micro-batch {shape.micro_batch}: {outliers}" if outliers else None,
            unmodelled(experiment, None, shape)])) or None
        cuda = experiment.device_type == "cuda"
        memo: dict[int, dict[str, Any]] = {}

        def verdict(batch: int, shape=shape, sharding=sharding, cuda=cuda, memo=memo) -> dict:
            if batch not in memo:
                row = predict(dataclasses.replace(shape, micro_batch=batch), sharding, cuda=cuda, cache=cache,
                              gpu_arch=gpu_arch)
                memo[batch] = {**row, **verdict_columns(row, capacity, cuda, device_name,
                                                        compiled=shape.compile_mode is not None)}
            return memo[batch]

        try:
            one, two = verdict(1)["pred_mem_reserved"], verdict(2)["pred_mem_reserved"]
            usable = usable_bytes(verdict(1))
            guess = 1 + (usable - one) // max(two - one, 1)
            if guess > 2:  # one secant step through the estimate: the slope over the range, not its first step
                at_guess = verdict(int(min(guess, LIMIT)))["pred_mem_reserved"]
                guess = 1 + (usable - one) * (min(guess, LIMIT) - 1) // max(at_guess - one, 1)
            best = largest_fitting(lambda b: bool(verdict(b)["pred_fits"]), int(guess))
        except Exception as exc:  # one model the fake step cannot run never stops the map
            logger.warning("fit map: no prediction for %s: %s", key[0], exc)
            rows.append(_row(key, device_name, capacity, None, None, None, f"no prediction ({str(exc)[:160]})"))
            continue
        at, beyond = (verdict(best) if best else None), verdict(best + 1)
        # sharded: why its ranks fit no more than one GPU would, where so (at the largest micro-batch that fits)
        why = sharding_note(experiment, dataclasses.replace(shape, micro_batch=max(best, 1)), at or beyond, cuda,
                            cache, gpu_arch)
        counted = "; ".join(filter(None, [why, counted])) or None
        if not best:  # docs/guides/plan.md's "not even 1": what micro-batch 1 needs, against what the device offers
            usable = usable_bytes(beyond)
            counted = "; ".join(note for note in (counted, (
                f"not even micro-batch 1 fits: it needs {memory_text(beyond['pred_mem_reserved'])} reserved, "
                f"{memory_text(max(usable or 0, 0))} of the {memory_text(capacity)} device are usable")) if note)
        rows.append(_row(key, device_name, capacity, best, at, beyond, counted))
        logger.info("fit map: %s %s seq %s: micro-batch %d fits (%d predictions)", key[0], key[1], key[3], best,
                    len(memo))
    return pd.DataFrame(rows)


def _row(key, device_name, capacity, best, at, beyond, note) -> dict[str, Any]:
    model, framework, peft, seq, gpus = key
    return {"model_name_or_path": model, "framework_config": framework, "peft_method": peft, "max_seq_len": seq,
            "num_gpus": gpus, "gpu": device_name, "pred_capacity_bytes": capacity, "max_micro_batch": best,
            "pred_mem_peak": at["pred_mem_peak"] if at else None,
            "pred_mem_peak_upper": at.get("pred_mem_peak_upper") if at else None,
            "pred_mem_reserved": at["pred_mem_reserved"] if at else None,
            "pred_fit_margin_bytes": at["pred_fit_margin_bytes"] if at else None,
            "next_pred_mem_reserved": beyond["pred_mem_reserved"] if beyond else None,
            "pred_note": note}


def per_gpu_count(frame: pd.DataFrame) -> list[str]:
    """What fits per GPU count, one line per model × PEFT × sequence length: for each count, the framework config
    that fits the largest micro-batch, and, where more GPUs fit no larger one than fewer did, that they do not (the
    row's note says why: planning.sharding_notes)."""
    lines = []
    fitted = frame.dropna(subset=["max_micro_batch"])
    for (model, peft, seq), rows in fitted.groupby(["model_name_or_path", "peft_method", "max_seq_len"], sort=True):
        parts, before = [], None
        for gpus, at in rows.groupby("num_gpus", sort=True):
            batch = int(at["max_micro_batch"].max())
            configs = list(at.loc[at["max_micro_batch"] == batch, "framework_config"])
            said = f"{int(gpus)} GPU(s): micro-batch {batch} ({', '.join(configs)})" if batch else \
                f"{int(gpus)} GPU(s): not even micro-batch 1"
            if before is not None and batch <= before:
                said += ", no more than on fewer GPUs"
                explained = [c for c, n in zip(at["framework_config"], at["pred_note"], strict=True)
                             if isinstance(n, str) and LEAD in n]
                said += f" (why: {', '.join(explained)}'s note)" if explained else ""
            parts.append(said)
            before = batch if before is None else max(before, batch)
        lines.append(f"{model} · {peft} · {int(seq)} tokens: " + "; ".join(parts))
    return lines
