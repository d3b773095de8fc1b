"""Mask the columns that differ between two runs of one commit, then rewrite a CSV for a byte comparison."""

import csv
import sys


def rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


# usage: mask.py NOISE_A NOISE_B IN OUT  (columns differing between two runs of one commit become *)
a, b, given = rows(sys.argv[1]), rows(sys.argv[2]), rows(sys.argv[3])
assert a[0] == b[0] == given[0], "the three files' headers differ"
noisy = {i for i in range(len(a[0])) if [r[i] for r in a[1:]] != [r[i] for r in b[1:]]}
with open(sys.argv[4], "w", newline="") as f:
    csv.writer(f, lineterminator="\n").writerows([given[0]] + [["*" if i in noisy else v for i, v in enumerate(r)]
                                                                for r in given[1:]])
print(f"{sys.argv[3]}: {len(noisy)} of {len(a[0])} columns masked", file=sys.stderr)
