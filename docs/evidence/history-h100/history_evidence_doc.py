"""Turns the files docs/evidence/history-h100/history_evidence.sh returned into docs/evidence/history-h100.md (offline,
no GPU).

Usage: python docs/evidence/history-h100/history_evidence_doc.py CALL1_DIR [CALL2_DIR ...]
       [--out docs/evidence/history-h100.md] [--notes NOTES.md]   (hand-written findings, placed after the acceptance)

Each CALL_DIR holds one device call's files (runs-*.tgz, checks.txt, harness.log, cotenant.log, gpus.txt). The runs
are rebuilt into a fresh store (history add, in run order), `history check` is run on it again here after each
run, and the document gets: the machine, a run × experiment table of the steady step time with the steady window's
environment, the device's own check outputs verbatim, the offline re-check, and the acceptance verdicts. Copies the
runs' archives beside the document (docs/evidence/history-h100/).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[3]
COLUMNS = ("gpu_other_processes", "gpu_other_process_names", "gpu_memory_used_before_mib", "gpu_sm_clock_mhz",
           "gpu_clock_event_reasons", "gpu_temperature_max_c", "gpu_power_limit_w", "host_load_per_core")


def history(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmark.py"), "history", *args], capture_output=True,
                          text=True, cwd=REPO)


def extract(calls: list[Path], work: Path) -> list[Path]:
    """Every run folder of every call, in run order."""
    for call in calls:
        for archive in sorted(call.glob("runs-*.tgz")):
            with tarfile.open(archive) as handle:
                handle.extractall(work, filter="data")
    return sorted(work.glob("run*"), key=lambda p: int(p.name.removeprefix("run")))


def rebuild(runs: list[Path], store: Path) -> list[str]:
    """Add the runs one by one, checking after each: the offline re-check's outputs."""
    checks = []
    for run in runs:
        added = history("add", str(run), "--store", str(store), "--label", run.name)
        if added.returncode != 0:
            raise SystemExit(f"history add {run}: {added.stderr}")
        checked = history("check", "--store", str(store))
        checks.append(f"=== offline history check after {run.name} (exit {checked.returncode})\n{checked.stdout}")
    return checks


def _short(text, width: int = 40) -> str:
    text = "" if text is None or text != text else str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def table(runs: list[Path]) -> str:
    """Run × experiment: the steady median step time, its move against runs 1-3, and the steady environment."""
    frames = []
    for run in runs:
        frame = pd.read_csv(run / "raw_summary.csv")
        frame = frame.copy().assign(run=int(run.name.removeprefix("run")))
        frames.append(frame[frame["status"] == "ok"])
    data = pd.concat(frames, ignore_index=True).copy()
    data["experiment"] = data["scenario"] + " / " + data["framework_config"].fillna("none").astype(str)
    baseline = data[data["run"] <= 3].groupby("experiment")["steady_step_time_median"].median()
    lines = ["| run | experiment | steady step (ms) | vs runs 1-3 | other processes | memory before (MiB) | SM clock "
             "(MHz) | clock event reasons | max temp (°C) | power cap (W) | host load / core | warning |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in data.sort_values(["experiment", "run"]).itertuples(index=False):
        move = 100 * (row.steady_step_time_median / baseline[row.experiment] - 1)
        values = [getattr(row, c, None) for c in COLUMNS]
        others = f"{values[0]:.0f} {_short(values[1])}" if values[0] == values[0] and values[0] is not None else ""
        warning = "GPU shared" if "GPU shared" in str(row.measurement_warning) else ""
        lines.append(f"| {row.run} | {row.experiment} | {1000 * row.steady_step_time_median:.1f} | {move:+.1f} % | "
                     f"{others} | {_short(values[2])} | {_short(values[3])} | {_short(values[4])} | "
                     f"{_short(values[5])} "
                     f"| {_short(values[6])} | {_short(values[7])} | {warning} |")
    return "\n".join(lines)


def verdicts(device_checks: str, cotenant_run: int = 4) -> list[str]:
    """The acceptance points, read from the device's own check outputs."""
    found = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in
             re.finditer(r"=== history check after run (\d+) \(exit (\d+)\)\n(.*?)(?==== |\Z)", device_checks, re.S)}
    code, text = found.get(cotenant_run, (None, ""))
    named = any(cause in text for cause in ("other processes on the GPU", "GPU shared with another process",
                                             "GPU memory in use before the start"))
    lines = [f"- after run {cotenant_run} (co-tenant): exit {code} (expected 1); why it moved names the co-tenant: "
             f"{'yes' if named else 'no'}"]
    code, text = found.get(cotenant_run + 1, (None, ""))
    lines.append(f"- after run {cotenant_run + 1} (clean): exit {code} (expected 0); back in the old regime: "
                 f"{'yes' if 'is in the regime of' in text else 'no'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "docs/evidence/history-h100.md")
    parser.add_argument("--notes", type=Path, help="a Markdown file of findings, placed after the acceptance")
    args = parser.parse_args()
    last = args.calls[-1]
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        runs = extract(args.calls, work)
        offline = rebuild(runs, work / "history.duckdb")
        runs_table = table(runs)
    device_checks = (last / "checks.txt").read_text()
    parts = ["# `history check` on an H100: a co-tenant process in run 4 (issue V)", "",
             "Made by `docs/evidence/history-h100/history_evidence.sh` (runs of the default set on one GPU; run 4 "
             "beside `docs/evidence/history-h100/cotenant.py`) and "
             "`docs/evidence/history-h100/history_evidence_doc.py` (this page).", "",
             "## Acceptance", "", *verdicts(device_checks), "",
             *([args.notes.read_text().strip(), ""] if args.notes else []), "## The machine", "", "```",
             (last / "gpus.txt").read_text().strip(), "```", "", "## Runs × experiments (steady window)", "",
             runs_table, "", "## `history check` on the device, after each run", "", "```", device_checks.strip(),
             "```", "", "## The same, re-checked offline from the returned runs", "", "```",
             "\n".join(offline).strip(), "```", "", "## The co-tenant", "", "```"]
    parts += [(c / "cotenant.log").read_text().strip() for c in args.calls if (c / "cotenant.log").exists()]
    parts += ["```", "", "## Harness log tails", "", "```"]
    parts += [(c / "harness.log").read_text().strip() for c in args.calls if (c / "harness.log").exists()]
    parts += ["```", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(parts))
    archive = args.out.with_suffix("")
    archive.mkdir(parents=True, exist_ok=True)
    for call in args.calls:
        if call.resolve().parent != archive.resolve():  # calls kept elsewhere: their runs beside the page
            for tgz in call.glob("runs-*.tgz"):
                shutil.copy2(tgz, archive / tgz.name)
    print(f"wrote {args.out} and {archive}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
