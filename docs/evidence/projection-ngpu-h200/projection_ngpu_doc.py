"""Issue U, N GPUs on paper against 2 real GPUs: the files docs/evidence/projection-ngpu-h200/projection_ngpu.sh
returned -> docs/evidence/projection-ngpu-h200.md (offline, no GPU).

Usage: python docs/evidence/projection-ngpu-h200/projection_ngpu_doc.py CALL_DIR \
           [--doc docs/evidence/projection-ngpu-h200.md]

CALL_DIR holds ngpu.tgz (one results folder: the 1B rows on one GPU and on two), gpus.csv, step.log. Each 1-GPU
row is projected onto 2 GPUs of the same kind with DDP and FSDP2 (`plan --project_from ... --project_num_gpus 2`
in Python) and set beside the 2-GPU row measured with the same PEFT and parallelism: steady tokens/s (all ranks)
and the per-rank peak (torch.cuda.max_memory_allocated on rank 0 against the fake step's prediction for 2 ranks).
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from tunebench.api.projecting import ProjectionOptions, measured_frame, projection_frame  # noqa: E402

GIB = 1024**3


def compare(root: Path, gpu: str) -> pd.DataFrame:
    measured = measured_frame(root)
    ones, twos = measured[measured["num_gpus"] == 1], measured[measured["num_gpus"] == 2]
    rows = []
    for parallelism in ("ddp", "fsdp2"):
        projected = projection_frame(ProjectionOptions(root, gpu, num_gpus=2, parallelism=parallelism)).set_index(
            "experiment_id"
        )
        for _, one in ones.iterrows():
            two = twos[(twos["peft_method"] == one["peft_method"]) & (twos["framework_config"] == parallelism)]
            if two.empty:
                continue
            p, m = projected.loc[one["experiment_id"]], two.iloc[0]
            rows.append({
                "peft": one["peft_method"], "parallelism": parallelism,
                "one_gpu_tokens_per_second": one["steady_tokens_per_second"],
                "projected_tokens_per_second": p["proj_steady_tokens_per_second"],
                "measured_tokens_per_second": m["steady_tokens_per_second"],
                "tokens_error": p["proj_steady_tokens_per_second"] / m["steady_tokens_per_second"] - 1,
                "projected_comm_ms": 1e3 * p["proj_time_comm"],
                "measured_step_growth_ms": 1e3 * (m["steady_step_time_median"] - one["steady_step_time_median"]),
                "predicted_peak_gib": p["pred_mem_peak"] / GIB,
                "measured_peak_gib": m["mem_peak_torch_max_allocated_bytes"] / GIB,
                "peak_error": p["pred_mem_peak"] / m["mem_peak_torch_max_allocated_bytes"] - 1,
                "proj_note": p["proj_note"]})
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("call", type=Path)
    parser.add_argument("--doc", type=Path, default=REPO / "docs/evidence/projection-ngpu-h200.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        with tarfile.open(args.call / "ngpu.tgz") as handle:
            handle.extractall(root, filter="data")
        gpu = measured_frame(root)["gpu_name"].dropna().iloc[0]
        table = compare(root, gpu)
    data = args.doc.with_suffix("")
    data.mkdir(parents=True, exist_ok=True)
    table.to_csv(data / "ngpu-projection.csv", index=False)
    lines = ["| PEFT | parallelism | 1 GPU tokens/s | projected 2 GPUs | measured 2 GPUs | error | projected comm "
             "(ms) | measured step growth (ms) | predicted peak/rank (GiB) | measured peak/rank (GiB) | error |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for _, r in table.iterrows():
        lines.append(f"| {r.peft} | {r.parallelism} | {r.one_gpu_tokens_per_second:,.0f} | "
                     f"{r.projected_tokens_per_second:,.0f} | {r.measured_tokens_per_second:,.0f} | "
                     f"{100 * r.tokens_error:+.1f} % | {r.projected_comm_ms:.1f} | {r.measured_step_growth_ms:.1f} | "
                     f"{r.predicted_peak_gib:.2f} | {r.measured_peak_gib:.2f} | {100 * r.peak_error:+.2f} % |")
    notes = (args.call / "notes.md").read_text().strip() if (args.call / "notes.md").exists() else ""
    doc = ["# N GPUs on paper against 2 real GPUs (issue U)", "",
           f"The 1B rows of `docs/evidence/projection-ngpu-h200/scenarios-projection-ngpu.yaml` on one {gpu} and on "
           "two of the same machine (`OUT=... bash docs/evidence/projection-ngpu-h200/projection_ngpu.sh`), each 1-GPU "
           "row projected onto 2 GPUs with DDP and FSDP2 "
           f"(`python docs/evidence/projection-ngpu-h200/projection_ngpu_doc.py {args.call}`; "
           f"data: `{data.name}/ngpu-projection.csv`).",
           "", "```", (args.call / "gpus.csv").read_text().strip(), (args.call / "step.log").read_text().strip(), "```",
           "", *lines, "", notes, ""]
    args.doc.write_text("\n".join(doc))
    print(table[["peft", "parallelism", "tokens_error", "peak_error"]].to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
