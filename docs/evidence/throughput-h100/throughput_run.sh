#!/usr/bin/env bash
# Issue F evidence on one GPU: the throughput scenario set through the harness (nvidia-smi sidecar on), the
# scanner-check scenarios twice more (three runs each), and the independent plain-Trainer reference.
#   bash docs/evidence/throughput-h100/throughput_run.sh OUT_DIR [passes]
set -euo pipefail
out="${1:?usage: throughput_run.sh OUT_DIR [passes]}"
passes="${2:-3}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
work="$(mktemp -d)"
common=(--scenarios_config_path docs/evidence/common/scenarios-throughput.yaml --log_nvidia_smi --timeout 300)
python3 docs/evidence/common/plain_trainer.py --variant lean --out "$out/plain-lean.json"
python3 benchmark.py "${common[@]}" --results_output_path "$work/pass1"
cp "$work/pass1/raw_summary.csv" "$out/pass1.csv"
python3 docs/evidence/common/plain_trainer.py --variant hf-defaults --out "$out/plain-hf-defaults.json"
python3 docs/evidence/common/plain_trainer.py --variant lean --out "$out/plain-lean-after.json"
for pass in $(seq 2 "$passes"); do
  python3 benchmark.py "${common[@]}" --results_output_path "$work/pass$pass" \
    --run_only_scenarios f-1b-full f-qwen-full f-1b-lora-gc-ga
  cp "$work/pass$pass/raw_summary.csv" "$out/pass$pass.csv"
done
python3 - "$work" "$out" <<'PY'
import sys, pandas as pd, pathlib
work, out = map(pathlib.Path, sys.argv[1:])
frames = []
for csv in sorted(work.glob("pass*/raw_summary.csv")):
    frame = pd.read_csv(csv); frame.insert(0, "pass", csv.parent.name); frames.append(frame)
pd.concat(frames).to_csv(out / "throughput_runs.csv", index=False)
for csv in out.glob("pass*.csv"):
    csv.unlink()  # merged above; the tool returns at most 8 files
PY
tar -czf "$out/experiments.tar.gz" --exclude trainer_output --exclude "*.pickle" -C "$work" .
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpus.csv"
