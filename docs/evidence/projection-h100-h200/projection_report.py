"""Issue U evidence, offline: the files docs/evidence/projection-h100-h200/projection_evidence.sh returned from an H100
and an H200 -> docs/evidence/projection-h100-h200.md (tables, errors, the assumptions the measurement contradicts) and
its CSVs.

    python docs/evidence/projection-h100-h200/projection_report.py H100_OUT H200_OUT \
        [--doc docs/evidence/projection-h100-h200.md]

Each *_OUT folder holds what the device call returned (results.tgz, kernels-*.tgz, peaks.json, gpus.csv,
log.txt). Every experiment measured on both GPUs is projected from each onto the other, twice: with the figures
gpu_peaks.py measured on those machines in the same call (the headline), and with the shipped GPU table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from scanner.kernel_split import read_rows  # noqa: E402
from tunebench.api.projecting import measured_frame  # noqa: E402
from tunebench.hardware.gpus import load_table  # noqa: E402
from tunebench.projection.kernel_model import Rates, kernel_seconds  # noqa: E402
from tunebench.projection.project import project_rows  # noqa: E402
from tunebench.results.folder import folders_by_id  # noqa: E402

PHASES = ("forward", "backward", "clip", "optimizer", "other")


def unpack(out: Path, work: Path) -> Path:
    """results.tgz and kernels-*.tgz of one device call into `work`/results; returns that folder."""
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    for archive in sorted(out.glob("*.tgz")):
        with tarfile.open(archive) as tar:
            tar.extractall(results, filter="data")
    return results


def peaks_table(outs: dict[str, Path], path: Path, bandwidth: str = "copy_tb_per_s", host: bool = False) -> dict:
    """A --gpu_table file with the rates gpu_peaks.py measured in each call (figure by figure over the shipped);
    `bandwidth`: which measured bandwidth stands for the memory's (the copy's, or the elementwise add's); `host`:
    whether the machines' host figures go in too (the model then scales the host's time by their host_step_us)."""
    entries, found = [], {}
    shipped = load_table()
    for out in outs.values():
        peaks = json.loads((out / "peaks.json").read_text()) if (out / "peaks.json").is_file() else {}
        gpu = shipped.lookup(peaks.get("device"))
        if gpu is None:
            continue
        cite = (f"measured in this evidence's device call (docs/evidence/projection-h100-h200/gpu_peaks.py, "
                f"{out.name}/peaks.json)")
        figures = {
            "bf16_tflops": peaks.get("bf16_matmul_tflops"),
            "memory_tb_per_s": peaks.get(bandwidth),
            "kernel_floor_us": peaks.get("tiny_kernel_gpu_us"),
            "unrolled_tb_per_s": peaks.get("cast_copy_tb_per_s"),
            "strided_tb_per_s": peaks.get("broadcast_mul_tb_per_s"),
        }
        if host:
            figures.update({k: peaks.get(k) for k in ("host_step_us", "host_cpu_op_us", "host_launch_us")})
        entry = {"name": gpu.name, **{k: {"value": round(v, 4), "source": cite} for k, v in figures.items()
                                      if isinstance(v, (int, float)) and v == v and v > 0}}
        entries.append(entry)
        found[gpu.name] = {k: v for k, v in peaks.items() if not isinstance(v, str) or k == "device"}
    path.write_text(yaml.safe_dump({"gpus": entries}, sort_keys=False))
    return found


def directions(frames: dict[str, pd.DataFrame], dirs: dict[str, Path], table: str | None) -> pd.DataFrame:
    """Every experiment measured on both GPUs, projected each way; the measured value on the target beside it."""
    names = {kind: frame["gpu_name"].dropna().iloc[0] for kind, frame in frames.items()}
    gpu_table = load_table(table)
    rows = []
    for src, dst in ((a, b) for a in frames for b in frames if a != b):
        projected = project_rows(frames[src], gpu_table, gpu_table.lookup(names[dst]), folders_by_id(dirs[src]))
        target = frames[dst].set_index("experiment_id")
        for _, row in projected.iterrows():
            measured = target["steady_tokens_per_second"].get(row["experiment_id"])
            rows.append({"direction": f"{src} → {dst}", **row.to_dict(), "measured_on_target": measured,
                         "proj_error": row["proj_steady_tokens_per_second"] / measured - 1 if measured else None,
                         **{f"measured_time_{p}": target[f"scan_time_{p}"].get(row["experiment_id"]) for p in PHASES}})
    return pd.DataFrame(rows)


def class_ratios(dirs: dict[str, Path], table_path: str | None, src: str, dst: str) -> pd.DataFrame:
    """Per experiment and kernel class: measured Σ duration on dst ÷ on src, and the model's ratio for it."""
    table = load_table(table_path)
    out = []
    src_folders, dst_folders = folders_by_id(dirs[src]), folders_by_id(dirs[dst])
    for key, folder in src_folders.items():
        other = dst_folders.get(key)
        if other is None or not (folder / "kernels.csv.gz").is_file() or not (other / "kernels.csv.gz").is_file():
            continue
        a, b = read_rows(str(folder / "kernels.csv.gz")), read_rows(str(other / "kernels.csv.gz"))
        row = json.loads((folder / "results.json").read_text())
        rates = {k: Rates.of(table.lookup(json.loads((f / "results.json").read_text())["gpu_name"]))
                 for k, f in ((src, folder), (dst, other))}
        for cls in sorted({r["class"] for r in a} - {"sync"}):
            mine = [r for r in a if r["class"] == cls]
            theirs = sum(r["dur_us"] for r in b if r["class"] == cls)
            source = sum(r["dur_us"] for r in mine)
            model = sum(kernel_seconds(r, rates[src], rates[dst]) for r in mine) * 1e6
            out.append({"experiment": f"{row.get('scenario')} · {row.get('framework_config')}", "class": cls,
                        "kernels": len(mine), f"{src}_us": source, f"{dst}_us": theirs,
                        "measured_ratio": theirs / source if source else None,
                        "model_ratio": model / source if source else None})
    return pd.DataFrame(out)


