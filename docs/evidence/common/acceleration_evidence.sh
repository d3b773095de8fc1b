#!/usr/bin/env bash
# Issue R evidence on one GPU: bash docs/evidence/common/acceleration_evidence.sh RESULTS SCENARIO [SCENARIO...]
# Runs the named scenarios of docs/evidence/acceleration-h100/scenarios-acceleration.yaml (or $SCENARIOS) into RESULTS (resuming what is there),
# with the memory prediction, then copies the CSVs and every experiment's small files (spec.json,
# results.json, steps.json, scan.json, the end of stderr.log) to $OUT/<RESULTS name>.tgz.
set -uo pipefail
results=$1; shift
# BUDGET seconds (default 520) bound the run inside one device call: then Ctrl-C, whose exit keeps every
# finished experiment in the CSVs, and the same command resumes.
timeout --signal=INT "${BUDGET:-520}" python benchmark.py --scenarios_config_path "${SCENARIOS:-docs/evidence/acceleration-h100/scenarios-acceleration.yaml}" --results_output_path "$results" \
  --run_only_scenarios "$@" --plan --skip_predicted_oom --timeout 900
status=$?
if [ -n "${OUT:-}" ]; then
  for f in "$results"/*/stderr.log; do tail -n 40 "$f" > "${f%.log}.tail"; done 2>/dev/null
  tar -czf "$OUT/$(basename "$results").tgz" --exclude=trainer_output --exclude='*.log' --exclude='*.pickle' \
    --exclude='*.json.gz' "$results"
fi
exit $status
