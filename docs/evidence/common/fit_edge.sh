#!/usr/bin/env bash
# Issue T groundwork: bash docs/evidence/common/fit_edge.sh OUT SCENARIOS "BATCHES" [SCENARIO-NAME]
# Micro-batches around the predicted edge of one GPU, with the default caching allocator and/or with expandable
# segments (MODES), each with --plan: every row holds the predicted allocated peak, the measured allocated and reserved
# peaks, and whether it ran out. E.g. docs/evidence/common/fit_edge.sh out docs/evidence/fit-edge-h100/scenarios-fit-edge.yaml "10 11 12 13"
set -uo pipefail
out=$1 scenarios=$2 batches=$3
only=()
[ $# -ge 4 ] && only=(--run_only_scenarios "$4")
# MODES: "default" (PyTorch's caching allocator as it ships) and/or "expandable" (the harness's own default since
# issue T: expandable segments); both unless MODES says otherwise.
for mode in ${MODES:-default expandable}; do
  if [ "$mode" = expandable ]; then unset PYTORCH_CUDA_ALLOC_CONF; else export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False; fi
  python benchmark.py --scenarios_config_path "$scenarios" --results_output_path "$out/$mode" "${only[@]}" \
    --effective_batch_size_matrix $batches --plan --timeout 600
done
if [ -n "${OUT:-}" ]; then
  tar -czf "$OUT/$(basename "$out").tgz" --exclude=trainer_output --exclude='*.log' "$out"
fi
