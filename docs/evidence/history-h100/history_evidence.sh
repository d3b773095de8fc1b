#!/usr/bin/env bash
# GPU evidence of `history check` (docs/evidence/history-h100.md): runs of the default set on one GPU, run
# $COTENANT_RUN beside a second process using a few percent of the GPU (docs/evidence/history-h100/cotenant.py), each run added to
# the store and checked as it lands. Splittable across device calls: each call runs the indices in RUNS, and first
# adds the runs of earlier calls whose runs-*.tgz are in $PREVIOUS (carried in an ignored folder).
#
#   RUNS="1 2 3" docs/evidence/history-h100/history_evidence.sh "$OUT"
#   RUNS="4 5" PREVIOUS=.hist-prev docs/evidence/history-h100/history_evidence.sh "$OUT"      # .hist-prev: the first call's files
#
# Writes into OUT (6 files at most): runs-<indices>.tgz (each run's CSVs and experiment folders, without logs or
# trainer output), history.duckdb (the store), checks.txt (history check after every run, with its exit code),
# harness.log (the last lines of each run's log), cotenant.log, gpus.txt. Needs DuckDB and ruptures wheels in
# $WHEELS (default .whl-v). For a CPU dry run of the logic: SCENARIOS=scenarios-cpu.yaml DEVICE=cpu.
set -euo pipefail
out=${1:?usage: RUNS="1 2" $0 OUT}
runs=${RUNS:-"1 2 3 4 5"}
cotenant_run=${COTENANT_RUN:-4}
wheels=${WHEELS:-.whl-v}
previous=${PREVIOUS:-}
work=${WORK:-$(mktemp -d /tmp/history-evidence.XXXXXX)}
python=${PYTHON:-python3}
mkdir -p "$out" "$work"
out=$(cd "$out" && pwd)
store="$out/history.duckdb"
if ! "$python" -c "import duckdb, ruptures" 2>/dev/null; then
  "$python" -m pip install -q --no-index --no-deps "$wheels"/*.whl
fi
"$python" -c "import duckdb, ruptures; print('duckdb', duckdb.__version__, 'ruptures', ruptures.__version__)"
{ echo "host $(hostname)"; nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,power.limit,clocks.max.sm --format=csv; } > "$out/gpus.txt" 2>&1 || true
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory,process_name --format=csv >> "$out/gpus.txt" 2>&1 || true

# The default set's non-slow scenarios on one GPU; without bitsandbytes, all but the quantized pair.
scenario_args=()
[ -n "${SCENARIOS:-}" ] && scenario_args+=(--scenarios_config_path "$SCENARIOS")
[ -n "${DEVICE:-}" ] && scenario_args+=(--device "$DEVICE")
if ! "$python" -c "import bitsandbytes" 2>/dev/null && [ -z "${SCENARIOS:-}" ]; then
  scenario_args+=(--run_only_scenarios full-finetuning,full-finetuning-padded,standard-peft,prompt-tuning)
  echo "bitsandbytes is not installed: accelerated-peft-bnb left out" | tee -a "$out/harness.log"
fi

check() {  # history check after run $1, its output and exit code appended to checks.txt
  set +e
  "$python" benchmark.py history check --store "$store" > "$work/check.txt" 2>&1
  local code=$?
  set -e
  { echo "=== history check after run $1 (exit $code)"; cat "$work/check.txt"; } >> "$out/checks.txt"
  echo "history check after run $1: exit $code"
}

if [ -n "$previous" ]; then  # the runs of earlier calls, in their order
  for archive in "$previous"/runs-*.tgz; do
    tar xzf "$archive" -C "$work"
  done
  for folder in $(ls -d "$work"/run* 2>/dev/null | sort -V); do
    "$python" benchmark.py history add "$folder" --store "$store" --label "$(basename "$folder")"
  done
  [ -f "$previous/checks.txt" ] && cat "$previous/checks.txt" >> "$out/checks.txt"
fi

cotenant_pid=
stop_cotenant() {
  if [ -n "$cotenant_pid" ]; then
    kill "$cotenant_pid" 2>/dev/null || true
    wait "$cotenant_pid" 2>/dev/null || true
    cotenant_pid=
  fi
}
trap stop_cotenant EXIT

for k in $runs; do
  results="$work/run$k"
  if [ "$k" = "$cotenant_run" ]; then
    # 12 ms of 4096² bf16 matmuls, then 36 ms asleep (COTENANT_ARGS to change): 3 ms in 43 (8.5 % of the wall time
    # busy) slowed the default set's steps by only ~2 % on an H100, below compare's 5 % minimum effect
    "$python" docs/evidence/history-h100/cotenant.py --seconds 1200 ${COTENANT_ARGS:---busy_ms 12 --idle_ms 36} >> "$out/cotenant.log" 2>&1 &
    cotenant_pid=$!
    sleep 15  # its CUDA context is up before the first experiment's baseline
    echo "run $k: cotenant pid $cotenant_pid" | tee -a "$out/harness.log"
  fi
  started=$(date +%s)
  set +e
  "$python" benchmark.py "${scenario_args[@]}" --results_output_path "$results" --log_level INFO > "$work/run$k.log" 2>&1
  code=$?
  set -e
  stop_cotenant
  echo "run $k: benchmark.py exit $code in $(( $(date +%s) - started )) s" | tee -a "$out/harness.log"
  tail -n 25 "$work/run$k.log" >> "$out/harness.log"
  "$python" benchmark.py history add "$results" --store "$store" --label "run$k"
  check "$k"
done

# Each run's CSVs and experiment folders as the store needs them (no logs, no trainer output).
indices=$(echo $runs | tr ' ' '-')
tar czf "$out/runs-$indices.tgz" -C "$work" --exclude='*.log' --exclude='trainer_output' --exclude='nvidia_smi.csv' \
  $(for k in $runs; do echo "run$k"; done)
ls -la "$out"
