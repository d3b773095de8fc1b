#!/usr/bin/env bash
# Multi-GPU evidence, part 2 (issue C) on a 2-GPU machine. Usage: bash docs/evidence/gpu/multigpu_2gpu.sh OUT_DIR
# 1) scanner vs FSDPMemTracker on every rank (FSDP2, 1B full FT): FSDPMemTracker re-orders FSDP2's all-gathers
#    on the ranks it instruments, so it must run on all of them (on rank 0 alone it hung in backward);
# 2) the harness: 8B full FT with FSDP2 on 2 GPUs.
set -uo pipefail
out="${1:?usage: multigpu_2gpu.sh OUT_DIR}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
python3 -c "import accelerate, torch, transformers; print('accelerate', accelerate.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
grep -n "fully_shard(input_embed\|reshard_after_forward\": False" "$(python3 -c 'import accelerate.utils.fsdp_utils as m; print(m.__file__)')"
RMT_HANG_DUMP_S=200 timeout 260 torchrun --nproc_per_node 2 --master_port 29611 docs/evidence/gpu/rank_memtracker.py \
  --mode fsdp2 --tracker fsdp --tracker-ranks all --out "$out/rank-memtracker-fsdp2-fsdp" > "$out/rmt-fsdp2-fsdp.log" 2>&1
echo "rank_memtracker rc=$?"; tail -3 "$out/rmt-fsdp2-fsdp.log"; cat "$out"/rank-memtracker-fsdp2-fsdp/compare*.md 2>/dev/null
work="$(mktemp -d)"
python3 benchmark.py --scenarios_config_path docs/evidence/gpu/scenarios-multigpu.yaml --results_output_path "$work/results" \
  --memory_logging scanner,nvidia --timeout 250 --num_gpus_matrix 2 --run_only_scenarios mg-8b-full
bash docs/evidence/gpu/collect_results.sh "$work/results" "$out"
