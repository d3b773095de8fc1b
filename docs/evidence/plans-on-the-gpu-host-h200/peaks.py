"""Plan against measurement, one row per experiment (issue AB): the planned peak, its bound and the measured peak
(torch's max_memory_allocated), the error, and the attention kernel planned against the one the scanner saw.

    python docs/evidence/plans-on-the-gpu-host-h200/peaks.py PLAN_CSV RESULTS_CSV > peaks.md
"""

from __future__ import annotations

import sys

import pandas as pd

GIB = 1024**3


def main() -> int:
    plan, measured = pd.read_csv(sys.argv[1]), pd.read_csv(sys.argv[2])
    joined = plan.merge(measured, on="experiment_id", suffixes=("", "_run"))
    lines = ["| experiment | GPUs | planned GiB | bound GiB | measured GiB | planned / measured − 1 | within 3 % or "
             "bound | measured <= bound | attention planned / seen |", "|---|---:|---:|---:|---:|---:|---|---|---|"]
    for _, row in joined.iterrows():
        planned, bound = row["pred_mem_peak"], row.get("pred_mem_peak_upper", row["pred_mem_peak"])
        actual = row.get("mem_peak_torch_max_allocated_bytes")
        if row.get("status") != "ok" or not actual or pd.isna(actual):
            lines.append(f"| {row['scenario']} · {row['framework_config']} · {row['model_name_or_path']} | "
                         f"{row['num_gpus']} | {planned / GIB:.2f} | {bound / GIB:.2f} | – ({row.get('status')}) "
                         "| – | – | – | – |")
            continue
        error = planned / actual - 1
        held = "yes" if abs(error) <= 0.03 or actual <= bound else "NO"
        lines.append(f"| {row['scenario']} · {row['framework_config']} · {row['model_name_or_path']} | "
                     f"{row['num_gpus']} | {planned / GIB:.2f} | {bound / GIB:.2f} | {actual / GIB:.2f} | "
                     f"{100 * error:+.2f} % | {held} | {'yes' if actual <= bound else 'NO'} | "
                     f"{row.get('pred_attention')} / "
                     f"{row.get('scan_attention_backend')} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