def repeatability(pairs: list[str], work: Path) -> pd.DataFrame:
    """Each LABEL=DIR_A:DIR_B pair's experiments measured in both: steady tokens/s of each and B ÷ A − 1."""
    rows = []
    for number, pair in enumerate(pairs):
        label, _, dirs = pair.partition("=")
        first, _, second = dirs.partition(":")
        a, b = (measured_frame(unpack(Path(d), work / f"{number}-{i}")).set_index("experiment_id")
                for i, d in enumerate((first, second)))
        for key in a.index.intersection(b.index):
            ta, tb = a.at[key, "steady_tokens_per_second"], b.at[key, "steady_tokens_per_second"]
            rows.append({"pair": label, "experiment": f"{a.at[key, 'scenario']} · {a.at[key, 'framework_config']}",
                         "tokens_per_second_a": ta, "tokens_per_second_b": tb, "difference": tb / ta - 1})
    return pd.DataFrame(rows)


def other_pairs(pairs: list[str], work: Path) -> pd.DataFrame:
    """The headline's projection (each pair's own measured rates, the same host) and the host_step variant on other
    pairs of an H100 call and an H200 call: one row per pair and variant."""
    rows = []
    for spec in pairs:
        label, _, paths = spec.partition("=")
        outs = dict(zip(("H100", "H200"), (Path(p) for p in paths.split(":")), strict=True))
        dirs = {kind: unpack(out, work / label / kind) for kind, out in outs.items()}
        frames = {kind: measured_frame(d) for kind, d in dirs.items()}
        for variant, host in (("same host", False), ("host_step_us", True)):
            table = work / label / f"{variant.replace(' ', '_')}-gpus.yaml"
            found = peaks_table(outs, table, host=host)
            if host and not all(f.get("host_step_us") for f in found.values()):
                continue
            rows.append({"pair": label, "variant": variant, **summary(directions(frames, dirs, str(table)))})
    return pd.DataFrame(rows)


def error_table(frame: pd.DataFrame) -> str:
    lines = ["| direction | experiment | measured on source | projected | measured on target | error | host "
             "elasticity |", "|---|---|---:|---:|---:|---:|---:|"]
    for _, r in frame.iterrows():
        error = "" if pd.isna(r["proj_error"]) else f"{100 * r['proj_error']:+.1f} %"
        projected, elasticity = r["proj_steady_tokens_per_second"], r.get("proj_host_elasticity")
        shown = "—" if elasticity is None or pd.isna(elasticity) else f"{elasticity:.2f}"
        lines.append(f"| {r['direction']} | {r['scenario']} · {r['framework_config']} | "
                     f"{r['steady_tokens_per_second']:,.0f} | "
                     f"{'—' if pd.isna(projected) else f'{projected:,.0f}'} | "
                     f"{'—' if pd.isna(r['measured_on_target']) else f'{r.measured_on_target:,.0f}'} | {error} | "
                     f"{shown} |")
    return "\n".join(lines)


