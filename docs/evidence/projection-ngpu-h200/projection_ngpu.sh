#!/usr/bin/env bash
# Issue U on a 2-GPU machine: the 1B rows of docs/evidence/projection-ngpu-h200/scenarios-projection-ngpu.yaml on one GPU, then on two
# (DDP and FSDP2), into one results folder; $OUT gets ngpu.tgz (results without logs and trainer output) and the
# log's tail. The comparison is offline: docs/evidence/projection-ngpu-h200/projection_ngpu_doc.py.
set -uo pipefail
out=${OUT:-/tmp/ngpu-out}
mkdir -p "$out" .site
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false
[ -d .site/w ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site/w .whl/*.whl
export PYTHONPATH="$PWD/.site/w"
results=.work/ngpu
rm -rf "$results"
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv > "$out/gpus.csv" 2>&1
for n in 1 2; do
  scenario=$([ "$n" = 1 ] && echo ngpu-one-full,ngpu-one-lora || echo ngpu-two-full,ngpu-two-lora)
  timeout --signal=INT 260 python3 benchmark.py --scenarios_config_path docs/evidence/projection-ngpu-h200/scenarios-projection-ngpu.yaml \
    --results_output_path "$results" --num_gpus_matrix "$n" --run_only_scenarios "$scenario" --timeout 200 \
    >> "$out/log.txt" 2>&1
  echo "$(date +%T) $n GPU(s): exit $?" | tee -a "$out/step.log"
done
tar -czf "$out/ngpu.tgz" -C "$results" --exclude=trainer_output --exclude='*.log' --exclude='*.pickle' .
tail -c 200000 "$out/log.txt" > "$out/log-tail.txt" && rm -f "$out/log.txt"
