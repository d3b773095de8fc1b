#!/usr/bin/env bash
# Issue X on one H100 (nvidia-h100-x1): what the rows planned on a CPU host (acceleration_memory_plans.sh, committed
# under docs/evidence/acceleration-memory-h100/) measure, one device call per step (each resumes its folder):
#   STEP=a bash docs/evidence/acceleration-memory-h100/acceleration_memory.sh  # compile (default), Liger, flex: 1B, 8B, qwen3, smollm3 (12 rows)
#   STEP=b ...                                      # compile max-autotune-no-cudagraphs on the same four (4 rows)
#   STEP=c ...                                      # sweeps at the fit map's edge: compile and Liger on 2 models
#   STEP=x4 BUDGET=480 ...                          # a, b and c in one call on nvidia-h100-x4 (one row per GPU)
#   STEP=b4 BUDGET=560 ...                          # b alone on nvidia-h100-x4, one row per GPU: the four autotune
#                                                   # at once (on one H100 the 1B alone autotuned > 5.5 min); inductor's
#                                                   # caches kept outside the copied tree, so a next call on the warm
#                                                   # machine resumes what the budget cut
#   STEP=a4 BUDGET=400 ...                          # a alone on nvidia-h100-x4, one row per GPU (--max_concurrent 4)
#   STEP=h BUDGET=520 ...                           # b's four rows on nvidia-h100-x4 under torch's allocator history
#                                                   # (docs/evidence/acceleration-memory-h100/memory_history.py): what is alive at each run's
#                                                   # peak, by allocating frame -> $OUT/mh-<experiment>.json
# Estimates (H100 host, 16 cores; compile times of the acceleration evidence: 47-98 s): a ~8 min (two harnesses
# side by side on the GPU, 1B/unseen rows beside the 8B's: at most ~67 GB together), b ~8-10 min (autotuning
# dominates), c ~8 min (8 runs one after another: a sweep's second run must find the GPU to itself).
# Carry .whl: bash ../shared/device/wheels.sh .whl liger-kernel==0.8.5 (liger-kernel is a 0.9 MB pure-Python
# wheel; triton comes with the image's torch). $OUT gets am-<step>.tgz (CSVs and each experiment's small files).
set -uo pipefail
step=${STEP:?STEP=a|b|c|x4|b4|a4|h}
out=${OUT:-/tmp/am-out}
budget=${BUDGET:-500}
mkdir -p "$out" .site
[ -d .site/.whl ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site/.whl .whl/*.whl
export PYTHONPATH="$PWD/.site/.whl${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
run() {  # run RESULTS SCENARIOS-FILE SCENARIO[,SCENARIO] [HARNESS ARG...]: one harness, its own cache, within the
  # step's budget; each experiment's timeout is $TIMEOUT (default 900 s)
  TUNEBENCH_CACHE="$PWD/.cache-$(basename "$1")" timeout --signal=INT "$budget" python3 benchmark.py \
    --scenarios_config_path "$2" --results_output_path "$1" --run_only_scenarios "$3" --timeout "${TIMEOUT:-900}" \
    "${@:4}" > "$1.log" 2>&1
  echo "$(date +%T) $1: exit $?" | tee -a "$out/step.log"
}
mkdir -p am
nvidia-smi --query-gpu=name,uuid,memory.total --format=csv > "$out/gpus.csv" 2>&1
case "$step" in
  a) run am/a-small docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml am-1b,am-unseen &
     run am/a-8b docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml am-8b
     wait ;;
  b) run am/b-small docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml am-autotune-1b &
     run am/b-rest docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml am-autotune
     wait ;;
  c) run am/c-sweeps docs/evidence/acceleration-memory-h100/scenarios-acceleration-sweeps.yaml \
       "$(python3 -c 'import yaml; print(",".join(s["name"] for s in yaml.safe_load(open("docs/evidence/acceleration-memory-h100/scenarios-acceleration-sweeps.yaml"))["scenarios"]))')" ;;
  x4) # a, b and c in one harness on nvidia-h100-x4, one experiment per GPU (--max_concurrent 4): every row has a
      # GPU to itself, so a sweep's second run finds its GPU as the fit map plans it; the autotuned rows go first
      # (the longest), then the others fill the gaps
      python3 - <<'PY'
import yaml
memory = yaml.safe_load(open("docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml"))
sweeps = yaml.safe_load(open("docs/evidence/acceleration-memory-h100/scenarios-acceleration-sweeps.yaml"))
assert memory["data_processing"] == sweeps["data_processing"]
first = [s for s in memory["scenarios"] if s["name"].startswith("am-autotune")]
rest = [s for s in memory["scenarios"] if s not in first and s["name"] != "am-sweep"]
yaml.safe_dump({"data_processing": memory["data_processing"], "scenarios": first + rest + sweeps["scenarios"]},
               open("am/scenarios-x4.yaml", "w"), sort_keys=False)
print(",".join(s["name"] for s in first + rest + sweeps["scenarios"]), file=open("am/names-x4", "w"))
PY
      run am/x4 am/scenarios-x4.yaml "$(cat am/names-x4)" --max_concurrent 4 ;;
  b4) export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/root/.cache/tunebench-inductor}
      mkdir -p .work/am  # an ignored folder: kept on a warm machine, so a next call resumes the results
      run .work/am/b4 docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml "${SCENARIOS:-am-autotune-1b,am-autotune}" \
        --max_concurrent 4
      cp -r .work/am/b4 .work/am/b4.log am/ ;;
  a4) TIMEOUT=600 run am/a4 docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml am-1b,am-unseen,am-8b --max_concurrent 4 ;;
  h)  python3 benchmark.py --scenarios_config_path docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml --run_only_scenarios \
        am-autotune-1b,am-autotune --results_output_path am/h --dry_run > am/h.log 2>&1
      i=0
      for d in am/h/*/; do  # each experiment's own command, the entry wrapped, a GPU and a data cache of its own
        id=$(basename "$d")
        sed -e "s#-m tunebench.experiment.train --spec#docs/evidence/acceleration-memory-h100/memory_history.py $out/mh-$id.json#" \
            -e "s#CUDA_VISIBLE_DEVICES=[0-9,]*#CUDA_VISIBLE_DEVICES=$i#" \
            -e "s#TUNEBENCH_CACHE=[^ ]*#TUNEBENCH_CACHE=$PWD/.cache-h$i#" "$d/command.sh" > "$d/history.sh"
        timeout --signal=INT --kill-after=30 "$budget" bash "$d/history.sh" > "$out/mh-$id.log" 2>&1 &
        i=$((i + 1))
      done
      wait
      echo "$(date +%T) am/h: $(ls "$out"/mh-*.json 2>/dev/null | wc -l) histories" | tee -a "$out/step.log" ;;
  *) echo "unknown STEP $step" >&2; exit 2 ;;
esac
for f in am/*/*/stderr.log; do tail -n 40 "$f" > "${f%.log}.tail"; done 2>/dev/null
cp am/*.log "$out/" 2>/dev/null
tar -czf "$out/am-$step.tgz" --exclude=trainer_output --exclude='*.log' --exclude='*.pickle' --exclude='*.json.gz' am
exit 0
