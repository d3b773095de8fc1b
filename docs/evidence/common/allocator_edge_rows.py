"""Append a GPU sweep's measured points to the allocator-edge data (tunebench/planning/allocator_edge.csv).

  python docs/evidence/common/allocator_edge_rows.py RESULTS/raw_summary.csv docs/evidence/<doc>.md

Each row of the sweep (a micro-batch that ran or ran out of memory, with its prediction and the allocator's
measured peaks) becomes a row of the data `pred_mem_reserved`'s slack is learned from
(tunebench.planning.allocator_slack). Rows already there (same GPU, model, checkpointing, length, allocator setting
and micro-batch) are replaced, so appending a sweep twice changes nothing. Written atomically.
"""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tunebench.fileio import write_atomic  # noqa: E402
from tunebench.planning.allocator_slack import EDGE_FILE, SWEEP_KEYS, compiled_column  # noqa: E402
from tunebench.telemetry.environment import DEFAULT_ALLOC_CONF  # noqa: E402

COLUMNS = ["gpu_name", "capacity_bytes", "model_name_or_path", "gradient_checkpointing", "max_seq_len",
           "per_device_train_batch_size", "cuda_alloc_conf", "status", "pred_mem_peak",
           "mem_peak_torch_max_allocated_bytes", "mem_peak_torch_max_reserved_bytes", "source", "torch_compile"]
BYTES = ["capacity_bytes", "pred_mem_peak", "mem_peak_torch_max_allocated_bytes", "mem_peak_torch_max_reserved_bytes"]


def sweep_rows(summary: pd.DataFrame, source: str) -> pd.DataFrame:
    rows = summary[summary["status"].isin(["ok", "oom"])].copy()
    rows["capacity_bytes"] = rows["pred_capacity_bytes"]
    rows["gpu_name"] = rows["gpu_name"].dropna().iloc[0] if rows["gpu_name"].notna().any() else None
    conf = rows["cuda_alloc_conf"] if "cuda_alloc_conf" in rows else pd.Series(DEFAULT_ALLOC_CONF, index=rows.index)
    rows["cuda_alloc_conf"] = conf.fillna(DEFAULT_ALLOC_CONF)
    rows["source"] = source
    rows["torch_compile"] = compiled_column(rows)
    for column in BYTES:
        rows[column] = pd.to_numeric(rows.get(column), errors="coerce").round().astype("Int64")
    return rows[COLUMNS]


def main(summary_csv: str, source: str) -> None:
    existing = pd.read_csv(EDGE_FILE)
    existing["torch_compile"] = compiled_column(existing)
    new = sweep_rows(pd.read_csv(summary_csv), source)
    key = [*SWEEP_KEYS, "per_device_train_batch_size"]
    merged = pd.concat([existing, new]).drop_duplicates(subset=key, keep="last")
    for column in BYTES:
        merged[column] = pd.to_numeric(merged[column], errors="coerce").round().astype("Int64")
    write_atomic(EDGE_FILE, merged[COLUMNS].to_csv(index=False))
    print(f"{len(new)} sweep row(s) into {EDGE_FILE} ({len(merged)} rows)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
