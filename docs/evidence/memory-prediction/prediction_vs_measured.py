"""Join a `benchmark.py plan` CSV with measured results (same scenario and framework config) into a markdown
table of predicted vs measured memory per category (issue H evidence).

  python docs/evidence/memory-prediction/prediction_vs_measured.py PLAN_CSV RESULTS_CSV [--run pass1]
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

PAIRS = (("params", "scan_mem_params"), ("grads", "scan_mem_grads"), ("optimizer", "scan_mem_optimizer"),
         ("activations", "scan_mem_activations"), ("temporaries", "scan_mem_temporaries"),
         ("peak", "mem_peak_torch_max_allocated_bytes"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan")
    p.add_argument("results")
    p.add_argument("--run", default=None, help="keep only rows whose `pass` column has this value")
    a = p.parse_args()
    plan, measured = pd.read_csv(a.plan), pd.read_csv(a.results)
    if a.run:
        measured = measured[measured["pass"] == a.run]
    joined = plan.merge(measured[measured["status"] == "ok"], on=["scenario", "framework_config"],
                        suffixes=("", "_measured"))
    lines = ["| experiment | category | predicted (B) | measured (B) | predicted / measured − 1 |",
             "|---|---|---:|---:|---:|"]
    for _, row in joined.iterrows():
        for name, column in PAIRS:
            predicted, actual = row[f"pred_mem_{name}"], row[column]
            error = f"{100 * (predicted / actual - 1):+.3f} %" if actual else ("exact" if predicted == 0 else "–")
            lines.append(f"| {row['scenario']} / {row['framework_config']} | {name} | {predicted:,.0f} | "
                         f"{actual:,.0f} | {error} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
