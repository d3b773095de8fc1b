"""The prose of docs/evidence/projection-h100-h200.md around the numbers
docs/evidence/projection-h100-h200/projection_report.py computes: setup, commands, the error tables, and the model's
assumptions each checked against what the two GPUs measured."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

TOLERANCE = 0.05  # a class ratio or a gap this far from the model's is reported as a contradicted assumption
COMMANDS = """```bash
# on each GPU, one device call each (nvidia-h100-x1, then nvidia-h200; carry .whl and .whl-bnb, the latter
# slimmed by docs/evidence/common/slim_wheel.py): the GPU's rates (gpu_peaks.py), the rows without bitsandbytes, then
# the QLoRA rows with it
# -> $OUT/u-full.tgz: results.tgz, kernels-*.tgz, peaks.json, gpus.csv
STEP=full bash docs/evidence/common/uv_device.sh
# here, on CPU, with both calls' files unpacked (and earlier calls' for the repeatability table):
python docs/evidence/projection-h100-h200/projection_report.py H100_OUT H200_OUT --repeat "LABEL=DIR_A:DIR_B" ... \
  --other_pair "LABEL=H100_OUT:H200_OUT" ... --notes NOTES.md
# the same projection from the command line, e.g. the H100 results onto an H200 and an L40S:
python benchmark.py plan --project_from /tmp/projection-evidence/H100/results \\
  --plan_device "NVIDIA H200, NVIDIA L40S" --gpu_table docs/evidence/projection-h100-h200/measured-gpus.yaml \\
  --results_output_path /tmp/proj
```"""


def _setup(outs: dict, frames: dict, peaks: dict) -> list[str]:
    lines = ["## Setup", ""]
    for kind, frame in frames.items():
        row = frame.iloc[0]
        versions = ", ".join(f"{p} {row.get(f'{p}_version')}" for p in ("torch", "transformers", "peft", "trl")
                             if f"{p}_version" in frame.columns)
        ok = int((frame["status"] == "ok").sum())
        lines.append(f"- **{kind}**: {row.get('gpu_name')}, driver {row.get('driver_version')}, {versions}; "
                     f"{ok} of {len(frame)} experiments ok (files: `{outs[kind]}`).")
    for name, figures in peaks.items():
        shown = ", ".join(f"{k} {v:.4g}" for k, v in figures.items() if isinstance(v, (int, float)))
        lines.append(f"- gpu_peaks.py on the {name}: {shown}.")
    return lines + [""]


def _contradictions(headline: pd.DataFrame, ratios: pd.DataFrame) -> list[str]:
    """Each model assumption the two GPUs' measurements contradict, with the measured figures."""
    found = []
    for cls, rows in ratios.groupby("class"):
        measured, model = rows["measured_ratio"].dropna(), rows["model_ratio"].dropna()
        if measured.empty or model.empty:
            continue
        gap = measured.median() / model.median() - 1
        if abs(gap) > TOLERANCE:
            found.append(f"- `{cls}` kernels: H200 ÷ H100 time measured {measured.median():.3f} (median of "
                         f"{len(measured)} experiments), the model said {model.median():.3f} ({100 * gap:+.1f} %): "
                         "their time does not scale with the table's "
                         f"{'matmul rate' if cls in ('gemm', 'attention') else 'rate for the class'} alone.")
    for direction, rows in headline.groupby("direction"):
        host = rows[["proj_host_gap_time", "proj_step_time"]].dropna()
        if not host.empty and (host["proj_host_gap_time"] / host["proj_step_time"]).max() > 0.05:
            found.append(
                f"- {direction}: host gaps reach "
                f"{100 * (host['proj_host_gap_time'] / host['proj_step_time']).max():.0f} % "
                "of a projected step; the replay keeps the host's time (the same host): check the "
                "host-bound rows' errors above."
            )
    return found or ["- none beyond the tolerance of ±5 % per kernel class."]


