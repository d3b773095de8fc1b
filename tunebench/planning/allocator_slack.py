"""The caching allocator's slack over the allocated peak at the edge of a GPU, from measured sweeps (data, not a
constant): what a step needs reserved, `pred_mem_reserved`, and so what `fits` judges.

CUDA experiments run with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` unless the user set the variable
(docs/evidence/fit-edge-h100.md: with the default allocator 4 of 10 points predicted to fit ran out of memory on one
large request that the fragmented cache could not place; with expandable segments the allocated peak was the
prediction to 0.01 GiB, throughput unchanged, and the allocator gave back what it had cached when it needed it).
What it cannot give back (segment tails, the small-block pool, pages partly in use) is the slack: reserved − the
predicted peak's calibrated bound (planning.residuals) at the last micro-batch of a sweep that ran when the next
one ran out, where the allocator held only what the step needed; `fits` adds it to the same bound. Each sweep in
allocator_edge.csv (docs/evidence/common/allocator_edge_rows.py appends an evidence sweep's rows) gives its last
point; the slack is the largest of those measured with the same allocator setting, and with compilation alike: a
compiled step's buffers are planned and reused by inductor, so its allocator holds far less beyond the peak (H100/H200:
0.03-0.33 GiB over every compiled row's peak, 0.07-2.2 GiB over Liger and flex rows'; docs/evidence/
acceleration-memory-h100.md), and one slack for both made the fit map a micro-batch short for compiled rows. Where
no compiled sweep has met its edge, compiled rows take the eager slack.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from tunebench.planning.accelerations import bound_extra
from tunebench.planning.residuals import upper, upper_columns
from tunebench.telemetry.environment import cuda_alloc_conf
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

EDGE_FILE = Path(__file__).with_name("allocator_edge.csv")
SWEEP_KEYS = ["gpu_name", "model_name_or_path", "gradient_checkpointing", "max_seq_len", "cuda_alloc_conf",
              "torch_compile"]


def compiled_column(frame):
    """The rows' `torch_compile` as booleans: rows from before compilation was a key were eager ones."""
    if "torch_compile" not in frame:
        return False
    return frame["torch_compile"].fillna(False).astype(bool)


def sweep_edges(rows) -> list[dict]:
    """Per sweep (a GPU, model, checkpointing, length and allocator setting), its last micro-batch that ran when a
    larger one ran out of memory: {reserved − allocated as `slack`, and the sweep's keys}. A sweep without an OOM
    never met its edge and says nothing about it."""
    import pandas as pd

    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    if frame.empty:
        return []
    frame = frame.fillna({"cuda_alloc_conf": ""})
    frame["torch_compile"] = compiled_column(frame)
    edges = []
    for keys, sweep in frame.groupby(SWEEP_KEYS, dropna=False):
        ran = sweep[sweep["status"] == Status.OK].dropna(subset=["mem_peak_torch_max_reserved_bytes"])
        oom = sweep[sweep["status"] == Status.OOM]
        if ran.empty or oom.empty:
            continue
        last = ran.loc[ran["per_device_train_batch_size"].idxmax()]
        if oom["per_device_train_batch_size"].min() <= last["per_device_train_batch_size"]:
            continue  # an OOM below a point that ran: not an edge (a crowded GPU, a flaky run)
        allocated = int(last["mem_peak_torch_max_allocated_bytes"])
        predicted = last.get("pred_mem_peak")
        if predicted is not None and pd.notna(predicted):  # over the bound `fits` adds the slack to (residuals)
            allocated = upper(int(predicted), "peak", keys[0], keys[SWEEP_KEYS.index("cuda_alloc_conf")])
            if keys[SWEEP_KEYS.index("torch_compile")]:  # and a compiled step's margin (planning.accelerations)
                allocated += bound_extra(int(predicted), "default")
        slack = int(last["mem_peak_torch_max_reserved_bytes"]) - allocated
        edges.append(
            {
                **dict(zip(SWEEP_KEYS, keys, strict=True)),
                "micro_batch": int(last["per_device_train_batch_size"]),
                "slack": max(0, slack),
            }
        )
    return edges


@functools.lru_cache(maxsize=8)
def edge_slack(alloc_conf: str | None = None, compiled: bool = False) -> int:
    """Bytes the allocator needs reserved beyond the allocated peak at a GPU's edge, for `alloc_conf` (the
    experiments' setting by default) and a compiled step or not: the largest measured, 0 where there is none."""
    import pandas as pd

    conf = cuda_alloc_conf() if alloc_conf is None else alloc_conf
    try:
        edges = sweep_edges(pd.read_csv(EDGE_FILE))
    except (OSError, ValueError, KeyError) as exc:
        logger.warning("allocator edge data %s unreadable (%s): no slack predicted", EDGE_FILE, exc)
        return 0
    same = [edge for edge in edges if edge["cuda_alloc_conf"] == conf]
    if not same:
        logger.warning("no measured GPU edge with PYTORCH_CUDA_ALLOC_CONF=%r: the slack of other settings is "
                       "assumed", conf)
        same = edges
    alike = [edge["slack"] for edge in same if bool(edge["torch_compile"]) == compiled]
    return max(alike or [edge["slack"] for edge in same if not edge["torch_compile"]] or [0])


def verdict_columns(prediction: dict, capacity: int | None, cuda: bool, gpu_name: str | None,
                    compiled: bool = False) -> dict:
    """The prediction's calibrated bounds and its `fits` columns: on CUDA the peak's bound plus the allocator's
    slack at the edge (a compiled step's own), judged against `capacity`; elsewhere the peak itself (no
    allocator, no GPU residuals)."""
    from tunebench.planning.predict import fit_columns

    if not cuda:
        return fit_columns(prediction["pred_mem_peak"], capacity)
    bounds = upper_columns(prediction, gpu_name)
    return {**bounds, **fit_columns(bounds["pred_mem_peak_upper"], capacity, slack=edge_slack(compiled=compiled))}
