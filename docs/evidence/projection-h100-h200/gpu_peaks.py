"""The GPU's own rates, measured where the evidence runs: bf16 matmul FLOP/s, copy and elementwise bandwidth.

`python3 docs/evidence/projection-h100-h200/gpu_peaks.py OUT.json` (about 15 s on an H100). Each figure is the best of
five timed repetitions after warm-up, on random data: an 8192³ bf16 matrix product (2·8192³ FLOP), a device-to-device
copy of 2 GiB (bytes read + written), a bf16 add of two 1 GiB tensors into a third (3 GiB moved), the streaming rate of
PyTorch's unrolled (a bf16 → float32 cast) and strided (a broadcast multiply) elementwise paths at 2^25
elements, with the kernels they ran, and the duration of
an empty kernel (a 1-element add) back to back; the GPU-side (CUPTI) duration of such a kernel; and the host's
own speed: host time per launch of that kernel and per CPU op (20 000 calls each), and per kernel of a host-bound
training step (a 4-layer, 64-wide Llama of transformers: forward, backward, AdamW; the host work a fine-tuning
step does: module calls, autograd, dispatch, launches). The projection's GPU table cites these figures.
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch


def timed(fn, repeats: int = 5, inner: int = 10) -> float:
    """Best mean seconds of one call over `repeats` CUDA-event timings of `inner` calls each (after warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / inner)
    return best


def matmul_seconds(n: int = 8192) -> float:
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return timed(lambda: a @ b)


def copy_seconds() -> float:
    src = torch.randn(2**30, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    dst = torch.empty_like(src)
    return timed(lambda: dst.copy_(src))


def add_seconds() -> float:
    x, y = (torch.randn(2**29, device="cuda", dtype=torch.bfloat16) for _ in range(2))  # 1 GiB each
    out = torch.empty_like(x)
    return timed(lambda: torch.add(x, y, out=out))


# PyTorch's three elementwise code paths stream memory at different rates: vectorized kernels (16-byte loads) at
# the copy's bandwidth, the unrolled one (a dtype cast: scalar loads, conversions) and the generic strided
# TensorIterator kernel (a broadcast operand) below it, each bound by its own loads in flight rather than by the
# memory. Measured at the sizes a fine-tuning step runs (2^25 elements: a [8, 1024, 4096] activation).
PATH_ELEMENTS = 2**25


def cast_copy_seconds() -> float:
    # bf16 -> float32: the unrolled kernel with a casting load (float32 -> bf16 has a vectorized kernel of its own)
    src = torch.randn(PATH_ELEMENTS, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty(PATH_ELEMENTS, device="cuda", dtype=torch.float32)
    return timed(lambda: dst.copy_(src), inner=50)


def broadcast_mul_seconds() -> float:
    x = torch.randn(PATH_ELEMENTS // 4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    return timed(lambda: torch.mul(x, w, out=out), inner=50)


def kernel_names() -> dict:
    """The kernels the two path figures ran (CUPTI names), so the table's figures can be matched to a trace's."""
    src = torch.randn(PATH_ELEMENTS, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty(PATH_ELEMENTS, device="cuda")
    x = torch.randn(PATH_ELEMENTS // 4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    names = {}
    for key, fn in (("cast_copy_kernel", lambda: dst.copy_(src)), ("broadcast_mul_kernel", lambda: x * w)):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        names[key] = kernels[0][:160] if kernels else None
    return names


def empty_kernel_seconds() -> float:
    tiny = torch.zeros(1, device="cuda")
    return timed(lambda: tiny.add_(1), inner=1000)


def host_seconds_per_call(add_, calls: int = 20000) -> float:
    """Host time per call of a tensor's `add_(1)` (a launch, or a CPU op): the host's own speed, which bounds
    host-bound steps."""
    import time

    for _ in range(100):
        add_(1)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        add_(1)
    elapsed = time.perf_counter() - started
    torch.cuda.synchronize()
    return elapsed / calls


def host_step_us(steps: int = 40, repeats: int = 5) -> tuple[float, int]:
    """(host µs per kernel, kernels per step) of a training step too small for the GPU to matter: the time of
    `steps` back-to-back steps over the kernels they launch, the median of `repeats`. Its ratio between two machines
    is the ratio of their hosts' speed at the work a host-bound fine-tuning step does (a single launch or CPU op
    misses the Python and autograd around it: they moved 0.93x and 1.6x between two machines whose profiled host
    timelines of the same fine-tuning steps moved 1.1-1.5x)."""
    import statistics
    import time

    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=256, max_position_embeddings=64)
    model = LlamaForCausalLM(config).to("cuda", dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, 256, (1, 32), device="cuda")

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) / steps)
    return statistics.median(times) / max(kernels, 1) * 1e6, kernels


def tiny_kernel_gpu_us() -> float:
    """Median duration the GPU itself reports (CUPTI, read from the chrome trace) for a 1-element add: a kernel's
    fixed cost on this GPU."""
    import tempfile

    tiny = torch.zeros(1, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(200):
            tiny.add_(1)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        prof.export_chrome_trace(handle.name)
        events = json.load(open(handle.name))["traceEvents"]
    durations = sorted(float(e["dur"]) for e in events if isinstance(e, dict) and e.get("cat") == "kernel")
    return durations[len(durations) // 2] if durations else float("nan")


def measure() -> dict:
    n = 8192
    figures = {
        "bf16_matmul_tflops": lambda: 2 * n**3 / matmul_seconds(n) / 1e12,
        "copy_tb_per_s": lambda: 2 * 2**31 / copy_seconds() / 1e12,
        "elementwise_add_tb_per_s": lambda: 3 * 2**30 / add_seconds() / 1e12,
        "cast_copy_tb_per_s": lambda: 6 * PATH_ELEMENTS / cast_copy_seconds() / 1e12,  # 2-byte read, 4-byte write
        "broadcast_mul_tb_per_s": lambda: 4 * PATH_ELEMENTS / broadcast_mul_seconds() / 1e12,  # 2 read, 2 written
        "empty_kernel_us": lambda: empty_kernel_seconds() * 1e6,
        "tiny_kernel_gpu_us": tiny_kernel_gpu_us,
        "host_launch_us": lambda: host_seconds_per_call(torch.zeros(1, device="cuda").add_) * 1e6,
        "host_cpu_op_us": lambda: host_seconds_per_call(torch.zeros(1).add_) * 1e6,
    }
    result: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "method": "best of 5 CUDA-event timings after 3 warm-ups, random data "
                              "(docs/evidence/projection-h100-h200/gpu_peaks.py)"}
    try:
        result.update(kernel_names())
    except Exception as exc:  # the names document the figures; their absence must not lose them
        result["kernel_names_error"] = repr(exc)[:300]
    try:
        result["host_step_us"], result["host_step_kernels"] = host_step_us()
    except Exception as exc:
        result["host_step_us"], result["host_step_us_error"] = None, repr(exc)[:300]
    for name, figure in figures.items():
        try:  # one failing figure must not lose the others
            result[name] = figure()
        except Exception as exc:
            result[name] = None
            result[f"{name}_error"] = repr(exc)[:300]
        torch.cuda.empty_cache()
    return result


def smi() -> str:
    query = "name,power.limit,clocks.max.sm,clocks.max.mem,memory.total,driver_version"
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"], capture_output=True,
                              text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi failed: {exc}"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    result = measure() if torch.cuda.is_available() else {"note": "no CUDA device"}
    result["nvidia_smi"] = smi()
    with open(sys.argv[1], "w") as handle:
        json.dump(result, handle, indent=2)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
