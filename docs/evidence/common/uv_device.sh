#!/usr/bin/env bash
# One device call of the U (projection) and V (history) evidence, in steps that fit 600 s each:
#   STEP=h100-a bash docs/evidence/common/uv_device.sh   # peaks; U's rows without bitsandbytes; V's runs 1-3
#   STEP=h100-b bash docs/evidence/common/uv_device.sh   # V's runs 4 (co-tenant) and 5; U's QLoRA rows (bitsandbytes)
#   STEP=h100-v / STEP=h100-q                      # h100-b's two halves, one device call each (carry limit:
#                                                  # .whl-v and .whl-bnb together exceed 64 MiB)
#   STEP=h200   bash docs/evidence/common/uv_device.sh   # peaks; U's rows without, then with bitsandbytes
# Wheels: .whl (trl, datasets, dill, multiprocess), .whl-v (duckdb, ruptures), .whl-bnb (bitsandbytes, slimmed
# by docs/evidence/common/slim_wheel.py to fit the carry beside the repository), each installed into .site/<name> (an
# ignored folder: on a warm machine the next call finds it there).
# Without bitsandbytes PEFT and TRL are preloaded once per matrix; with it every experiment imports them (a GPU
# host cannot preload them), so U's QLoRA rows run in a pass of their own and V's default set runs without it
# (its quantized pair left out: history_evidence.sh says so).
# $OUT gets u-<step>.tgz (projection_evidence's files: gpus.csv, peaks.json, log.txt, results.tgz, kernels-*.tgz)
# and v-<step>.tgz (history_evidence's files), and step.log.
set -uo pipefail
step=${STEP:?STEP=h100-a|h100-b|h100-v|h100-q|h200|full}
out=${OUT:-/tmp/uv-out}
mkdir -p "$out" .site .work
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false \
  PYTHONUNBUFFERED=1
log() { echo "$(date +%T) $*" | tee -a "$out/step.log"; }
install() {  # install the wheels of folder $1 into .site/$1 (once per machine)
  [ -d "$1" ] || return 0
  [ -d ".site/$1" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target ".site/$1" "$1"/*.whl
}
for wheels in .whl .whl-v .whl-bnb; do install "$wheels"; done
base="$PWD/.site/.whl:$PWD/.site/.whl-v"
export PYTHONPATH="$base"
log "step $step on $(nvidia-smi --query-gpu=name --format=csv,noheader)"

u_pass() {  # U rows of scenarios $2.. into .work/proj; $1: budget in seconds
  local budget=$1; shift
  timeout --signal=INT "$budget" python3 benchmark.py --scenarios_config_path docs/evidence/projection-h100-h200/scenarios-projection.yaml \
    --results_output_path .work/proj --log_nvidia_smi --timeout 300 --run_only_scenarios "$@" >> .work/u-log.txt 2>&1
  log "U pass ($*): exit $?"
}
u_pack() {  # projection_evidence.sh's outputs for this step, in one file
  local dir=.work/u-out
  rm -rf "$dir" && mkdir -p "$dir"
  cp -f .work/peaks.json .work/gpus.csv "$dir"/ 2>/dev/null
  tail -c 1500000 .work/u-log.txt > "$dir/log.txt"
  for f in .work/proj/*/stderr.log; do tail -n 60 "$f" > "${f%.log}.tail"; done 2>/dev/null
  (cd .work/proj && tar -czf "$OLDPWD/$dir/results.tgz" --exclude=trainer_output --exclude='*.log' \
    --exclude='*.pickle' --exclude='kernels*.csv.gz' .)
  for group in proj-1b proj-05b proj-8b; do
    files=$(cd .work/proj && ls -d "$group"*/kernels*.csv.gz 2>/dev/null)
    [ -n "$files" ] && (cd .work/proj && tar -czf "$OLDPWD/$dir/kernels-$group.tgz" $files)
  done
  tar -czf "$out/u-$step.tgz" -C "$dir" .
}
peaks() {
  mkdir -p .work
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,clocks.max.mem --format=csv \
    > .work/gpus.csv 2>&1
  timeout 90 python3 docs/evidence/projection-h100-h200/gpu_peaks.py .work/peaks.json > .work/peaks.log 2>&1 || log "gpu_peaks.py failed"
}
PLAIN="proj-1b-full proj-1b-lora proj-1b-packed proj-8b-lora proj-1b-lora-gc-ga proj-05b-full"
QUANT="proj-1b-qlora proj-8b-qlora"
case "$step" in
  h100-a)
    peaks
    u_pass 220 $PLAIN
    u_pack
    RUNS="1 2 3" bash docs/evidence/history-h100/history_evidence.sh .work/v-out > .work/v-log.txt 2>&1
    log "V runs 1-3: exit $?"
    ;;
  h100-b)
    RUNS="4 5" PREVIOUS=.hist-prev bash docs/evidence/history-h100/history_evidence.sh .work/v-out > .work/v-log.txt 2>&1
    log "V runs 4-5: exit $?"
    export PYTHONPATH="$base:$PWD/.site/.whl-bnb"
    u_pass 240 $QUANT
    u_pack
    ;;
  peaks)  # the GPU's rates only
    peaks
    mkdir -p .work/u-out && cp -f .work/peaks.json .work/gpus.csv .work/u-out/ && tar -czf "$out/u-$step.tgz" -C .work/u-out .
    ;;
  h100-v)  # RUNS (default "4 5"); the earlier runs' files in .hist-prev when it exists
    rm -rf .work/v-out  # a warm machine keeps the last call's store
    previous=; [ -d .hist-prev ] && previous=.hist-prev
    RUNS="${RUNS:-4 5}" PREVIOUS=$previous bash docs/evidence/history-h100/history_evidence.sh .work/v-out > .work/v-log.txt 2>&1
    log "V runs ${RUNS:-4 5}: exit $?"
    ;;
  h100-q)
    export PYTHONPATH="$base:$PWD/.site/.whl-bnb"
    u_pass 300 $QUANT
    u_pack
    ;;
  h200|full)  # any GPU: its rates, U's rows without, then with bitsandbytes
    peaks
    u_pass 240 $PLAIN
    export PYTHONPATH="$base:$PWD/.site/.whl-bnb"
    u_pass 200 $QUANT
    u_pack
    ;;
esac
if [ -d .work/v-out ]; then
  tail -n 200 .work/v-log.txt > .work/v-out/v-log.txt
  tar -czf "$out/v-$step.tgz" -C .work/v-out .
fi
ls -la "$out"
