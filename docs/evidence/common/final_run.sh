#!/usr/bin/env bash
# Issues F, H, I evidence on one GPU, in two calls that each fit the device tool's 10-minute limit:
#   bash docs/evidence/common/final_run.sh OUT_DIR throughput   # F: 3 passes (scanned step vs median, start-up with the
#                                                     #    preload server), plain-Trainer reference, sidecar on
#   bash docs/evidence/common/final_run.sh OUT_DIR memory       # I: `benchmark.py verify` x2; H: the 8B LoRA+GC+GA case
# Each pass's raw_summary.csv is copied to OUT_DIR as soon as it exists, so a cut-off call still returns it.
set -uo pipefail
out="${1:?usage: final_run.sh OUT_DIR throughput|memory}"
part="${2:?usage: final_run.sh OUT_DIR throughput|memory}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
work="$(mktemp -d)"
common=(--scenarios_config_path docs/evidence/common/scenarios-throughput.yaml --timeout 300)

run_pass() {  # name, extra options...
  local name="$1"; shift
  python3 benchmark.py "${common[@]}" --results_output_path "$work/$name" "$@"
  cp "$work/$name/raw_summary.csv" "$out/$name.csv" 2>/dev/null || echo "no raw_summary for $name"
}

if [[ "$part" == throughput ]]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpus.csv"
  run_pass pass1 --log_nvidia_smi --run_only_scenarios f-1b-full f-1b-full-gc f-1b-lora f-qwen-full f-1b-lora-gc-ga
  if ! python3 -c "import pandas as pd, sys; sys.exit(int((pd.read_csv('$out/pass1.csv').status != 'ok').any()))"; then
    echo "pass1 had failed rows: again without the preload server"
    run_pass pass1-no-preload --no_preload --run_only_scenarios f-1b-full f-qwen-full f-1b-lora-gc-ga
  fi
  python3 docs/evidence/common/plain_trainer.py --variant lean --out "$out/plain-lean.json"
  for pass in pass2 pass3; do
    run_pass "$pass" --run_only_scenarios f-1b-full f-qwen-full f-1b-lora-gc-ga
  done
elif [[ "$part" == memory ]]; then
  python3 benchmark.py verify --out "$out/verify-full.json" > "$out/verify-full.txt" 2>&1
  echo "verify full rc=$?"
  python3 benchmark.py verify --peft lora --gradient_checkpointing --out "$out/verify-lora-gc.json" \
    > "$out/verify-lora-gc.txt" 2>&1
  echo "verify lora+gc rc=$?"
  run_pass pass-8b --run_only_scenarios h-8b-lora-gc-ga
fi
tar -czf "$out/steps-$part.tar.gz" -C "$work" $(cd "$work" && ls -d */*/steps.json */*/scan.json 2>/dev/null)
