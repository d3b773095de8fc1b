#!/usr/bin/env bash
# Issues F, H, I evidence on one GPU, in one call: the throughput/memory scenarios (scanned step vs median over
# three runs for the noisy cases, start-up with the preload server, measured memory for the predictions made
# on a CPU with `benchmark.py plan`), the plain-Trainer reference, and `benchmark.py verify` for two cases.
#   bash scripts/gpu/final_run.sh OUT_DIR
set -euo pipefail
out="${1:?usage: final_run.sh OUT_DIR}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
work="$(mktemp -d)"
common=(--scenarios_config_path scripts/gpu/scenarios-throughput.yaml --timeout 300)
python3 benchmark.py "${common[@]}" --results_output_path "$work/pass1" --run_only_scenarios f-1b-full \
  f-1b-full-gc f-1b-lora f-qwen-full f-1b-lora-gc-ga h-8b-lora-gc-ga
python3 scripts/gpu/plain_trainer.py --variant lean --out "$out/plain-lean.json"
for pass in 2 3; do
  python3 benchmark.py "${common[@]}" --results_output_path "$work/pass$pass" \
    --run_only_scenarios f-qwen-full f-1b-lora-gc-ga
done
python3 benchmark.py verify --out "$out/verify-full.json" || true
python3 benchmark.py verify --peft lora --gradient_checkpointing --out "$out/verify-lora-gc.json" || true
python3 - "$work" "$out" <<'PY'
import sys, pathlib, pandas as pd
work, out = map(pathlib.Path, sys.argv[1:])
frames = [pd.read_csv(c).assign(run=c.parent.name) for c in sorted(work.glob("pass*/raw_summary.csv"))]
pd.concat(frames).to_csv(out / "final_runs.csv", index=False)
PY
tar -czf "$out/steps.tar.gz" -C "$work" $(cd "$work" && ls -d pass*/*/steps.json pass*/*/scan.json)
