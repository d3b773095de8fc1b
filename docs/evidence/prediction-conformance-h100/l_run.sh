#!/usr/bin/env bash
# Issue L evidence on one GPU, in calls that each fit the device tool's 10-minute limit:
#   bash docs/evidence/prediction-conformance-h100/l_run.sh OUT_DIR small    # prediction vs scanner: small presets and config-only families
#   bash docs/evidence/prediction-conformance-h100/l_run.sh OUT_DIR rest     # accumulation, 3B, 7B LoRA+GC, padding-free
#   bash docs/evidence/prediction-conformance-h100/l_run.sh OUT_DIR unseen   # families in no earlier evidence (scenarios-unseen.yaml);
#                                              # verify on a 22B model (over half the GPU)
#   bash docs/evidence/prediction-conformance-h100/l_run.sh OUT_DIR auto     # auto vs fixed 200 steps
#   bash docs/evidence/prediction-conformance-h100/l_run.sh OUT_DIR default  # the default GPU set with steady_state: auto (wall time, CIs)
# Each raw_summary.csv is copied to OUT_DIR as soon as it exists, so a cut-off call still returns it.
set -uo pipefail
out="${1:?usage: l_run.sh OUT_DIR small|rest|unseen|auto|default}"
part="${2:?usage: l_run.sh OUT_DIR small|rest|unseen|auto|default}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
work="$(mktemp -d)"

run() {  # name, options...
  local name="$1"; shift
  local started=$SECONDS
  python3 benchmark.py --timeout 300 --results_output_path "$work/$name" "$@"
  echo "$name: $((SECONDS - started)) s of wall time" | tee -a "$out/wall.txt"
  cp "$work/$name/raw_summary.csv" "$out/$name.csv" 2>/dev/null || echo "no raw_summary for $name"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpus.csv"
if [[ "$part" == small ]]; then
  run conformance-small --plan --scenarios_config_path docs/evidence/prediction-conformance-h100/scenarios-conformance.yaml \
    --run_only_scenarios l-small l-small-lora
elif [[ "$part" == rest ]]; then
  run conformance-rest --plan --scenarios_config_path docs/evidence/prediction-conformance-h100/scenarios-conformance.yaml \
    --run_only_scenarios l-small-ga l-3b l-7b-lora-gc l-padding-free
elif [[ "$part" == auto ]]; then
  run auto --scenarios_config_path docs/evidence/prediction-conformance-h100/scenarios-auto.yaml
elif [[ "$part" == unseen ]]; then
  run conformance-unseen --plan --scenarios_config_path docs/evidence/prediction-conformance-h100/scenarios-unseen.yaml
  python3 benchmark.py verify --model docs/evidence/common/configs/llama-22b --peft lora --gradient_checkpointing --batch 1 \
    --seq 512 --steps 8 --out "$out/verify-22b.json" > "$out/verify-22b.txt" 2>&1
  echo "verify 22b rc=$?" | tee -a "$out/wall.txt"
elif [[ "$part" == default ]]; then
  run default-auto --log_nvidia_smi --num_gpus_matrix 1
fi
tar -czf "$out/steps-$part.tar.gz" -C "$work" $(cd "$work" && ls -d */*/steps.json */*/scan.json 2>/dev/null)
