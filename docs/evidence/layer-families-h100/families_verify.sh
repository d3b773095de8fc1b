#!/usr/bin/env bash
# Issue T evidence on one GPU: `benchmark.py verify` (scanner vs torch's MemTracker on one step) on architectures
# that are not presets (docs/evidence/common/configs/*: config.json only, random weights).
#   OUT=dir MODE=full|gc|lora bash docs/evidence/layer-families-h100/families_verify.sh FAMILY [FAMILY...]
# Writes $OUT/verify-<family>-<mode>.{json,txt}.
set -uo pipefail
mode=${MODE:-full}
case $mode in
  full) flags=() ;;
  gc) flags=(--gradient_checkpointing) ;;
  lora) flags=(--peft lora) ;;
  *) echo "MODE must be full, gc or lora" >&2; exit 2 ;;
esac
for family in "$@"; do
  start=$SECONDS
  timeout "${PER_FAMILY:-120}" python benchmark.py verify --model "docs/evidence/common/configs/$family" "${flags[@]}" \
    --batch "${BATCH:-2}" --seq "${SEQ:-1024}" --steps 7 --scan_step 4 --tolerance "${TOLERANCE:-0.01}" --out "$OUT/verify-$family-$mode.json" \
    > "$OUT/verify-$family-$mode.txt" 2>&1
  echo "$family $mode: exit $? in $((SECONDS - start)) s"
done
