#!/usr/bin/env bash
# GPU-matrix wrapper around benchmark.py.
#   bash scripts/run_benchmarks.sh [NUM_GPUS_MATRIX] [EFFECTIVE_BS_MATRIX] [RESULT_DIR] [SCENARIOS_CONFIG] [SCENARIOS_FILTER]
# e.g. bash scripts/run_benchmarks.sh "1 2" "4 8" results scenarios.yaml standard-peft
# Environment: DRY_RUN=true, NO_DATA_PROCESSING=true, NO_OVERWRITE=true (keep RESULT_DIR and resume),
#              MEMORY_LOGGING=nvidia|huggingface|scanner|all (default scanner).
# Without GPUs (no working nvidia-smi) and no SCENARIOS_CONFIG, benchmark.py runs the CPU scenario set.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
marker=".tunebench-results"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then has_gpu=true; else has_gpu=false; fi
if [[ "$has_gpu" == true ]]; then default_gpus="1"; default_bs="8"; else default_gpus="1"; default_bs=""; fi

num_gpus_matrix="${1:-$default_gpus}"
effective_bs_matrix="${2:-$default_bs}"
result_dir="${3:-results}"
scenarios_config="${4:-}"
scenarios_filter="${5:-}"
memory_logging="${MEMORY_LOGGING:-scanner}"

is_true() { [[ "${1,,}" =~ ^(1|true|yes|y)$ ]]; }

# Refuse result dirs whose deletion would be a disaster, before anything else happens.
abs_result_dir="$(realpath -m -- "$result_dir")"
for forbidden in / "$HOME" "$repo_root" "$(realpath -m -- "$repo_root/..")"; do
  if [[ "$abs_result_dir" == "$(realpath -m -- "$forbidden")" ]]; then
    echo "run_benchmarks.sh: RESULT_DIR '$result_dir' is '$forbidden'; choose a dedicated folder such as 'results'" >&2
    exit 2
  fi
done

if [[ -e "$abs_result_dir" ]] && ! is_true "${NO_OVERWRITE:-false}" && ! is_true "${DRY_RUN:-false}"; then
  if [[ -f "$abs_result_dir/$marker" ]]; then
    echo "removing previous results in $abs_result_dir (set NO_OVERWRITE=true to keep them and resume)"
    rm -rf -- "$abs_result_dir"
  else
    echo "run_benchmarks.sh: $abs_result_dir exists but was not created by tunebench (no $marker); refusing to delete it." >&2
    echo "  fix: choose another RESULT_DIR, remove it yourself, or set NO_OVERWRITE=true to write into it" >&2
    exit 2
  fi
fi
mkdir -p -- "$abs_result_dir"
[[ -f "$abs_result_dir/$marker" ]] || echo "created by scripts/run_benchmarks.sh" > "$abs_result_dir/$marker"
python3 -m pip freeze > "$abs_result_dir/pip-freeze.txt" 2>/dev/null || true

args=(--results_output_path "$abs_result_dir" --memory_logging "$memory_logging")
read -r -a gpus <<< "$num_gpus_matrix"
[[ ${#gpus[@]} -gt 0 ]] && args+=(--num_gpus_matrix "${gpus[@]}")
read -r -a bs <<< "$effective_bs_matrix"
[[ ${#bs[@]} -gt 0 ]] && args+=(--effective_batch_size_matrix "${bs[@]}")
[[ -n "$scenarios_config" ]] && args+=(--scenarios_config_path "$scenarios_config")
if [[ -n "$scenarios_filter" ]]; then read -r -a filter <<< "$scenarios_filter"; args+=(--run_only_scenarios "${filter[@]}"); fi
is_true "${DRY_RUN:-false}" && args+=(--dry_run)
is_true "${NO_DATA_PROCESSING:-false}" && args+=(--no_data_processing)

cd "$repo_root"
exec python3 benchmark.py "${args[@]}"
