"""Issue Y, offline: the files docs/evidence/gpu-counts-h100/gpu_counts.sh returned
(docs/evidence/gpu-counts-h100/call-*) -> the tables of docs/evidence/gpu-counts-h100.md, the merged results folder's
CSVs and refs/nvidia-h100-x4.csv.

Usage: python docs/evidence/gpu-counts-h100/gpu_counts_doc.py [--evidence docs/evidence/gpu-counts-h100] [--replan]

Every run folder of every call is read; where one experiment ran in several (a packed pass and an exclusive one),
the merged folder keeps its exclusive run (concurrent_experiments 0) and the others give its repeatability. The
memory table plans every ok row on this (CPU) host from its spec.json (memory.csv caches it; --replan redoes it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from tunebench.api.projecting import ProjectionOptions, projection_frame  # noqa: E402
from tunebench.planning.plan_matrix import plan_experiments  # noqa: E402
from tunebench.projection.memory import spec_of  # noqa: E402
from tunebench.results.compare.samples import write_reference  # noqa: E402
from tunebench.results.summaries import write_summaries  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
GIB = 1024**3
CATEGORIES = ("params", "grads", "optimizer", "activations", "temporaries", "other")


def unpack(evidence: Path, into: Path) -> list[Path]:
    """Every run folder of every call (results, then kernels on top)."""
    for call in sorted(evidence.glob("call-*")):
        target = into / call.name
        target.mkdir(parents=True)
        for archive in sorted(call.glob("*.tgz"), key=lambda p: p.name.startswith("kernels")):
            with tarfile.open(archive) as tar:
                tar.extractall(target, filter="data")
    return sorted(p for p in into.glob("call-*/*") if (p / "raw_summary.csv").is_file())


def all_rows(runs: list[Path]) -> pd.DataFrame:
    frames = []
    for run in runs:
        frame = pd.read_csv(run / "raw_summary.csv")
        frame["call"], frame["run"], frame["folder"] = run.parent.name, run.name, [
            str(run / f"{s}_{e}") for s, e in zip(frame["scenario"], frame["experiment_id"], strict=True)]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def merge(rows: pd.DataFrame, into: Path) -> Path:
    """One results folder: each experiment once, its exclusive ok run where there is one, else its ok run, else its
    last row (skipped or failed)."""
    into.mkdir(parents=True)
    (into / ".tunebench").write_text("")
    for _, group in rows.groupby("experiment_id"):
        ok = group[group["status"] == "ok"]
        alone = ok[ok["concurrent_experiments"].fillna(0) == 0]
        chosen = (alone if len(alone) else ok if len(ok) else group).iloc[-1]
        shutil.copytree(chosen["folder"], into / Path(chosen["folder"]).name)
    write_summaries(into)
    return into


def memory_table(rows: pd.DataFrame, cache: Path, replan: bool, device: str = H100,
                 capacity_mib: int = 81559) -> pd.DataFrame:
    """Predicted (this host, from spec.json, for `device`) against measured per-rank categories, every ok row once."""
    if cache.is_file() and not replan:
        return pd.read_csv(cache)
    out = []
    for _, row in rows[rows["status"] == "ok"].drop_duplicates("experiment_id").iterrows():
        spec = spec_of(Path(row["folder"]))
        pred = plan_experiments([spec], capacity_mib * 2**20, device_name=device)[spec.experiment_id]
        record = {"experiment_id": row["experiment_id"], "scenario": row["scenario"],
                  "framework_config": row["framework_config"], "num_gpus": row["num_gpus"],
                  "quantization": row.get("quantization"), "measured_peak": row["scan_mem_peak_allocated"],
                  "predicted_peak": pred.get("pred_mem_peak"), "pred_note": pred.get("pred_note")}
        for c in CATEGORIES:
            record[f"measured_{c}"], record[f"predicted_{c}"] = row[f"scan_mem_{c}"], pred.get(f"pred_mem_{c}")
        out.append(record)
        print(f"planned {row['scenario']} {row['framework_config']} {row['num_gpus']}", flush=True)
    frame = pd.DataFrame(out)
    frame.to_csv(cache, index=False)
    return frame


def repeatability(rows: pd.DataFrame) -> dict[str, float]:
    """Per experiment with two or more ok runs: (max − min) / mean of their steady tokens/s."""
    out = {}
    for experiment, group in rows[rows["status"] == "ok"].groupby("experiment_id"):
        rates = group["steady_nonpad_tokens_per_second"].dropna().tolist()
        if len(rates) > 1:
            out[experiment] = (max(rates) - min(rates)) / statistics.mean(rates)
    return out


def projection_table(merged: Path, rows: pd.DataFrame) -> pd.DataFrame:
    """Every measured multi-GPU row against its projections: from its one-GPU twin (the twin's row spread over N
    GPUs of the row's parallelism, DDP and FSDP2 only: the CLI's choices), from the same experiment on the other
    count, and from itself (N → N: the measurement)."""
    frame = pd.read_csv(merged / "raw_summary.csv")
    ok = frame[frame["status"] == "ok"].set_index("experiment_id")
    spread = repeatability(rows)
    projected = {}
    for n in (1, 2, 4):
        for parallelism in (None, "ddp", "fsdp2"):
            if n == 1 and parallelism:
                continue
            table = projection_frame(ProjectionOptions(merged, H100, num_gpus=n, parallelism=parallelism, memory=False))
            projected[(n, parallelism)] = table.set_index("experiment_id")
    out = []
    for target_id, target in ok[ok["num_gpus"] > 1].iterrows():
        own = projected[(int(target["num_gpus"]), None)].loc[target_id]
        sources = [("self", target_id, own)]
        twin = target.get("scaling_baseline_id")
        if isinstance(twin, str) and own["proj_parallelism"] in ("ddp", "fsdp2"):
            for twin_id in twin.split(";"):
                sources.append(
                    ("one GPU", twin_id, projected[(int(target["num_gpus"]), own["proj_parallelism"])].loc[twin_id])
                )
        for other_id, other in ok[(ok["num_gpus"] > 1) & (ok["num_gpus"] != target["num_gpus"])].iterrows():
            if other["scenario"] == target["scenario"] and other["framework_config"] == target["framework_config"]:
                sources.append((f"{int(other['num_gpus'])} GPUs", other_id,
                                projected[(int(target["num_gpus"]), None)].loc[other_id]))
        for kind, source_id, p in sources:
            value = p.get("proj_steady_nonpad_tokens_per_second")
            error = value / target["steady_nonpad_tokens_per_second"] - 1 if pd.notna(value) else None
            band = max(0.10, spread.get(target_id, 0.0), spread.get(source_id, 0.0))
            out.append(
                {
                    "target": target_id,
                    "scenario": target["scenario"],
                    "framework_config": target["framework_config"],
                    "num_gpus": int(target["num_gpus"]),
                    "from": kind,
                    "source": source_id,
                    "measured": target["steady_nonpad_tokens_per_second"],
                    "projected": value,
                    "error": error,
                    "repeatability": max(spread.get(target_id, 0.0), spread.get(source_id, 0.0)),
                    "band": band,
                    "within": None if error is None else abs(error) <= band,
                    "host_elasticity": p.get("proj_host_elasticity"),
                    "note": None if pd.notna(value) else p.get("proj_note"),
                }
            )
    return pd.DataFrame(out)


def packing(rows: pd.DataFrame, gpus: int = 4) -> dict:
    """The packed pass: experiments' own launch-to-end times against the matrix's span (first start to last end)."""
    packed = rows[(rows["run"] == "packed") & rows["experiment_start_unix"].notna()]
    span = packed["experiment_end_unix"].max() - packed["experiment_start_unix"].min()
    busy = (packed["experiment_end_unix"] - packed["experiment_start_unix"]) * packed["num_gpus"]
    longest = (packed["experiment_end_unix"] - packed["experiment_start_unix"]).max()
    ideal = max(busy.sum() / gpus, longest)
    return {"experiments": int(len(packed)), "span_seconds": span, "gpu_seconds": busy.sum(), "ideal_seconds": ideal,
            "wall_over_ideal": span / ideal}


def concurrency(rows: pd.DataFrame) -> pd.DataFrame:
    """The same experiment packed beside others and alone: steady step medians."""
    ok = rows[rows["status"] == "ok"]
    out = []
    for _, group in ok.groupby("experiment_id"):
        packed, alone = (
            group[group["concurrent_experiments"].fillna(0) > 0],
            group[group["concurrent_experiments"].fillna(0) == 0],
        )
        if len(packed) and len(alone):
            p, a = packed.iloc[0], alone.iloc[0]
            out.append({"scenario": p["scenario"], "framework_config": p["framework_config"], "num_gpus": p["num_gpus"],
                        "beside": int(p["concurrent_experiments"]), "packed_step": p["steady_step_time_median"],
                        "alone_step": a["steady_step_time_median"],
                        "packed_over_alone": p["steady_step_time_median"] / a["steady_step_time_median"] - 1})
    return pd.DataFrame(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evidence", type=Path, default=REPO / "docs/evidence/gpu-counts-h100")
    parser.add_argument("--replan", action="store_true")
    parser.add_argument("--reference", type=Path, default=REPO / "refs/nvidia-h100-x4.csv",
                        help="the reference CSV written from the merged folder (compare --write_reference)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows = all_rows(unpack(args.evidence, Path(scratch)))
        merged = merge(rows, Path(scratch) / "merged")
        memory = memory_table(rows, args.evidence / "memory.csv", args.replan)
        proj = projection_table(merged, rows)
        proj.to_csv(args.evidence / "projection.csv", index=False)
        shutil.copy(merged / "raw_summary.csv", args.evidence / "merged-raw_summary.csv")
        rows.drop(columns=["folder"]).to_csv(args.evidence / "all-rows.csv", index=False)
        concurrency(rows).to_csv(args.evidence / "concurrency.csv", index=False)
        (args.evidence / "packing.json").write_text(json.dumps(packing(rows), indent=2))
        print(write_reference([merged], args.reference)[2])
        print(f"memory rows {len(memory)}, projections {len(proj)}; wrote {args.evidence}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
