#!/usr/bin/env bash
# Issue Y on a 4-GPU machine (nvidia-h100-x4), in device calls that each end inside 600 s:
#   STEP=a bash docs/evidence/gpu-counts-h100/gpu_counts.sh   # the 1B on 1 and 2 GPUs packed side by side (--max_concurrent 4), on 4
#                                           # GPUs, QLoRA's storage probes on 2; the one-GPU rows again, exclusive
#   STEP=b bash docs/evidence/gpu-counts-h100/gpu_counts.sh   # the 8B on 2 and 4 GPUs (and on one: skipped by the plan); the 2-GPU
#                                           # rows again, exclusive; Ray: one 4-GPU experiment over two 2-GPU nodes
#   STEP=e BUDGET=500 ...                   # the QLoRA rows d left, then Ray from .ray-xz: Ray 2.60.0 unzipped,
#                                           # binaries stripped, ray/{data,serve,tune,llm,train} dropped, tar.xz
#                                           # (16.8 MB: carried in one call with .whl and .whl-bnb, not liger)
# Scenarios: scenarios-gpu-counts.yaml beside this file. Carry: .whl (trl, datasets), .whl-bnb
# (docs/evidence/common/slim_wheel.py), and Ray's slimmed wheel in two halves, .whl-ray-a in the first call and .whl-ray-b in the second
# (the machine stays warm between them: the halves meet in .site/ray-parts). Every harness run is bounded so the
# call ends in time; $OUT gets <step>.tgz (the results folders without trainer output and logs, each experiment's
# stderr tail), gpus.csv, topology.txt and step.log.
set -uo pipefail
step=${STEP:?STEP=a|b|c|d|e}
out=${OUT:-/tmp/gc-out}
started=$(date +%s)
deadline=$((started + ${BUDGET:-560}))
mkdir -p "$out" .site .work/gc
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false \
  PYTHONUNBUFFERED=1
