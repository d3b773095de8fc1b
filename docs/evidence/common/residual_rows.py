"""Append a GPU evidence run's predicted and measured memory to the residual data (tunebench/planning/residuals.csv).

  python docs/evidence/common/residual_rows.py RESULTS/raw_summary.csv docs/evidence/<doc>.md [...more pairs]

Each ok CUDA row whose prediction compares with its measurement gives one row per category (params, grads,
optimizer, activations, temporaries, peak): what the calibrated bounds (tunebench.planning.residuals) are learned
from. Rows already there (same source, experiment and category) are replaced, so appending twice changes nothing.
Written atomically.
"""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tunebench.fileio import write_atomic  # noqa: E402
from tunebench.planning.residuals import COLUMNS, RESIDUAL_FILE, residual_rows  # noqa: E402


def main(pairs: list[str]) -> None:
    existing = pd.read_csv(RESIDUAL_FILE, keep_default_na=False) if RESIDUAL_FILE.exists() else \
        pd.DataFrame(columns=COLUMNS)
    new = [residual_rows(pd.read_csv(csv), source) for csv, source in zip(pairs[::2], pairs[1::2], strict=True)]
    merged = pd.concat([existing, *new]).drop_duplicates(subset=["source", "experiment", "category"], keep="last")
    write_atomic(RESIDUAL_FILE, merged[COLUMNS].to_csv(index=False))
    print(f"{sum(len(n) for n in new)} residual row(s) into {RESIDUAL_FILE} ({len(merged)} rows)")


if __name__ == "__main__":
    main(sys.argv[1:])
