#!/usr/bin/env bash
# Scanner checks on one GPU: allocator API costs, the GPU-marked tests, overhead (ABBA) and fidelity case a.
# Usage: bash docs/evidence/gpu/scanner_check.sh OUT_DIR [fidelity cases, default "a"]
set -u
out=${1:?OUT_DIR}; cases=${2:-a}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 - <<'PY' 2>&1 | tee "$out/api_costs.txt"
import time, torch
d = torch.cuda.current_device()
x = torch.empty(1 << 20, device="cuda")
n = 2000
t = time.perf_counter()
for _ in range(n):
    torch._C._cuda_memoryStats(d)
print(f"_cuda_memoryStats: {1e6 * (time.perf_counter() - t) / n:.2f} us/call")
t = time.perf_counter()
for i in range(n):
    torch._C._cuda_setMemoryMetadata(str(i))
print(f"_cuda_setMemoryMetadata: {1e6 * (time.perf_counter() - t) / n:.2f} us/call")
torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=100000,
                                          clear_history=True, skip_actions=["free_completed", "snapshot"])
torch._C._cuda_setMemoryMetadata("7")
ys = []
t = time.perf_counter()
for _ in range(n):
    ys.append(torch.empty(4096, device="cuda"))
ys.clear()
rec = time.perf_counter() - t
s = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
tr = s["device_traces"][d]
print("trace entries:", len(tr), "keys:", sorted(tr[0].keys()), "metadata:", tr[0].get("user_metadata"))
t = time.perf_counter()
for _ in range(n):
    ys.append(torch.empty(4096, device="cuda"))
ys.clear()
print(f"alloc+free with history: {1e6 * rec / n:.2f} us, without: {1e6 * (time.perf_counter() - t) / n:.2f} us")
PY
python3 -m pytest -q -p no:cacheprovider -m gpu tests/scanner/test_memory_probe_cuda.py 2>&1 | tail -15 | tee "$out/pytest_gpu.txt"
python3 docs/evidence/gpu/scanner_overhead.py --out "$out/overhead" --pairs 6 --steps 40 --scan-step 20 2>&1 | tail -40
for c in $cases; do
  python3 docs/evidence/gpu/scanner_fidelity.py --case "$c" --steps 3 --out "$out/fidelity-$c" 2>&1 | tail -60
done
