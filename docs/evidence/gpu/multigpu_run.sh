#!/usr/bin/env bash
# Multi-GPU evidence run (issue C) on a 4-GPU machine. Usage: bash docs/evidence/gpu/multigpu_run.sh OUT_DIR
# 1) scanner vs MemTracker/FSDPMemTracker on rank 0 (FSDP2 on GPUs 0,1 and DDP on GPUs 2,3, side by side);
# 2) the harness on 4 GPUs (8B full FT with FSDP2, 8B LoRA with DDP, 1B LoRA with DDP), then on 2 GPUs.
# Results are collected after every stage, so a stage cut off by a time limit keeps the earlier ones.
set -uo pipefail
out="${1:?usage: multigpu_run.sh OUT_DIR}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
work="$(mktemp -d)"; results="$work/results"
collect() { bash docs/evidence/gpu/collect_results.sh "$results" "$out"; }
CUDA_VISIBLE_DEVICES=0,1 timeout 200 torchrun --nproc_per_node 2 --master_port 29611 \
  docs/evidence/gpu/rank_memtracker.py --mode fsdp2 --out "$out/rank-memtracker-fsdp2" > "$out/rmt-fsdp2.log" 2>&1 &
CUDA_VISIBLE_DEVICES=2,3 timeout 200 torchrun --nproc_per_node 2 --master_port 29622 \
  docs/evidence/gpu/rank_memtracker.py --mode ddp --out "$out/rank-memtracker-ddp" > "$out/rmt-ddp.log" 2>&1 &
wait
tail -3 "$out/rmt-fsdp2.log" "$out/rmt-ddp.log"; cat "$out"/rank-memtracker-*/compare.md 2>/dev/null
common=(--scenarios_config_path docs/evidence/gpu/scenarios-multigpu.yaml --results_output_path "$results"
        --memory_logging scanner,nvidia --timeout 200)
python3 benchmark.py "${common[@]}" --num_gpus_matrix 4 --run_only_scenarios mg-8b-full mg-8b-lora mg-1b-lora; collect
python3 benchmark.py "${common[@]}" --num_gpus_matrix 2 --run_only_scenarios mg-1b-lora mg-8b-lora; collect
