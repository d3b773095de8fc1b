#!/usr/bin/env bash
# GPU evidence of `benchmark.py tune` (docs/evidence/tune-h100.md): the full grid of a space as the reference,
# and the search over the same space. Usage on the device: docs/evidence/tune-h100/tune_evidence.sh <grid|tune> <1b|7b|7b-batch8> <out>
set -euo pipefail
mode=$1 size=$2 out=$3
case $size in
  1b) space=(--model preset:llama-3.2-1b --effective_batch 16 --max_seq_len 1024 --peft any --micro_batches 2 4 8 16) ;;
  7b) space=(--model preset:mistral-7b --effective_batch 4 --max_seq_len 1024 --peft any --micro_batches 1 2 4) ;;
  # The same 7B at twice the batch: full fine-tuning without checkpointing at micro-batch 4 and 8 does not fit.
  7b-batch8) space=(--model preset:mistral-7b --effective_batch 8 --max_seq_len 1024 --peft any --micro_batches 1 2 4 8) ;;
  *) echo "size: 1b, 7b or 7b-batch8" >&2; exit 2 ;;
esac
# The evidence's space: PEFT (full, LoRA r16), checkpointing, micro-batch × accumulation; one optimizer (fused
# AdamW) and no torch.compile, so that the reference grid fits the device time of one session.
space+=(--lora_ranks 16 --optimizers adamw_torch_fused --torch_compile false --timeout 300)
extra=()
[ "$mode" = grid ] && extra=(--grid)
python3 benchmark.py tune "${space[@]}" "${extra[@]}" --results_output_path "$out" --log_level WARNING
