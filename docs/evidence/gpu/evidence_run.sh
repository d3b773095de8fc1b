#!/usr/bin/env bash
# GPU evidence run (issues A, C, D): the shipped GPU scenario set on 1 GPU and a 2-GPU DDP/FSDP2 run, with the
# scanner, the nvidia-smi sidecar and HF memory metrics on. Usage: bash docs/evidence/gpu/evidence_run.sh OUT_DIR
set -euo pipefail
out="${1:?usage: evidence_run.sh OUT_DIR}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
results="$(mktemp -d)/results"
common=(--results_output_path "$results" --memory_logging scanner,nvidia,huggingface --timeout 300)
python3 benchmark.py "${common[@]}" --num_gpus_matrix 1 --run_only_scenarios full-finetuning standard-peft
if [[ "$(nvidia-smi -L | wc -l)" -ge 2 ]]; then
  python3 benchmark.py "${common[@]}" --num_gpus_matrix 2 --run_only_scenarios multi-gpu-full-finetuning
fi
cp "$results/raw_summary.csv" "$results/benchmarks.csv" "$out/"
tar -czf "$out/experiments.tar.gz" --exclude trainer_output -C "$(dirname "$results")" results
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpus.csv"
