#!/usr/bin/env bash
# Issue X, on a CPU host before the device call: every plan of the acceleration-memory evidence.
#   bash docs/evidence/acceleration-memory-h100/acceleration_memory_plans.sh [OUT]   (OUT: docs/evidence/acceleration-memory-h100)
# Writes OUT/plan/plan.csv (the measured rows' predictions for an H100), OUT/fit-map/fit_map.csv (the sweeps' largest
# micro-batches) and docs/evidence/acceleration-memory-h100/scenarios-acceleration-sweeps.yaml (each sweep's largest micro-batch and the next,
# which the device runs: docs/evidence/acceleration-memory-h100/acceleration_memory.sh STEP=c). Compiled rows take a fake compilation each:
# ~1 min for a 1B, ~4 min for the 8B on 2 cores; the whole script ~40 min.
set -euo pipefail
out=${1:-docs/evidence/acceleration-memory-h100}
gpu="NVIDIA H100 80GB HBM3"
scenarios=docs/evidence/acceleration-memory-h100/scenarios-acceleration-memory.yaml
mkdir -p "$out"
python benchmark.py plan --plan_device "$gpu" --scenarios_config_path "$scenarios" \
  --run_only_scenarios am-1b,am-unseen,am-8b,am-autotune-1b,am-autotune --results_output_path "$out/plan"
python benchmark.py plan --plan_device "$gpu" --scenarios_config_path "$scenarios" \
  --run_only_scenarios am-autotune-1b,am-autotune,am-autotune-2,am-autotune-3 --results_output_path "$out/plan-autotune"
python benchmark.py plan --fit_map --plan_device "$gpu" --scenarios_config_path "$scenarios" \
  --run_only_scenarios am-sweep --results_output_path "$out/fit-map"
python docs/evidence/acceleration-memory-h100/acceleration_memory_doc.py sweeps "$out/fit-map/fit_map.csv" "$scenarios" \
  docs/evidence/acceleration-memory-h100/scenarios-acceleration-sweeps.yaml
