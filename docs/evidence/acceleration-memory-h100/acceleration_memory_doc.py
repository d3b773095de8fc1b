"""Issue X evidence: plans made on a CPU host against what one H100 measured.

  python docs/evidence/acceleration-memory-h100/acceleration_memory_doc.py sweeps FIT_MAP_CSV SCENARIOS_YAML OUT_YAML
      each fit-map row's largest micro-batch and the next, as the device's sweep scenarios
  python docs/evidence/acceleration-memory-h100/acceleration_memory_doc.py table PLAN_CSV RESULTS_CSV \
      [FIT_MAP_CSV SWEEP_RESULTS_CSV]
      markdown: every measured row's plan, bound and measured peak (max_memory_allocated over the run), the error
      and whether it is within 3 %; each sweep's largest micro-batch that ran against the fit map's; exit 1 when
      a row or a sweep misses
  python docs/evidence/acceleration-memory-h100/acceleration_memory_doc.py replan OUT_PLAN_CSV
      the compile, Liger and flex rows of the earlier acceleration evidence
      (docs/evidence/acceleration-h100/scenarios-acceleration.yaml, measured in
      docs/evidence/acceleration-h100/raw_summary.csv) planned here for an H100, into OUT_PLAN_CSV
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import pandas as pd
import yaml

GIB = 1024**3
KEY = ["scenario", "framework_config", "model_name_or_path", "per_device_train_batch_size"]
TOLERANCE = 0.03


def sweeps(fit_map: str, scenarios: str, out: str) -> int:
    """One scenario per fit-map row: its model and framework config at the largest micro-batch and the next."""
    source = yaml.safe_load(Path(scenarios).read_text())
    base = next(s for s in source["scenarios"] if s["name"] == "am-sweep")
    written = []
    for _, row in pd.read_csv(fit_map).iterrows():
        if pd.isna(row["max_micro_batch"]) or int(row["max_micro_batch"]) < 1:
            print(f"no sweep for {row['model_name_or_path']} {row['framework_config']}: {row['pred_note']}")
            continue
        best = int(row["max_micro_batch"])
        name = f"sweep-{Path(row['model_name_or_path'].replace(':', '-')).name}-{row['framework_config']}"
        for batch in (best, best + 1):
            written.append({"name": f"{name}-{batch}", "framework_config": [row["framework_config"]],
                            "arguments": {**copy.deepcopy(base["arguments"]),
                                          "model_name_or_path": [row["model_name_or_path"]],
                                          "per_device_train_batch_size": batch}})
    header = (
        "# Written by docs/evidence/acceleration-memory-h100/acceleration_memory_plans.sh from the fit map planned on\n"
        "# a CPU host: each sweep's largest micro-batch predicted to fit an H100 and the next (which should run out\n"
        "# of memory).\n"
    )
    Path(out).write_text(header + yaml.safe_dump({"data_processing": source.get("data_processing", {}),
                                                  "scenarios": written}, sort_keys=False))
    print(f"wrote {out}: {len(written) // 2} sweep(s) of 2 runs")
    return 0


def _rows(plan: pd.DataFrame, measured: pd.DataFrame) -> tuple[list[str], int]:
    joined = plan.merge(measured, on=KEY, suffixes=("", "_measured"))
    lines = ["| scenario | model | setting | batch | plan GiB | bound GiB | measured GiB | plan error | within 3 % |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    misses = 0
    for _, row in joined.iterrows():
        peak, bound = row["pred_mem_peak"], row.get("pred_mem_peak_upper")
        actual = row.get("mem_peak_torch_max_allocated_bytes")
        if row.get("status") != "ok" or pd.isna(actual):
            lines.append(f"| {row['scenario']} | {row['model_name_or_path']} | {row['framework_config']} | "
                         f"{row['per_device_train_batch_size']} | {peak / GIB:.3f} | | {row.get('status')} | | |")
            misses += 1
            continue
        error = peak / actual - 1
        ok = abs(error) <= TOLERANCE
        misses += not ok
        lines.append(f"| {row['scenario']} | {row['model_name_or_path']} | {row['framework_config']} | "
                     f"{row['per_device_train_batch_size']} "
                     f"| {peak / GIB:.3f} | {bound / GIB:.3f} | {actual / GIB:.3f} | {100 * error:+.2f} % | "
                     f"{'yes' if ok else 'NO'} |")
    return lines, misses


def _sweeps(fit_map: pd.DataFrame, measured: pd.DataFrame) -> tuple[list[str], int]:
    lines = ["| model | setting | fit map's largest micro-batch | ran | ran out of memory | verdict |",
             "|---|---|---:|---|---|---|"]
    misses = 0
    for _, row in fit_map.iterrows():
        runs = measured[(measured["model_name_or_path"] == row["model_name_or_path"])
                        & (measured["framework_config"] == row["framework_config"])]
        ran = sorted(int(b) for b in runs[runs["status"] == "ok"]["per_device_train_batch_size"])
        oom = sorted(int(b) for b in runs[runs["status"] == "oom"]["per_device_train_batch_size"])
        right = bool(ran) and max(ran) == row["max_micro_batch"] and bool(oom) and min(oom) == max(ran) + 1
        misses += not right
        lines.append(f"| {row['model_name_or_path']} | {row['framework_config']} | {row['max_micro_batch']} | "
                     f"{ran} | {oom} | {'right' if right else 'WRONG'} |")
    return lines, misses


def table(plan: str, results: str, fit_map: str | None, sweep_results: str | None) -> int:
    lines, misses = _rows(pd.read_csv(plan), pd.read_csv(results))
    if fit_map and sweep_results:
        more, missed = _sweeps(pd.read_csv(fit_map), pd.read_csv(sweep_results))
        lines += ["", *more]
        misses += missed
    print("\n".join(lines))
    return 1 if misses else 0


SETTINGS = ("torch-compile", "liger-kernels", "attn-flex", "padding-free-flex")


def replan(out: str) -> int:
    """The earlier H100 acceleration rows with a setting this issue models, planned on this host."""
    import tunebench
    from tunebench.api.planning import predictions

    matrix = tunebench.Matrix.from_yaml("docs/evidence/acceleration-h100/scenarios-acceleration.yaml", device="cuda",
                                        run_only_scenarios=["full-1b", "lora-1b", "lora-8b", "attention-1b"])
    matrix.experiments = [e for e in matrix.experiments if e.framework_config.name in SETTINGS]
    found = predictions(matrix, "NVIDIA H100 80GB HBM3", runs_here=False)
    tunebench.plan(matrix, "NVIDIA H100 80GB HBM3", found).to_csv(out, index=False)
    print(f"wrote {out}: {len(matrix.experiments)} row(s)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("sweeps")
    for name in ("fit_map", "scenarios", "out"):
        made.add_argument(name)
    shown = commands.add_parser("table")
    shown.add_argument("plan")
    shown.add_argument("results")
    shown.add_argument("fit_map", nargs="?")
    shown.add_argument("sweep_results", nargs="?")
    commands.add_parser("replan").add_argument("out")
    args = parser.parse_args()
    if args.command == "sweeps":
        return sweeps(args.fit_map, args.scenarios, args.out)
    if args.command == "replan":
        return replan(args.out)
    return table(args.plan, args.results, args.fit_map, args.sweep_results)


if __name__ == "__main__":
    sys.exit(main())
