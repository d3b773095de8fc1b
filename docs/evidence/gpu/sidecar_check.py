"""GPU check of the nvidia-smi sidecar: calibrated peak vs torch max_memory_reserved + CUDA context, per GPU.

Run on a GPU machine from the repo root:
    python docs/evidence/gpu/sidecar_check.py [--num-gpus 2] [--alloc-gib 8] [--backend nvml]
The harness side (this process) never touches CUDA; a worker subprocess plays the experiment: on cuda:i it
warms up cuBLAS (lazily loaded kernels count as context), measures the CUDA context as
nvidia-smi used − baseline − torch reserved, then holds (i+1)·alloc_gib GiB while matmuls run, so each GPU
has a distinct, known peak and a wrong CUDA → nvidia-smi mapping cannot go unnoticed. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tunebench.telemetry.gpus import query_gpus, resolve_visible_gpus, run_nvidia_smi  # noqa: E402
from tunebench.telemetry.sidecar import NvidiaSmiSidecar  # noqa: E402

logger = logging.getLogger(__name__)
MIB = 2**20


def used_mib(uuid: str) -> float:
    out = run_nvidia_smi(["--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", uuid])
    if out is None:
        raise RuntimeError(f"nvidia-smi could not read memory.used of {uuid}")
    return float(out.strip())


def worker(args: argparse.Namespace) -> None:
    """The 'experiment': allocate a known amount per GPU and report torch's and the driver's view."""
    uuids = args.uuids.split(",")
    # Our own nvidia-smi baseline, taken before CUDA is initialised, so that the context below is measured
    # with one instrument whatever backend the sidecar uses (NVML v1 `used` includes driver-reserved memory).
    baselines = [used_mib(u) for u in uuids]
    import torch

    report = []
    for i, uuid in enumerate(uuids):
        dev = torch.device("cuda", i)
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        (a @ a).sum().item()  # create the cuBLAS handle/workspace and load its kernels before measuring
        torch.cuda.synchronize(dev)
        reserved = torch.cuda.memory_reserved(dev) / MIB
        context = used_mib(uuid) - baselines[i] - reserved
        props = torch.cuda.get_device_properties(dev)
        torch_uuid = str(getattr(props, "uuid", ""))
        report.append(
            {
                "cuda_index": i,
                "nvidia_smi_uuid": uuid,
                "torch_uuid": torch_uuid,
                "uuid_match": uuid.removeprefix("GPU-") == torch_uuid.removeprefix("GPU-")
                if torch_uuid
                else None,
                "name": props.name,
                "context_mib": context,
                "nvidia_smi_baseline_mib": baselines[i],
                "reserved_after_warmup_mib": reserved,
            }
        )
    held = [
        torch.ones(int((i + 1) * args.alloc_gib * 2**30), dtype=torch.uint8, device=f"cuda:{i}")
        for i in range(len(uuids))
    ]
    mats = [torch.randn(4096, 4096, device=f"cuda:{i}", dtype=torch.bfloat16) for i in range(len(uuids))]
    deadline = time.monotonic() + args.busy_s
    while time.monotonic() < deadline:
        for m in mats:
            m @ m
    for i in range(len(uuids)):
        torch.cuda.synchronize(i)
        report[i]["used_at_peak_mib"] = used_mib(uuids[i]) - baselines[i]
        report[i]["max_memory_reserved_mib"] = torch.cuda.max_memory_reserved(i) / MIB
        report[i]["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated(i) / MIB
        report[i]["held_mib"] = held[i].numel() / MIB
    time.sleep(args.hold_s)  # let the poller see the peak several times
    Path(args.worker_out).write_text(json.dumps({"torch_version": torch.__version__, "gpus": report}))


def nvml_energy_mj(uuids: list[str]) -> list[float] | None:
    """Cumulative energy counters (mJ, Volta+) as an independent truth for the ∫ power dt; None if absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [
            float(pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByUUID(u)))
            for u in uuids
        ]
    except Exception as exc:  # pynvml missing or counter unsupported: the check still runs
        logger.info("no NVML energy counter: %s", exc)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-gpus", type=int, default=1)
    parser.add_argument("--alloc-gib", type=float, default=8.0, help="GiB held on cuda:0 (×(i+1) on cuda:i)")
    parser.add_argument("--busy-s", type=float, default=3.0, help="seconds of matmuls (utilisation, power)")
    parser.add_argument("--hold-s", type=float, default=1.0)
    parser.add_argument("--loop-ms", type=int, default=100)
    parser.add_argument("--backend", default="nvidia-smi", choices=["nvidia-smi", "nvml"])
    parser.add_argument("--out", type=Path, default=Path("out/sidecar_check"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--uuids", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.worker:
        worker(args)
        return

    # The harness's setting: CUDA ordinals in PCI bus order, as nvidia-smi enumerates (see tunebench.telemetry.gpus).
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    gpus = resolve_visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), query_gpus())[: args.num_gpus]
    if len(gpus) < args.num_gpus:
        sys.exit(f"--num-gpus {args.num_gpus}: only {len(gpus)} GPU(s) visible to nvidia-smi")
    args.out.mkdir(parents=True, exist_ok=True)
    worker_out = args.out / "worker.json"
    energy_before = nvml_energy_mj([g.uuid for g in gpus])
    t0 = time.time()
    with NvidiaSmiSidecar(gpus, args.out, loop_ms=args.loop_ms, backend=args.backend) as sidecar:
        cmd = [sys.executable, __file__, "--worker", "--alloc-gib", str(args.alloc_gib)]
        cmd += ["--busy-s", str(args.busy_s), "--hold-s", str(args.hold_s), "--worker-out", str(worker_out)]
        cmd += ["--uuids", ",".join(g.uuid for g in gpus)]
        subprocess.run(cmd, check=True)
    t1 = time.time()
    energy_after = nvml_energy_mj([g.uuid for g in gpus])
    columns = sidecar.summary(nonpad_tokens=None)
    measured = json.loads(worker_out.read_text())

    per_gpu = []
    for i, gpu_report in enumerate(measured["gpus"]):
        expected = gpu_report["max_memory_reserved_mib"] + gpu_report["context_mib"]
        sidecar_peak = columns.get(f"mem_nvidia_mem_reserved_gpu{i}")
        gap = None if sidecar_peak is None else (sidecar_peak - expected) / expected
        per_gpu.append(
            {
                **gpu_report,
                "sidecar_baseline_mib": sidecar.baseline_mib.get(gpus[i].uuid),
                "expected_peak_mib (max_reserved + context)": expected,
                "sidecar_peak_mib": sidecar_peak,
                "relative_gap": gap,
                "within_2pct": None if gap is None else abs(gap) <= 0.02,
            }
        )
    energy = {"sidecar_energy_joules": columns.get("energy_joules"), "wall_s_around_sidecar": t1 - t0}
    if energy_before and energy_after:
        # The counter spans the whole with-block; the sidecar's integral spans first→last poll only.
        energy["nvml_counter_joules"] = (
            sum(after - before for before, after in zip(energy_before, energy_after, strict=True)) / 1e3
        )
    report = {
        "device": [g.name for g in gpus],
        "driver_version": gpus[0].driver_version,
        "torch_version": measured["torch_version"],
        "backend": args.backend,
        "loop_ms": args.loop_ms,
        "gpus": per_gpu,
        "energy": energy,
        "columns": columns,
        "poll_log": str(sidecar.poll_csv),
    }
    (args.out / "sidecar_check.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
