"""Judge a `benchmark.py tune` search against the full grid of the same space (docs/evidence/tune-h100.md).

Usage: python docs/evidence/tune-h100/tune_vs_grid.py <grid results dir> <tune results dir>
Prints: the grid's best point and objective, the search's winner and what the grid measured for that same point,
the GPU time of each (GPUs × experiment wall time, every run: screening, confirming, failed), and whether the
search launched any configuration that ran out of memory. Exit 1 when the acceptance of issue M fails
(winner's grid objective within 2 % of the grid's best, at most 35 % of the grid's GPU time, no OOM launched).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

OBJECTIVE = "objective_tokens/s"


def gpu_seconds(raw: pd.DataFrame) -> float:
    return float((raw["experiment_wall_seconds"].fillna(0) * raw["num_gpus"].fillna(1)).sum())


def judge(grid_dir: Path, tune_dir: Path) -> tuple[list[str], bool]:
    grid, search = pd.read_csv(grid_dir / "tune.csv"), pd.read_csv(tune_dir / "tune.csv")
    grid_raw, search_raw = pd.read_csv(grid_dir / "raw_summary.csv"), pd.read_csv(tune_dir / "raw_summary.csv")
    measured = grid[grid["state"] == "measured"].set_index("point")
    best = measured[OBJECTIVE].idxmax()
    winner = search.loc[search["rank"] == 1, "point"].iloc[0]
    winner_in_grid = measured.loc[winner, OBJECTIVE]
    gap = winner_in_grid / measured.loc[best, OBJECTIVE] - 1
    ratio = gpu_seconds(search_raw) / gpu_seconds(grid_raw)
    ooms = int((search_raw["status"] == "oom").sum())
    pruned = search[search["state"] == "pruned"]["point"].tolist()
    pruned_ok_in_grid = [p for p in pruned if p in measured.index]
    lines = [
        f"grid: {len(grid)} points, {len(measured)} measured, best {best} at {measured.loc[best, OBJECTIVE]:.0f} "
        f"tokens/s; {gpu_seconds(grid_raw):.0f} GPU s over {len(grid_raw)} runs",
        f"tune: winner {winner} ({search.loc[search['rank'] == 1, OBJECTIVE].iloc[0]:.0f} tokens/s in its confirming "
        f"run); the grid measured it at {winner_in_grid:.0f} tokens/s = {gap:+.2%} against the grid's best",
        f"tune: {gpu_seconds(search_raw):.0f} GPU s over {len(search_raw)} runs = {ratio:.1%} of the grid's; "
        f"states: {search['state'].value_counts().to_dict()}",
        f"tune launched {ooms} configuration(s) that ran out of memory; pruned {len(pruned)}"
        + (f", of which the grid ran {len(pruned_ok_in_grid)} without OOM: {pruned_ok_in_grid}" if pruned else ""),
    ]
    return lines, gap >= -0.02 and ratio <= 0.35 and ooms == 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    lines, ok = judge(Path(argv[0]), Path(argv[1]))
    print("\n".join(lines))
    print("acceptance:", "holds" if ok else "FAILS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
