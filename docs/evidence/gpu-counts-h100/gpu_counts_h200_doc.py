"""Issue Y, offline: the QLoRA rows and the Ray run that gpu_counts.sh STEP=e measured on four H200s (an
nvidia-h100-x4 call that the device served with H200s) -> docs/evidence/gpu-counts-h200/memory.csv and the tables of
docs/evidence/gpu-counts-h100.md's section on them. Every plan is made on this (CPU) host from the run's spec.json.

Usage: python docs/evidence/gpu-counts-h100/gpu_counts_h200_doc.py [--evidence docs/evidence/gpu-counts-h200] [--replan]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_counts_doc import CATEGORIES, GIB, all_rows, memory_table, unpack  # noqa: E402

H200 = "NVIDIA H200"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evidence", type=Path, default=REPO / "docs/evidence/gpu-counts-h200")
    parser.add_argument("--replan", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = all_rows(unpack(args.evidence, Path(tmp)))
        memory = memory_table(rows, args.evidence / "memory.csv", args.replan, device=H200, capacity_mib=143771)
    speed = rows.set_index("experiment_id")["steady_nonpad_tokens_per_second"]
    print("| scenario | setting | GPUs | tokens/s | per-rank peak GiB | planned GiB | error | worst category |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for _, row in memory.iterrows():
        worst = max(CATEGORIES, key=lambda c: abs(row[f"predicted_{c}"] - row[f"measured_{c}"]))
        gap = row[f"predicted_{worst}"] - row[f"measured_{worst}"]
        error = 100 * (row["predicted_peak"] / row["measured_peak"] - 1)
        print(f"| {row['scenario']} | {row['framework_config']} | {row['num_gpus']} | "
              f"{speed[row['experiment_id']]:,.0f} | {row['measured_peak'] / GIB:.3f} | "
              f"{row['predicted_peak'] / GIB:.3f} | {error:+.3f} % | {worst} {gap / 2**20:+.1f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
