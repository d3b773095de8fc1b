#!/usr/bin/env bash
# Issue P (and L) evidence on one GPU, one call:
#   bash docs/evidence/compare-significance-h100/p_run.sh OUT_DIR
# 1. the default GPU set, 3 interleaved runs (--repeats 3): the no-change baseline;
# 2. the default set once more with the for-each AdamW instead of the fused one (an ordinary setting that costs
#    5-10 % on full fine-tuning): the slowdown compare must flag, naming `optim`;
# 3. benchmark.py verify on a 22B model (over half the GPU), issue L.
# Everything the comparisons need (raw_summary.csv + each experiment's steps.json) comes back as tarballs.
set -uo pipefail
out="${1:?usage: p_run.sh OUT_DIR}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
work="$(mktemp -d)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpus.csv"
started=$SECONDS
python3 benchmark.py --num_gpus_matrix 1 --repeats 3 --timeout 300 --results_output_path "$work/baseline"
echo "baseline x3: $((SECONDS - started)) s" | tee -a "$out/wall.txt"
started=$SECONDS
python3 benchmark.py --num_gpus_matrix 1 --timeout 300 --defaults_config_path docs/evidence/compare-significance-h100/defaults-foreach-adamw.yaml \
  --results_output_path "$work/foreach"
echo "foreach: $((SECONDS - started)) s" | tee -a "$out/wall.txt"
tar -czf "$out/runs.tar.gz" -C "$work" $(cd "$work" && ls -d */raw_summary.csv */*/steps.json */*/results.json */*/spec.json)
python3 benchmark.py verify --model docs/evidence/common/configs/llama-22b --peft lora --gradient_checkpointing --batch 1 \
  --seq 512 --steps 8 --out "$out/verify-22b.json" > "$out/verify-22b.txt" 2>&1
echo "verify 22b rc=$?" | tee -a "$out/wall.txt"
