"""Mask one named column of a CSV (plan.csv's pred_seconds) for a byte comparison."""

import csv
import sys

# usage: maskcol.py COLUMN IN OUT
with open(sys.argv[2], newline="") as f:
    rows = list(csv.reader(f))
column = rows[0].index(sys.argv[1])
with open(sys.argv[3], "w", newline="") as f:
    csv.writer(f, lineterminator="\n").writerows(
        [rows[0]] + [["*" if j == column else v for j, v in enumerate(r)] for r in rows[1:]])
