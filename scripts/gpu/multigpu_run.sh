#!/usr/bin/env bash
# Multi-GPU evidence run (issue C) on a 4-GPU machine. Usage: bash scripts/gpu/multigpu_run.sh OUT_DIR
set -euo pipefail
out="${1:?usage: multigpu_run.sh OUT_DIR}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
results="$(mktemp -d)/results"
common=(--scenarios_config_path scripts/gpu/scenarios-multigpu.yaml --results_output_path "$results"
        --memory_logging scanner,nvidia --timeout 240)
python3 benchmark.py "${common[@]}" --num_gpus_matrix 2 --run_only_scenarios mg-1b-fsdp2 || true
python3 benchmark.py "${common[@]}" --num_gpus_matrix 4 --run_only_scenarios mg-1b mg-8b-full mg-8b-lora || true
python3 - "$results" "$out" <<'PY'
import json, sys, pathlib, pandas as pd
rows = [json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*/results.json"))]
pd.DataFrame(rows).to_csv(pathlib.Path(sys.argv[2]) / "raw_summary.csv", index=False)
PY
tar -czf "$out/experiments.tar.gz" --exclude trainer_output -C "$(dirname "$results")" results
