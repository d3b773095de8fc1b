"""A synthetic GPU results folder for the projection tests: a real spec.json, a measured row, a kernel file."""

from __future__ import annotations

import json
from pathlib import Path

from scanner.kernel_split import flat_kernels, summarise_kernels, write_rows

REPO = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3"
BF16 = '["c10::BFloat16","c10::BFloat16"]'
# (phase, class, duration µs, operator, input dims): the known-answer profile of tests/test_projection.py
PROFILE = (
    ("forward", "gemm", 1000.0, "aten::mm", "[[8192,4096],[4096,4096]]"),  # square: compute-bound
    ("forward", "elementwise", 502.0, "aten::add", ""),
    ("forward", "gemm", 42.0, "aten::mm", "[[8192,4096],[4096,16]]"),  # LoRA's thin product: bandwidth-bound
    ("backward", "attention", 3002.0, "aten::_scaled_dot_product_flash_attention_backward", ""),
    ("optimizer", "optimizer", 1002.0, "aten::_fused_adamw_", ""),
    ("other", "transfer", 66.0, "", ""),
)
# the timed step's phases (µs): each phase's kernels back to back from its start, the rest of it a host gap
PHASE_US = {"forward": 1600.0, "backward": 3100.0, "clip": 0.0, "optimizer": 1002.0, "other": 200.0}
STEADY_US = 5900.0
TOKENS = 8192


def kernel_rows(profile=PROFILE, phase_us=PHASE_US) -> list[dict]:
    rows, clock = [], 0.0
    for phase in ("other", "forward", "backward", "clip", "optimizer"):
        at = clock
        for p, cls, dur, op, dims in profile:
            if p == phase:
                rows.append({"step": 1, "phase": p, "class": cls, "start_us": at, "dur_us": dur, "launch_us": at,
                             "stream": 7, "name": f"{cls}_kernel", "op": op, "op_dims": dims,
                             "op_types": BF16 if dims else "", "bytes": "", "grid": "", "block": ""})
                at += dur
        clock += phase_us[phase]
    return rows


def measured_row(experiment_id: str, rows: list[dict], gpu: str = H100, phase_us=PHASE_US,
                 steady_us: float = STEADY_US, **extra) -> dict:
    row = {"experiment_id": experiment_id, "status": "ok", "gpu_name": gpu, "torch_dtype": "bfloat16",
           "steady_step_time_median": steady_us * 1e-6, "steady_tokens_per_second": TOKENS / (steady_us * 1e-6),
           "steady_nonpad_tokens_per_second": TOKENS / (steady_us * 1e-6),
           "total_parameters": 1_000_000_000, "trainable_parameters": 1_000_000_000, "gradient_accumulation_steps": 1,
           **{f"scan_time_{p}": v * 1e-6 for p, v in phase_us.items()},
           **flat_kernels(summarise_kernels(rows, 1))}
    row.update(extra)
    return row


def make_results(root: Path, device: str = "cuda", kernels: bool = True, **extra) -> tuple[Path, str]:
    """One experiment folder (llama-tiny, spec.json as the harness writes it) holding the known-answer profile."""
    import tunebench

    scenarios = root.parent / f"{root.name}-scenarios.yaml"
    scenarios.write_text("scenarios:\n  - name: proj\n    arguments:\n      model_name_or_path: [preset:llama-tiny]\n"
                         "      max_seq_len: 128\n      per_device_train_batch_size: 4\n")
    spec = tunebench.Matrix.from_yaml(str(scenarios), device=device).experiments[0]
    folder = root / spec.folder_name
    folder.mkdir(parents=True)
    spec.write(folder, ["python", "-m", "tunebench.experiment.train"])
    rows = kernel_rows()
    if kernels:
        write_rows(str(folder / "kernels.csv.gz"), rows)
    row = measured_row(spec.experiment_id, rows, **extra)
    row.update({k: v for k, v in spec.describe().items() if k not in row})
    (folder / "results.json").write_text(json.dumps(row))
    return folder, spec.experiment_id
