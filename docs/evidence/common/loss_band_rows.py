"""Append an evidence run's loss bands to the band data (tunebench/results/parity/loss_band.csv).

  python docs/evidence/common/loss_band_rows.py RESULTS/raw_summary.csv docs/evidence/<doc>.md [...more pairs]

Each baseline whose band came from band runs in its folder (`loss_parity_band_source` = `folder: N band run(s)`:
the scenario listed `loss-band-1`, `loss-band-2`, `loss-band-3` beside it) gives one row: the device, the
arguments the band applies to (tunebench.results.parity.band.KEYS), the runs and the band. Loss parity reads it
for runs of the same case that have no band runs of their own. A row already there for the same source, device
and case is replaced, so appending twice changes nothing. Written atomically.
"""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tunebench.fileio import write_atomic  # noqa: E402
from tunebench.results.parity.band import BAND_FILE, KEYS, TABLE_COLUMNS, band_rows  # noqa: E402


def main(pairs: list[str]) -> None:
    existing = pd.read_csv(BAND_FILE, keep_default_na=False) if BAND_FILE.exists() else \
        pd.DataFrame(columns=TABLE_COLUMNS)
    new = [band_rows(pd.read_csv(csv), source) for csv, source in zip(pairs[::2], pairs[1::2], strict=True)]
    merged = pd.concat([existing.astype(str), *(n.astype(str) for n in new)])
    merged = merged.drop_duplicates(subset=["source", "device", *KEYS], keep="last")
    write_atomic(BAND_FILE, merged[TABLE_COLUMNS].to_csv(index=False))
    print(f"{sum(len(n) for n in new)} band row(s) into {BAND_FILE} ({len(merged)} rows)")


if __name__ == "__main__":
    main(sys.argv[1:])
