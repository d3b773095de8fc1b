#!/usr/bin/env bash
# Merge a harness results dir into OUT/raw_summary.csv and pack it (without checkpoints) as OUT/experiments.tar.gz.
# Usage: bash docs/evidence/gpu/collect_results.sh RESULTS_DIR OUT_DIR   (called after each stage of the GPU runs)
results="${1:?RESULTS_DIR}"; out="${2:?OUT_DIR}"
python3 - "$results" "$out" <<'PY'
import json, sys, pathlib, pandas as pd
rows = [json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*/results.json"))]
if rows:
    pd.DataFrame(rows).to_csv(pathlib.Path(sys.argv[2]) / "raw_summary.csv", index=False)
PY
tar -czf "$out/experiments.tar.gz" --exclude trainer_output -C "$(dirname "$results")" "$(basename "$results")" 2>/dev/null || true
