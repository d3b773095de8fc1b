"""tune's host overhead (issue S): wall time of one `benchmark.py tune` minus the wall time of the experiments it ran.

    python docs/evidence/tune-overhead-cpu/tune_overhead.py --repo CHECKOUT --out OUT [--runs 3]

Runs the docs' CPU tune (docs/guides/running.md: `--model preset:llama-tiny --max_seq_len 64 --effective_batch 8
--peft lora`) in a
fresh results folder of CHECKOUT's benchmark.py, `--runs` times, and prints per run: wall seconds, the summed
`experiment_wall_seconds` of the rows the run wrote (launch to end of each experiment), experiments, and the
difference (host overhead: start-up, predictions, building and validating each batch, preload, CSVs, report).
Give two checkouts (before and after a change) alternately for a fair comparison on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

COMMAND = ["tune", "--model", "preset:llama-tiny", "--max_seq_len", "64", "--effective_batch", "8", "--peft", "lora",
           "--device", "cpu"]


def one_run(repo: Path, out: Path) -> dict:
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(repo / "benchmark.py"), *COMMAND, "--results_output_path", str(out)],
                          cwd=repo, capture_output=True, text=True, env={"PYTHONPATH": str(repo),
                                                                         "PATH": "/usr/bin:/bin",
                                                                         "HOME": str(Path.home())})
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"tune failed ({done.returncode}): {done.stderr[-2000:]}")
    rows = pd.read_csv(out / "raw_summary.csv")
    experiments = float(rows["experiment_wall_seconds"].sum())
    return {"wall_s": round(wall, 2), "experiments_s": round(experiments, 2), "experiments": len(rows),
            "overhead_s": round(wall - experiments, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", action="append", required=True, help="a checkout (give two to alternate)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {repo: [] for repo in args.repo}
    for k in range(args.runs):
        for i, repo in enumerate(args.repo):
            row = one_run(Path(repo).resolve(), Path(args.out) / f"repo{i}-run{k}")
            results[repo].append(row)
            print(json.dumps({"repo": repo, "run": k, **row}), flush=True)
    for repo, rows in results.items():
        frame = pd.DataFrame(rows)
        print(f"{repo}: overhead median {frame['overhead_s'].median():.1f} s (runs {list(frame['overhead_s'])}), "
              f"experiments {frame['experiments'].iloc[0]}, wall median {frame['wall_s'].median():.1f} s")
    Path(args.out, "tune_overhead.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