def _phase_errors(headline: pd.DataFrame) -> list[str]:
    lines = [
        "| direction | experiment | " + " | ".join(f"{p} error" for p in ("forward", "backward", "optimizer")) + " |",
        "|---|---|---:|---:|---:|",
    ]
    for _, r in headline.iterrows():
        cells = []
        for phase in ("forward", "backward", "optimizer"):
            projected, measured = r.get(f"proj_time_{phase}"), r.get(f"measured_time_{phase}")
            ok = pd.notna(projected) and pd.notna(measured) and measured > 0
            cells.append(f"{100 * (projected / measured - 1):+.1f} %" if ok else "—")
        lines.append(f"| {r['direction']} | {r['scenario']} · {r['framework_config']} | " + " | ".join(cells) + " |")
    return lines


def _energy(headline: pd.DataFrame, frames: dict) -> list[str]:
    """Projected J/token (the table's power figure) against the sidecar's steady energy on the target."""
    measured = {kind: f.set_index("experiment_id").get("steady_energy_joules_per_nonpad_token") for kind, f in
                frames.items()}
    lines = ["| direction | experiment | projected J/token | measured J/token on target |", "|---|---|---:|---:|"]
    for _, r in headline.iterrows():
        target = measured.get(r["direction"].split(" → ")[1])
        value = target.get(r["experiment_id"]) if target is not None else None
        projected = r.get("proj_joules_per_token")
        lines.append(f"| {r['direction']} | {r['scenario']} · {r['framework_config']} | "
                     f"{'—' if pd.isna(projected) else f'{projected:.4f}'} | "
                     f"{'—' if value is None or pd.isna(value) else f'{value:.4f}'} |")
    return lines


def _split(frames: dict) -> list[str]:
    """Where each experiment's measured step went on each GPU: matmul/attention, bandwidth-bound, host gap."""
    lines = ["| GPU | experiment | step ms | matmul + attention % | bandwidth-bound % | other GPU % | not busy % |",
             "|---|---|---:|---:|---:|---:|---:|"]
    bandwidth = ("optimizer", "norm", "reduction", "copy", "elementwise", "other")
    for kind, frame in frames.items():
        for _, r in frame.iterrows():
            step = r.get("scan_time_step")
            if pd.isna(step) or not step or pd.isna(r.get("scan_kernel_busy_time")):
                continue
            compute = sum(r.get(f"scan_kernel_{c}_time", 0) or 0 for c in ("gemm", "attention"))
            memory = sum(r.get(f"scan_kernel_{c}_time", 0) or 0 for c in bandwidth)
            rest = (r.get("scan_kernel_time") or 0) - compute - memory
            idle = max(0.0, step - r["scan_kernel_busy_time"])
            lines.append(f"| {kind} | {r['scenario']} · {r['framework_config']} | {1e3 * step:.1f} | "
                         f"{100 * compute / step:.0f} | {100 * memory / step:.0f} | {100 * rest / step:.0f} | "
                         f"{100 * idle / step:.0f} |")
    return lines


def _variants(stats: dict) -> list[str]:
    names = {"add": "the elementwise add's bandwidth standing for the memory's (instead of the copy's)",
             "host_step": "each machine's host figure (host time scaled by the ratio of their `host_step_us`)",
             "shipped": "the shipped GPU table (`gpus.yaml`: datasheet and earlier measured rates, no host figures)"}
    return [f"- {text}: median {stats[k]['median_abs_pct']:.1f} %, largest {stats[k]['max_abs_pct']:.1f} %, "
            f"{stats[k]['over_10pct']} over 10 %" for k, text in names.items() if stats.get(k, {}).get("rows")]


def _markdown(frame: pd.DataFrame, empty: str, header: str, cells) -> list[str]:
    """A Markdown table of `frame`, one line per row from `cells(row)` (its text columns, then numeric ones)."""
    if frame.empty:
        return [empty]
    columns = header.count("|") - 1
    return [
        header,
        "|---|---|" + "---:|" * (columns - 2),
        *(f"| {' | '.join(cells(r))} |" for _, r in frame.iterrows()),
    ]