log() { echo "$(date +%T) +$(($(date +%s) - started))s $*" | tee -a "$out/step.log"; }
left() { echo $((deadline - $(date +%s))); }
install() {  # the wheels of folder $1 into .site/$1, once per machine
  [ -d "$1" ] && ls "$1"/*.whl >/dev/null 2>&1 || return 0
  [ -d ".site/$1" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target ".site/$1" "$1"/*.whl
}
for wheels in .whl .whl-bnb; do install "$wheels"; done
export PYTHONPATH="$PWD/.site/.whl:$PWD/.site/.whl-bnb"
# outside the repository's copy: on 2026-11-26 the first half put in .site/ray-parts was gone by the second call
parts=${RAY_PARTS:-/root/.cache/tunebench-ray-parts}
mkdir -p "$parts" && cp -f .whl-ray-*/ray.part* .whl-ray-*/*.whl "$parts"/ 2>/dev/null
log "ray wheel parts here: $(ls "$parts" 2>/dev/null | xargs)"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$out/gpus.csv" 2>&1
nvidia-smi topo -m > "$out/topology.txt" 2>&1
log "step $step on $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"

bench() {  # bench NAME BUDGET ARGS...: one harness run into .work/gc/NAME, its wall time in the log
  local name=$1 budget=$2; shift 2
  local room=$(($(left) - 25))
  [ "$budget" -gt "$room" ] && budget=$room
  if [ "$budget" -lt 30 ]; then log "$name: not run (no time left)"; return; fi
  local t0=$(date +%s.%N)
  timeout --signal=INT --kill-after=20 "$budget" python3 benchmark.py \
    --scenarios_config_path docs/evidence/gpu-counts-h100/scenarios-gpu-counts.yaml --results_output_path ".work/gc/$name" \
    --timeout 240 "$@" >> ".work/gc/$name.log" 2>&1
  local rc=$?
  log "$name: exit $rc, wall $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s (budget $budget s)"
}
ONE="gc-1b-full gc-1b-lora gc-1b-qlora"
PAR="gc-1b-full-par gc-1b-lora-par gc-1b-qlora-par"
case "$step" in
  a)
    bench packed 240 --num_gpus_matrix 1 2 --max_concurrent 4 --run_only_scenarios $ONE $PAR
    bench four 240 --num_gpus_matrix 4 --run_only_scenarios $PAR
    bench probes 80 --num_gpus_matrix 2 --max_concurrent 2 --run_only_scenarios gc-1b-qlora-uint8 gc-1b-qlora-fsdp1
    bench one-exclusive 120 --num_gpus_matrix 1 --exclusive_timing --run_only_scenarios $ONE
    ;;
  b)
    bench 8b-one 90 --num_gpus_matrix 1 --skip_predicted_oom --run_only_scenarios gc-8b-full-1
    bench 8b 330 --num_gpus_matrix 2 4 --max_concurrent 4 --run_only_scenarios gc-8b-full gc-8b-lora gc-8b-qlora
    if [ -f "$parts/ray.part00" ] && [ -f "$parts/ray.part01" ]; then
      cat "$parts/ray.part00" "$parts/ray.part01" > "$parts/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"
      rm -f "$parts"/ray.part0*
      python3 -m pip install -q --no-index --no-deps --no-compile --target .site/ray "$parts"/*.whl \
        && RAY=1 && log "ray installed" || log "ray install failed"
    fi
    if [ "${RAY:-0}" = 1 ] && [ "$(left)" -gt 150 ]; then
      PYTHONPATH="$PYTHONPATH:$PWD/.site/ray" timeout --signal=INT --kill-after=20 $(($(left) - 60)) \
        python3 docs/evidence/gpu-counts-h100/ray_two_nodes.py .work/gc/ray --timeout 150 >> .work/gc/ray.log 2>&1
      log "ray: exit $?"
    fi
    bench two-exclusive 200 --num_gpus_matrix 2 --exclusive_timing --run_only_scenarios $PAR
    ;;
  c)  # what a and b left: the QLoRA rows (their random checkpoint's config fixed), the 4-GPU LoRA rows, and the
      # one- and two-GPU rows the exclusive passes did not reach
    bench qlora 110 --num_gpus_matrix 1 2 --max_concurrent 4 --run_only_scenarios gc-1b-qlora gc-1b-qlora-par \
      gc-1b-qlora-uint8 gc-1b-qlora-fsdp1
    bench four-lora 130 --num_gpus_matrix 4 --run_only_scenarios gc-1b-lora-par gc-1b-qlora-par
    bench 8b-qlora 130 --num_gpus_matrix 2 4 --max_concurrent 4 --run_only_scenarios gc-8b-qlora
    bench rest-exclusive 150 --num_gpus_matrix 1 2 --exclusive_timing --run_only_scenarios gc-1b-full gc-1b-lora \
      gc-1b-lora-par
    ;;
  e)  # what d's budget left: QLoRA+FSDP2 on 4 GPUs, QLoRA+FSDP1, the 8B QLoRA+FSDP2 rows on 2 and 4 GPUs (its
      # 4-bit checkpoint written once, then read by both); then Ray over two nodes from .ray-xz (below)
    bench qlora-e 330 --num_gpus_matrix 2 4 --max_concurrent 4 --timeout 300 --run_only_scenarios gc-8b-qlora \
      gc-1b-qlora-par gc-1b-qlora-fsdp1
    if [ -f .ray-xz/ray-2.60.0-stripped.tar.xz ]; then
      mkdir -p .site/ray && tar -xJf .ray-xz/ray-2.60.0-stripped.tar.xz -C .site/ray \
        && python3 -m pip install -q --no-index --no-deps --no-compile --target .site/ray .ray-xz/*.whl \
        && RAY=1 && log "ray installed: $(PYTHONPATH=$PWD/.site/ray python3 -c 'import ray; print(ray.__version__)')"
    fi
    if [ "${RAY:-0}" = 1 ] && [ "$(left)" -gt 120 ]; then
      PYTHONPATH="$PYTHONPATH:$PWD/.site/ray" timeout --signal=INT --kill-after=20 $(($(left) - 40)) \
        python3 docs/evidence/gpu-counts-h100/ray_two_nodes.py .work/gc/ray --timeout $(($(left) - 70)) >> .work/gc/ray.log 2>&1
      log "ray: exit $?"
    fi
    ;;
  d)  # the QLoRA rows again once the main process writes the random checkpoint first (c's all failed on it)
    bench qlora-d 140 --num_gpus_matrix 1 2 --max_concurrent 4 --run_only_scenarios gc-8b-qlora gc-1b-qlora \
      gc-1b-qlora-par gc-1b-qlora-uint8
    ;;
esac
for f in .work/gc/*/*/stderr.log; do [ -f "$f" ] && tail -n 40 "$f" > "${f%.log}.tail"; done
for f in .work/gc/*.log; do tail -c 300000 "$f" > "${f%.log}.logtail"; done
tar -czf "$out/$step.tgz" -C .work/gc --exclude=trainer_output --exclude='*.pickle' --exclude='stderr.log' \
  --exclude='stdout.log' --exclude='*.log' --exclude='kernels*.gz' . 2>/dev/null
(cd .work/gc && find . -name 'kernels.csv.gz' -o -name 'kernels.csv.rank0.gz' | tar -czf "$out/kernels-$step.tgz" -T -)
log "packed $(du -h "$out/$step.tgz" | cut -f1), kernels $(du -h "$out/kernels-$step.tgz" | cut -f1)"
