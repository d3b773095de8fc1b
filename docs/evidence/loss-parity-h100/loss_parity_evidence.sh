#!/usr/bin/env bash
# Issue 45 evidence on one GPU (docs/evidence/loss-parity-h100.md), one device call per step:
#   STEP=1b bash docs/evidence/loss-parity-h100/loss_parity_evidence.sh   # z-full-1b, z-lora-1b: 15 rows, ~9 min on one H100
#   STEP=7b bash docs/evidence/loss-parity-h100/loss_parity_evidence.sh   # z-lora-8b, z-full-7b, z-packed-1b: 12 rows, ~9 min
# (About 30 s an experiment on H100, most of it start-up; torch.compile's about 85 s: issue R's evidence.)
# MAX_CONCURRENT=4 on nvidia-h100-x4 packs the rows on four GPUs (z-speed-1b, the throughput pair, runs alone):
#   STEP=all MAX_CONCURRENT=4 BUDGET_PLAIN=330 BUDGET_BNB=120 bash docs/evidence/loss-parity-h100/loss_parity_evidence.sh
#   STEP=fp32 MAX_CONCURRENT=4 ...   # z32-full-1b, z32-lora-8b: the 1B full and 8B LoRA comparisons in float32
# Carry: .whl (trl, datasets, dill, multiprocess; liger-kernel too, else the Liger rows are left out with a line
# saying so) and .whl-bnb (bitsandbytes, slimmed by docs/evidence/common/slim_wheel.py). Each step runs two passes into
# the same results folder: the configs without bitsandbytes (PEFT and TRL preloaded once), then those with it
# (8-bit AdamW, QLoRA: every experiment imports them). Each pass is bounded (BUDGET_PLAIN, BUDGET_BNB seconds):
# Ctrl-C keeps every finished experiment, and the same command resumes. $OUT gets loss-parity-<step>.md (the
# tables: docs/evidence/common/loss_parity_doc.py), loss-parity-<step>.tgz (the CSVs and every experiment's small files)
# and step.log. Afterwards: python docs/evidence/common/loss_band_rows.py <raw_summary.csv> docs/evidence/loss-parity-h100.md
set -uo pipefail
step=${STEP:?STEP=1b|7b|all|8b-long|fp32|fp32-compile|fp32-7b|fp32-bits}
results=${RESULTS:-.work/loss-parity}
out=${OUT:-/tmp/z-out}
mkdir -p "$out" .site .work/z
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
log() { echo "$(date +%T) $*" | tee -a "$out/step.log"; }
install() {  # the wheels of folder $1 into .site/$1 (once per machine)
  [ -d "$1" ] || return 0
  [ -d ".site/$1" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target ".site/$1" "$1"/*.whl
}
for wheels in .whl .whl-bnb; do install "$wheels"; done
base="$PWD/.site/.whl"
log "step $step on $(nvidia-smi --query-gpu=name --format=csv,noheader)"

run_pass() {  # $1: plain | bnb, $2: budget in seconds
  python3 docs/evidence/loss-parity-h100/loss_parity_prepare.py --step "$step" --pass "$1" --out .work/z | tee -a "$out/step.log"
  timeout --signal=INT "$2" python3 benchmark.py --scenarios_config_path ".work/z/scenarios-$1.yaml" \
    --framework_configs_path .work/z/framework_configs.yaml --results_output_path "$results" --timeout 300 \
    --max_concurrent "${MAX_CONCURRENT:-1}" \
    >> .work/z/log.txt 2>&1
  log "$1 pass: exit $?"
}
export PYTHONPATH="$base"
run_pass plain "${BUDGET_PLAIN:-390}"
export PYTHONPATH="$base:$PWD/.site/.whl-bnb"
run_pass bnb "${BUDGET_BNB:-150}"

python3 docs/evidence/common/loss_parity_doc.py "$results/raw_summary.csv" > "$out/loss-parity-$step.md" 2>> "$out/step.log"
for f in "$results"/*/stderr.log; do tail -n 40 "$f" > "${f%.log}.tail"; done 2>/dev/null
tail -c 300000 .work/z/log.txt > "$results/log-$step.txt"
tar -czf "$out/loss-parity-$step.tgz" --exclude=trainer_output --exclude='*.log' --exclude='*.pickle' \
  --exclude='*.json.gz' --exclude='kernels*.csv.gz' "$results"
ls -la "$out"
