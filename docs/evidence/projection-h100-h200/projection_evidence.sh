#!/usr/bin/env bash
# Issue U evidence on one GPU (run the same on nvidia-h100-x1 and on nvidia-h200):
#   bash docs/evidence/projection-h100-h200/projection_evidence.sh [RESULTS]
# 1. docs/evidence/projection-h100-h200/gpu_peaks.py: the GPU's measured matmul rate and bandwidth (~15 s) -> $OUT/peaks.json
# 2. the 11 experiments of docs/evidence/projection-h100-h200/scenarios-projection.yaml through the harness (nvidia-smi sidecar on for
#    power), bounded by BUDGET seconds (default 480): then Ctrl-C, whose exit keeps every finished experiment in
#    the CSVs. Each experiment folder gets kernels.csv.gz (the scanned step's kernel split).
# 3. $OUT/results.tgz (CSVs, spec/results/steps/scan JSON, nvidia_smi.csv, the end of stderr.log of each
#    experiment) and $OUT/kernels-<scenario group>.tgz (the kernels.csv.gz files), $OUT/log.txt, $OUT/gpus.csv.
# Needs: trl, datasets, bitsandbytes (carried wheels) besides the image's torch/transformers/peft/accelerate.
set -uo pipefail
results=${1:-/tmp/projection-results}
out=${OUT:-/tmp/projection-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false \
  PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,clocks.max.mem --format=csv \
  > "$out/gpus.csv" 2>&1
timeout 60 python3 docs/evidence/projection-h100-h200/gpu_peaks.py "$out/peaks.json" > /dev/null 2>&1 || echo "gpu_peaks.py failed" >&2
timeout --signal=INT "${BUDGET:-480}" python3 benchmark.py --scenarios_config_path docs/evidence/projection-h100-h200/scenarios-projection.yaml \
  --results_output_path "$results" --log_nvidia_smi --timeout 300 > "$out/log.full" 2>&1
status=$?
tail -c 1500000 "$out/log.full" > "$out/log.txt"; rm -f "$out/log.full"
for f in "$results"/*/stderr.log; do tail -n 60 "$f" > "${f%.log}.tail"; done 2>/dev/null
(cd "$results" && tar -czf "$out/results.tgz" --exclude=trainer_output --exclude='*.log' --exclude='*.pickle' \
  --exclude='kernels*.csv.gz' .)
for group in proj-1b proj-05b proj-8b; do
  files=$(cd "$results" && ls -d "$group"*/kernels*.csv.gz 2>/dev/null)
  [ -n "$files" ] && (cd "$results" && tar -czf "$out/kernels-$group.tgz" $files)
done
ls -la "$out"
exit $status
