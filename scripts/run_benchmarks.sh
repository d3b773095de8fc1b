#!/usr/bin/env bash
# GPU-matrix wrapper around benchmark.py (the fms-acceleration habit: positional matrices + environment flags).
#   bash scripts/run_benchmarks.sh [NUM_GPUS_MATRIX] [EFFECTIVE_BS_MATRIX] [RESULT_DIR] [SCENARIOS_CONFIG] [SCENARIOS_FILTER]
# e.g. bash scripts/run_benchmarks.sh "1 2" "4 8" results scenarios.yaml standard-peft
# Environment: DRY_RUN=true, NO_DATA_PROCESSING=true, NO_OVERWRITE=true (keep RESULT_DIR's earlier results and
#              resume), MEMORY_LOGGING=nvidia|huggingface|scanner|all (default scanner).
# Without GPUs (no working nvidia-smi) and no SCENARIOS_CONFIG, benchmark.py runs the CPU scenario set.
#
# This script deletes nothing and creates nothing itself: benchmark.py decides what it may write (a new, empty
# or tunebench-made RESULT_DIR; anything else is refused with exit 2) and, unless NO_OVERWRITE or DRY_RUN is
# set, passes --overwrite, which removes only the experiment folders and CSVs of earlier tunebench runs there.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then has_gpu=true; else has_gpu=false; fi
if [[ "$has_gpu" == true ]]; then default_gpus="1"; default_bs="8"; else default_gpus="1"; default_bs=""; fi

num_gpus_matrix="${1:-$default_gpus}"
effective_bs_matrix="${2:-$default_bs}"
result_dir="${3:-results}"
scenarios_config="${4:-}"
scenarios_filter="${5:-}"
memory_logging="${MEMORY_LOGGING:-scanner}"

is_true() { [[ "${1,,}" =~ ^(1|true|yes|y)$ ]]; }

args=(--results_output_path "$result_dir" --memory_logging "$memory_logging")
read -r -a gpus <<< "$num_gpus_matrix"
[[ ${#gpus[@]} -gt 0 ]] && args+=(--num_gpus_matrix "${gpus[@]}")
read -r -a bs <<< "$effective_bs_matrix"
[[ ${#bs[@]} -gt 0 ]] && args+=(--effective_batch_size_matrix "${bs[@]}")
if [[ -n "$scenarios_config" ]]; then
  # Relative to where the script was called from; else to the repository (`... results scenarios.yaml`).
  [[ -e "$scenarios_config" || "$scenarios_config" == /* ]] || scenarios_config="$repo_root/$scenarios_config"
  args+=(--scenarios_config_path "$scenarios_config")
fi
if [[ -n "$scenarios_filter" ]]; then read -r -a filter <<< "$scenarios_filter"; args+=(--run_only_scenarios "${filter[@]}"); fi
if is_true "${DRY_RUN:-false}"; then
  args+=(--dry_run)
elif ! is_true "${NO_OVERWRITE:-false}"; then
  args+=(--overwrite)
fi
is_true "${NO_DATA_PROCESSING:-false}" && args+=(--no_data_processing)

exec python3 "$repo_root/benchmark.py" "${args[@]}"
