#!/usr/bin/env bash
# fms-acceleration's configs on H200s (docs/evidence/fms-acceleration-h200.md). Run on the device machine from the
# repository root, after installing the carried wheels (.whl: trl, datasets, bitsandbytes, fms-acceleration):
#   STEP=smoke|one|two|gptq2 bash docs/evidence/fms-acceleration-h200/run.sh
# smoke: the 1B at 1 GPU, every config, 8 steps; one: both models at 1 GPU (two experiments at a time, one per GPU);
# two: both models at 2 GPUs (FSDP1); gptq2: the GPTQ configs at 2 GPUs with adamw_torch. Results and logs go to $OUT.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out="${OUT:-/tmp/out}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpus.csv"
common=(--scenarios_config_path "$here/scenarios.yaml" --effective_batch_size_matrix 4 --log_nvidia_smi --plan
        --timeout 420)
case "${STEP:-one}" in
  smoke) python3 benchmark.py "${common[@]}" --num_gpus_matrix 1 2 --run_only_scenarios fms-smoke fms-smoke-fsdp \
           --max_concurrent 2 \
           --results_output_path /tmp/fms-smoke --overwrite 2>&1 | tee "$out/log-smoke.txt" ;;
  one) python3 benchmark.py "${common[@]}" --num_gpus_matrix 1 --run_only_scenarios fms-peft --max_concurrent 2 \
         --results_output_path /tmp/fms-one 2>&1 | tee "$out/log-one.txt" ;;
  two) python3 benchmark.py "${common[@]}" --num_gpus_matrix 2 --run_only_scenarios fms-peft-fsdp \
         --results_output_path /tmp/fms-two 2>&1 | tee "$out/log-two.txt" ;;
  gptq2) python3 benchmark.py "${common[@]}" --num_gpus_matrix 2 --run_only_scenarios fms-gptq-fsdp \
           --results_output_path /tmp/fms-gptq2 2>&1 | tee "$out/log-gptq2.txt" ;;
esac
for folder in /tmp/fms-smoke /tmp/fms-one /tmp/fms-two /tmp/fms-gptq2; do
  [ -f "$folder/raw_summary.csv" ] && cp "$folder/raw_summary.csv" "$out/$(basename "$folder")-raw_summary.csv"
  [ -d "$folder" ] && tar czf "$out/$(basename "$folder")-experiments.tar.gz" -C "$folder" \
    --exclude='*.pt' --exclude='trainer_output' . 2>/dev/null || true
done