def summary(frame: pd.DataFrame) -> dict:
    errors = [abs(e) for e in frame["proj_error"].dropna()]
    return {"rows": len(errors), "median_abs_pct": 100 * statistics.median(errors) if errors else None,
            "max_abs_pct": 100 * max(errors) if errors else None,
            "over_10pct": int(sum(e > 0.10 for e in errors))}


def class_table(ratios: pd.DataFrame) -> str:
    lines = ["| class | experiments | kernels | measured ratio (median, min–max) | model ratio (median) |",
             "|---|---:|---:|---|---:|"]
    for cls, rows in ratios.groupby("class"):
        measured = rows["measured_ratio"].dropna()
        if measured.empty:
            continue
        lines.append(f"| {cls} | {len(rows)} | {int(rows['kernels'].sum())} | {measured.median():.3f} "
                     f"({measured.min():.3f}–{measured.max():.3f}) | {rows['model_ratio'].median():.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("h100_out", type=Path)
    parser.add_argument("h200_out", type=Path)
    parser.add_argument("--doc", type=Path, default=REPO / "docs/evidence/projection-h100-h200.md")
    parser.add_argument("--work", type=Path, default=Path("/tmp/projection-evidence"))
    parser.add_argument("--repeat", nargs="*", default=[], metavar="LABEL=DIR_A:DIR_B",
                        help="two measurements of one GPU kind (device calls' folders): their steady tokens/s side "
                             "by side, the floor under any projection's error")
    parser.add_argument("--other_pair", nargs="*", default=[], metavar="LABEL=H100_OUT:H200_OUT",
                        help="more pairs of device calls, projected the same way: their errors in a table of their own")
    parser.add_argument("--notes", type=Path, help="a Markdown file of findings, placed after the headline")
    args = parser.parse_args(argv)
    outs = {"H100": args.h100_out, "H200": args.h200_out}
    dirs = {kind: unpack(out, args.work / kind) for kind, out in outs.items()}
    frames = {kind: measured_frame(d) for kind, d in dirs.items()}
    data = args.doc.with_suffix("")
    data.mkdir(parents=True, exist_ok=True)
    peaks = peaks_table(outs, data / "measured-gpus.yaml")
    headline = directions(frames, dirs, str(data / "measured-gpus.yaml"))
    shipped = directions(frames, dirs, None)
    ratios = class_ratios(dirs, str(data / "measured-gpus.yaml"), "H100", "H200")
    # sensitivity (not the headline): the elementwise add's bandwidth for the memory's; each machine's host figure
    variants = {}
    for name, bandwidth, host in (("add", "elementwise_add_tb_per_s", False), ("host_step", "copy_tb_per_s", True)):
        table = args.work / f"{name}-gpus.yaml"
        peaks_table(outs, table, bandwidth, host)
        variants[name] = summary(directions(frames, dirs, str(table)))
    others = other_pairs(args.other_pair, args.work / "pairs")
    headline.to_csv(data / "projection-errors.csv", index=False)
    shipped.to_csv(data / "projection-errors-shipped-table.csv", index=False)
    ratios.to_csv(data / "kernel-class-ratios.csv", index=False)
    for kind, frame in frames.items():
        frame.to_csv(data / f"raw_summary-{kind.lower()}.csv", index=False)
    from projection_doc import write_doc  # the prose beside this script

    repeats = repeatability(args.repeat, args.work / "repeats")
    repeats.to_csv(data / "repeatability.csv", index=False)
    others.to_csv(data / "other-pairs.csv", index=False)
    stats = {"headline": summary(headline), "shipped": summary(shipped), **variants}
    write_doc(args.doc, outs, frames, peaks, headline, shipped, ratios, stats, error_table, class_table,
              repeats, args.notes.read_text() if args.notes else "", others)
    print(json.dumps(stats, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
