"""Issue P's evidence: every pairwise `compare` among the runs of a `--repeats` results folder (no change: nothing
may be flagged), and a changed run against each of them (a real slowdown: flagged, the setting named).

  python docs/evidence/compare-significance-h100/compare_pairs.py --baseline BASE_DIR --changed CHANGED_DIR \
      --out OUT_DIR

Each repeat of BASE_DIR becomes a results folder of its own (its experiment folders and its rows), so each pair
is compared exactly as two separate runs would be, with their step samples. Prints one line per comparison and
writes pairs.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import shutil
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tunebench.results.compare.comparison import compare_paths  # noqa: E402
from tunebench.results.folder import RAW_SUMMARY  # noqa: E402

logger = logging.getLogger(__name__)


def split_repeats(base: Path, out: Path) -> list[Path]:
    """One results folder per repeat of `base` (its folders keep their names: the id ends them either way)."""
    frame = pd.read_csv(base / RAW_SUMMARY)
    folders = []
    for repeat, rows in frame.groupby("repeat"):
        target = out / f"run{int(repeat)}"
        target.mkdir(parents=True, exist_ok=True)
        suffix = "" if int(repeat) == 1 else f"-r{int(repeat)}"
        for folder in base.iterdir():
            ids = rows["experiment_id"].astype(str)
            if folder.is_dir() and any(folder.name == f"{folder.name.rsplit('_', 1)[0]}_{i}{suffix}" for i in ids):
                shutil.copytree(folder, target / folder.name, dirs_exist_ok=True)
        rows.to_csv(target / RAW_SUMMARY, index=False)
        folders.append(target)
    return folders


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--changed", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    runs = split_repeats(Path(args.baseline), out / "split")
    results = []
    pairs = [(a, b, "no change") for a, b in itertools.permutations(runs, 2)]
    pairs += [(run, Path(args.changed), "changed") for run in runs]
    for reference, new, kind in pairs:
        result = compare_paths(str(reference / RAW_SUMMARY), str(new), out / f"{reference.name}-vs-{new.name}",
                               charts=False)
        flagged = result.regressions
        tested = result.comparison[result.comparison.get("method", pd.Series(dtype=str)).astype(str).str.len() > 0] \
            if "method" in result.comparison.columns else result.comparison
        line = {"reference": reference.name, "results": new.name, "kind": kind, "exit_code": result.exit_code,
                "regressions": [f"{r.label}: {r.metric} {r.delta_pct:+.2f} %" for r in flagged.itertuples()],
                "unstable": int((result.outliers["kind"] == "unstable").sum()),
                "why": sorted({str(w) for w in flagged.get("why", pd.Series(dtype=str)).dropna() if str(w)}),
                "tested_metrics": len(tested)}
        results.append(line)
        print(f"{kind:9} {reference.name} -> {new.name}: exit {result.exit_code}, {len(flagged)} regression(s), "
              f"{line['unstable']} unstable; why: {'; '.join(line['why'])[:300]}")
    (out / "pairs.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
