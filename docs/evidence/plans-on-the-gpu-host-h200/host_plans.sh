#!/usr/bin/env bash
# Issue AB on the GPU host (nvidia-h200-x2), the torch of the GPU image (2.11), in device calls that end inside 600 s:
#   STEP=plans bash docs/evidence/plans-on-the-gpu-host-h200/host_plans.sh  # the plan made here (CUDA visible), again with CUDA
#                                                         # hidden, each compared cell by cell with cpu_plan.csv
#                                                         # (made on a CPU host, torch 2.13, transformers 5.17)
#   STEP=runs SCENARIOS="hp-sharded" bash ...             # the rows run with --plan (measured peaks), the run's
#                                                         # pred_* compared with cpu_plan.csv, then plan vs measured;
#                                                         # one call each: hp-sharded (12 rows on 2 GPUs), then
#                                                         # "hp-one-gpu hp-14b hp-14b-one-gpu", then
#                                                         # "hp-fp32-gqa hp-bf16-gqa"
#   STEP=bounds SCENARIOS="hb-compile-relu2" bash ...     # items 3 and 4 (scenarios-bounds.yaml, 1 GPU): run with
#                                                         # --plan, peaks.md's plan and bound against the measured
#                                                         # peak; then SCENARIOS="hb-liger" (liger-kernel installed)
# Scenarios: scenarios-host-plans.yaml beside this file. Carry .whl as for docs/evidence/gpu-counts-h100/gpu_counts.sh when the image
# lacks trl/datasets. $OUT gets the plan and results folders (trainer output left out), compare-*.txt, peaks.md.
set -uo pipefail
step=${STEP:?STEP=plans|runs}
out=${OUT:-/tmp/hp-out}
here=docs/evidence/plans-on-the-gpu-host-h200
matrix=(--scenarios_config_path "$here/scenarios-host-plans.yaml" --num_gpus_matrix 1 2 --plan_device "NVIDIA H200")
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false
[ -d .whl ] && rm -rf .site/.whl && python3 -m pip install -q --no-index --no-deps --target .site/.whl .whl/*.whl && \
  export PYTHONPATH="$PWD/.site/.whl"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  | tee "$out/versions.txt"
case $step in
  plans)
    python3 benchmark.py plan "${matrix[@]}" --results_output_path "$out/plan-gpu-host" > "$out/plan-gpu-host.log" 2>&1
    CUDA_VISIBLE_DEVICES= python3 benchmark.py plan "${matrix[@]}" --results_output_path "$out/plan-cuda-hidden" \
      > "$out/plan-cuda-hidden.log" 2>&1
    python3 "$here/compare_plans.py" "$here/cpu_plan.csv" "$out/plan-gpu-host/plan.csv" \
      "$out/plan-cuda-hidden/plan.csv" | tee "$out/compare-plans.txt"
    ;;
  runs)
    timeout 540 python3 benchmark.py "${matrix[@]}" --device cuda --plan --results_output_path "$out/runs" \
      --run_only_scenarios ${SCENARIOS:?SCENARIOS=the scenarios of this call} > "$out/runs.log" 2>&1
    python3 "$here/compare_plans.py" --run "$here/cpu_plan.csv" "$out/runs/raw_summary.csv" \
      | tee "$out/compare-run.txt"
    python3 "$here/peaks.py" "$here/cpu_plan.csv" "$out/runs/raw_summary.csv" > "$out/peaks.md"
    find "$out/runs" -name trainer_output -prune -exec rm -rf {} +
    # the device tool brings back a bounded number of files: the CSVs as they are, the experiment folders packed
    cp "$out/runs/raw_summary.csv" "$out/runs-raw_summary.csv"
    tar czf "$out/runs-experiments.tar.gz" -C "$out/runs" --exclude='*.pt' . && rm -rf "$out/runs"
    ;;
  bounds)
    # the run's own plan (--plan: pred_* in its rows, made on this host) against its measured peaks
    timeout 540 python3 benchmark.py --scenarios_config_path "$here/scenarios-bounds.yaml" --plan_device "NVIDIA H200" \
      --run_only_scenarios ${SCENARIOS:?SCENARIOS=hb-compile-relu2 or hb-liger} --device cuda --plan \
      --results_output_path "$out/runs-bounds" > "$out/runs-bounds.log" 2>&1
    python3 "$here/peaks.py" "$out/runs-bounds/raw_summary.csv" "$out/runs-bounds/raw_summary.csv" > "$out/peaks.md"
    find "$out/runs-bounds" -name trainer_output -prune -exec rm -rf {} +
    ;;
esac
