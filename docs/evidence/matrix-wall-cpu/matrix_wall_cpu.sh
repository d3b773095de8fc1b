#!/usr/bin/env bash
# Issue AE on the CPU: the default CPU scenario set (`python benchmark.py`), cold (a fresh results folder and a fresh
# TUNEBENCH_CACHE each time), run alternately from an older commit (BEFORE, default d138d00: the preload server
# started when the first experiment needed it) and from this tree (the command line spawns it as the run begins),
# PAIRS times each, in one shell, so that both sides share the machine's state; prints every wall and the ratio of
# the medians. Usage: bash docs/evidence/matrix-wall-cpu/matrix_wall_cpu.sh > docs/evidence/matrix-wall-cpu/walls.txt
set -euo pipefail
before_ref=${BEFORE:-d138d00}
pairs=${PAIRS:-3}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/before" && git archive "$before_ref" | tar -x -C "$scratch/before"
echo "before: $before_ref ($(git log -1 --format=%s "$before_ref" | cut -c1-60)); after: $(git rev-parse --short HEAD)"
echo "python: $(command -v python) ($(python -c 'import torch, transformers, trl; print("torch", torch.__version__, "transformers", transformers.__version__, "trl", trl.__version__)' 2>/dev/null))"
echo "cores: $(nproc)"
for pair in $(seq "$pairs"); do
  for side in before after; do
    dir=$PWD && [ "$side" = before ] && dir=$scratch/before
    start=$(date +%s.%N)
    (cd "$dir" && TUNEBENCH_CACHE="$scratch/cache-$side-$pair" python benchmark.py \
      --results_output_path "$scratch/results-$side-$pair" > "$scratch/$side-$pair.log" 2>&1)
    end=$(date +%s.%N)
    rows=$(python -c "import pandas; print((pandas.read_csv('$scratch/results-$side-$pair/raw_summary.csv').status == 'ok').sum())")
    echo "$side $pair wall_s $(python -c "print(round($end - $start, 2))") ok_rows $rows"
  done
done | tee "$scratch/walls"
python - "$scratch/walls" <<'PY'
import statistics, sys
walls = {"before": [], "after": []}
for line in open(sys.argv[1]):
    side, _, _, wall, *_ = line.split()
    walls[side].append(float(wall))
before, after = statistics.median(walls["before"]), statistics.median(walls["after"])
print(f"median before {before:.2f} s, after {after:.2f} s: after / before = {after / before:.3f}")
PY
