"""Whether plans made on different hosts are the same plan (issue AB): every column of every row, but the time the
planning took (`pred_seconds`), equal as text; a results CSV's `pred_*` columns (a run with `--plan`) against a plan.

    python docs/evidence/plans-on-the-gpu-host-h200/compare_plans.py REFERENCE_PLAN_CSV OTHER_PLAN_CSV [...]
    python docs/evidence/plans-on-the-gpu-host-h200/compare_plans.py --run REFERENCE_PLAN_CSV RESULTS_CSV

Prints one line per differing cell and a verdict; exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import csv
import sys

TIMING = {"pred_seconds"}  # the planner's own wall time: a property of the host, not of the plan


def _rows(path: str) -> dict[str, dict[str, str]]:
    with open(path, newline="") as fh:
        return {row["experiment_id"]: row for row in csv.DictReader(fh)}


def differences(reference: dict, other: dict, columns_of_other_only: bool = False) -> list[str]:
    found = []
    # a run holds the scenarios of its call only: its rows, each against the reference's
    for key in sorted(set(other) if columns_of_other_only else set(reference) | set(other)):
        a, b = reference.get(key), other.get(key)
        if a is None or b is None:
            found.append(f"{key}: only in {'the other' if a is None else 'the reference'}")
            continue
        # a run's pred_error_* compare its plan with its own measurement: no plan holds them
        columns = [c for c in b if c.startswith("pred_") and c in a] if columns_of_other_only \
            else sorted(set(a) | set(b))
        found += [f"{key} {c}: {a.get(c)!r} != {b.get(c)!r}" for c in columns
                  if c not in TIMING and a.get(c, "") != b.get(c, "")]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("others", nargs="+")
    parser.add_argument("--run", action="store_true", help="the others are results CSVs: their pred_* columns only")
    args = parser.parse_args()
    reference, bad = _rows(args.reference), 0
    for path in args.others:
        found = differences(reference, _rows(path), columns_of_other_only=args.run)
        rows = len(_rows(path)) if args.run else len(reference)
        print(f"{path}: {'the same plan' if not found else f'{len(found)} cell(s) differ'} "
              f"({rows} rows against {args.reference})")
        for line in found[:50]:
            print(f"  {line}")
        bad += bool(found)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