def _others(others: pd.DataFrame) -> list[str]:
    return _markdown(others, "No other pair given.", "| pair | host | projections | median | largest | over 10 % |",
                     lambda r: (r["pair"], r["variant"], str(r["rows"]), f"{r['median_abs_pct']:.1f} %",
                                f"{r['max_abs_pct']:.1f} %", str(r["over_10pct"])))


def _repeats(repeats: pd.DataFrame) -> list[str]:
    return _markdown(repeats, "No repeated measurement given.",
                     "| pair | experiment | tokens/s (A) | tokens/s (B) | B ÷ A − 1 |",
                     lambda r: (r["pair"], r["experiment"], f"{r['tokens_per_second_a']:,.0f}",
                                f"{r['tokens_per_second_b']:,.0f}", f"{100 * r['difference']:+.1f} %"))


def write_doc(path: Path, outs, frames, peaks, headline, shipped, ratios, stats, error_table, class_table,
              repeats: pd.DataFrame, notes: str = "", others: pd.DataFrame | None = None) -> None:
    h = stats["headline"]
    parts = [
        "# Projection: from one measured run to another GPU kind (H100 ↔ H200, issue U)", "",
        "The same experiments (`docs/evidence/projection-h100-h200/scenarios-projection.yaml`) measured on one H100 "
        "and on one H200; each "
        "projected from its own measurement onto the other GPU with `tunebench/projection` "
        "(docs/guides/plan.md, \"Projection\"), and the projection compared with what the other GPU measured.", "",
        *_setup(outs, frames, peaks),
        "## Commands", "", COMMANDS, "",
        "## Steady tokens/s: projected against measured", "",
        f"With the rates gpu_peaks.py measured on the two machines in the same calls, the host assumed the same: "
        f"{h['rows']} projections, median "
        f"absolute error **{h['median_abs_pct']:.1f} %**, largest {h['max_abs_pct']:.1f} %, {h['over_10pct']} over "
        f"10 % (acceptance: median ≤ 5 %, none over 10 %)." if h["rows"] else "No experiment ran on both GPUs.", "",
        error_table(headline), "",
        "Sensitivity, not the headline, the same projections with:", "", *_variants(stats), "",
        "## Other pairs of machines", "",
        "The same projection on other pairs of an H100 call and an H200 call (`other-pairs.csv`): each pair with "
        "the rates its own calls measured.", "", *_others(others if others is not None else pd.DataFrame()), "",
        *([notes.strip(), ""] if notes else []),
        "## The same experiment measured twice on one GPU kind", "",
        "No projection can be closer to a measurement than two measurements of one kind are to each other "
        "(`repeatability.csv`).", "", *_repeats(repeats), "",
        "## Phases: projected against measured (the timed median step)", "", *_phase_errors(headline), "",
        "## Where the measured step went", "",
        "Summed kernel time by class over the timed step's time (kernels of streams that overlap can sum past "
        "100 %), and the time the GPU was not busy (timed step − the scanned step's busy time).", "",
        *_split(frames), "",
        "## Energy", "", *_energy(headline, frames), "",
        "## Kernel classes: H200 ÷ H100 time, measured and modelled", "",
        "Per experiment and class, the summed kernel time of the scanned step on the H200 over that on the H100, "
        "against the ratio the model gives the same kernels (`kernel-class-ratios.csv`).", "",
        class_table(ratios), "",
        "## Assumptions the measurement contradicts", "", *_contradictions(headline, ratios), "",
        "## Files", "",
        "`projection-h100-h200/`: `projection-errors.csv` (every projection with its `proj_note`), "
        "`projection-errors-shipped-table.csv`, `kernel-class-ratios.csv`, `repeatability.csv`, "
        "`raw_summary-h100.csv`, "
        "`raw_summary-h200.csv`, `other-pairs.csv`, `measured-gpus.yaml` (the --gpu_table the headline used).", "",
    ]
    path.write_text("\n".join(parts))
