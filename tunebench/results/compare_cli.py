"""`benchmark.py compare`: regression check of a results run against a reference CSV.

Usage: ``python benchmark.py compare --reference refs/cpu.csv --results results/ [--out DIR]
[--keys a,b] [--threshold mfu=5 ...] [--direction train_loss=ignore ...] [--metrics 'scan_mem_*' ...]``.
Exit code 0 = no regression, 1 = regression, 2 = usage or input error. Rules: see tunebench.results.compare_rules.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tunebench.results import compare_rules as rules
from tunebench.results.compare import CompareInputError, compare_paths

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmark.py compare", description=__doc__.splitlines()[0])
    p.add_argument("--reference", required=True, help="reference CSV (e.g. refs/cpu.csv)")
    p.add_argument("--results", required=True, help="results directory (uses raw_summary.csv) or a CSV")
    p.add_argument("--out", default=None, help="output directory (default: <results dir>/compare)")
    p.add_argument(
        "--keys", default=None, help=f"comma-separated join columns (default: {','.join(rules.DEFAULT_KEYS)})"
    )
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=PCT",
        help="threshold in %% per metric, glob or family (throughput, memory, time, loss, energy)",
    )
    p.add_argument(
        "--direction",
        action="append",
        default=[],
        metavar="METRIC=DIR",
        help=f"direction per metric, glob or family: {', '.join(rules.DIRECTIONS)}",
    )
    p.add_argument("--metrics", nargs="+", default=None, help="only these metric columns (names or globs)")
    p.add_argument(
        "--allow_missing",
        action="store_true",
        help="reference rows absent from the results are reported but are not a regression",
    )
    p.add_argument("--no_charts", action="store_true", help="skip the PNG charts")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry: 0 = no regression, 1 = regression, 2 = usage or input error."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    keys = [k.strip() for k in args.keys.split(",") if k.strip()] if args.keys else None
    try:
        result = compare_paths(
            args.reference,
            args.results,
            args.out,
            keys=keys,
            thresholds=args.threshold,
            directions=args.direction,
            metrics=args.metrics,
            allow_missing=args.allow_missing,
            charts=not args.no_charts,
        )
    except CompareInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.markdown)
    n = int(result.outliers["regression"].sum())
    print(f"{n} regression(s); outputs in {result.files[-1].parent}", file=sys.stderr)
    return result.exit_code
