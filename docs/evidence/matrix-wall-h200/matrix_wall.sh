#!/usr/bin/env bash
# Issue AE on one H200 (device kind nvidia-h200, carrying .whl with the slim bitsandbytes wheel, as a QLoRA user
# has it installed): the default GPU scenario set (`python benchmark.py --log_nvidia_smi`), cold (a fresh results
# folder and a fresh TUNEBENCH_CACHE each), run twice in the same call:
#   before: this tree with tunebench/experiment/preloaded.py as it was before the preload server held bitsandbytes
#           deferred (preloaded_before.py beside this file: each experiment imported PEFT, TRL and bitsandbytes);
#   after:  this tree as it is.
# The page cache is warmed first (one import of the stack), so neither side pays cold disk reads the other does not.
# $OUT gets each side's raw_summary.csv, log head and tail and wall seconds (walls.txt), and versions.txt.
set -uo pipefail
out=${OUT:-/tmp/matrix-wall-out}
here=docs/evidence/matrix-wall-h200
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false
rm -rf .site/w && python3 -m pip install -q --no-index --no-deps --no-compile --target "$PWD/.site/w" .whl/*.whl
export PYTHONPATH="$PWD/.site/w"
python3 -c "import torch, transformers, trl, peft, bitsandbytes; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__, 'bitsandbytes', bitsandbytes.__version__)" \
  2>/dev/null | tee "$out/versions.txt"
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv > "$out/gpus.csv" 2>&1
before=/tmp/tunebench-before
rm -rf "$before" && mkdir -p "$before"
if [ -n "${BEFORE_TAR:-}" ]; then  # a whole older commit: git archive -o .whl/before-<ref>.tar.gz <ref> benchmark.py \
  tar -xzf "$BEFORE_TAR" -C "$before"  #   tunebench scanner accelerate.yaml defaults.yaml framework_configs.yaml scenarios*.yaml
else  # this tree with the preload server of before the deferral (the first call, 2026-11-28)
  tar --exclude=./.site --exclude=./docs --exclude=./.whl -cf - . | tar -xf - -C "$before"
  cp "$here/preloaded_before.py" "$before/tunebench/experiment/preloaded.py"
fi
for side in ${SIDES:-before after}; do
  dir=$PWD && [ "$side" = before ] && dir=$before
  rm -rf "/tmp/results-$side" "/tmp/cache-$side"
  start=$(date +%s.%N)
  (cd "$dir" && TUNEBENCH_CACHE="/tmp/cache-$side" timeout --signal=INT 280 python3 benchmark.py --log_nvidia_smi \
    --results_output_path "/tmp/results-$side" > "$out/$side.log" 2>&1)
  code=$?
  end=$(date +%s.%N)
  echo "$side exit $code wall $(python3 -c "print(round($end - $start, 1))") s" | tee -a "$out/walls.txt"
  cp "/tmp/results-$side/raw_summary.csv" "$out/raw_summary-$side.csv" 2>/dev/null
  head -c 20000 "$out/$side.log" > "$out/$side-head.log"
  tail -c 20000 "$out/$side.log" > "$out/$side-tail.log" && rm -f "$out/$side.log"
done
