"""`benchmark.py compare`: regression check of a results run against a reference (a CSV or a results directory).

Usage: ``python benchmark.py compare --reference refs/cpu.csv --results results/ [--out DIR]
[--keys a,b] [--threshold mfu=5 ...] [--min_effect time=3 ...] [--direction train_loss=ignore ...]
[--metrics 'scan_mem_*' ...]``; a reference with its step samples: ``python benchmark.py compare
--write_reference refs/x.csv --results DIR [DIR ...]``.
Exit code 0 = no regression, 1 = regression, 2 = usage or input error. Rules: see tunebench.results.compare.rules.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tunebench.cli.parsing import Parser, parse
from tunebench.results.compare import rules
from tunebench.results.compare.comparison import CompareInputError, compare_paths
from tunebench.results.compare.samples import write_reference

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="benchmark.py compare", description=__doc__.splitlines()[0])
    p = parser.add_argument_group("what is compared")
    p.add_argument("--reference", help="reference: a CSV (e.g. refs/cpu.csv; its step samples: <name>.samples.json) or "
                   "a results directory (its raw_summary.csv and experiment folders, like --results)")
    p.add_argument(
        "--results",
        required=True,
        nargs="+",
        help="results directory (uses raw_summary.csv and the steps.json of its experiment folders) or a CSV; "
        "with --write_reference, one or more results directories (repeats of the same experiments)",
    )
    p.add_argument(
        "--write_reference",
        metavar="CSV",
        help="instead of comparing, write the ok rows of --results as a reference CSV and their steady step "
        "times as <name>.samples.json beside it",
    )
    p.add_argument(
        "--keys", default=None, help=f"comma-separated join columns (default: {','.join(rules.DEFAULT_KEYS)})"
    )
    p.add_argument("--metrics", nargs="+", default=None, help="only these metric columns (names or globs)")
    p.add_argument(
        "--allow_missing",
        action="store_true",
        help="reference rows absent from the results are reported but are not a regression",
    )
    p = parser.add_argument_group("the verdict: what counts as a regression")
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=PCT",
        help="threshold in %% per metric, glob or family (throughput, memory, time, loss, energy); for steady "
        "time/throughput metrics with step samples, --min_effect applies instead",
    )
    p.add_argument(
        "--min_effect",
        action="append",
        default=[],
        metavar="METRIC=PCT",
        help="minimum effect in %% per metric, glob or family (time, throughput) for metrics judged by "
        "significance (default 5): a significant change smaller than this is not flagged",
    )
    p.add_argument(
        "--direction",
        action="append",
        default=[],
        metavar="METRIC=DIR",
        help=f"direction per metric, glob or family: {', '.join(rules.DIRECTIONS)}",
    )
    p = parser.add_argument_group("output")
    p.add_argument("--out", default=None, help="output directory (default: <results dir>/compare)")
    p.add_argument("--no_charts", action="store_true", help="skip the PNG charts")
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI entry: 0 = no regression, 1 = regression, 2 = usage or input error."""
    parser = build_parser()
    args = parse(parser, argv)
    if isinstance(args, int):  # argparse's 2 on a usage error, 0 on --help
        return args
    keys = [k.strip() for k in args.keys.split(",") if k.strip()] if args.keys else None
    if args.write_reference and args.reference:
        print("error: --write_reference writes a reference from --results; it takes no --reference", file=sys.stderr)
        return 2
    if args.write_reference:
        try:
            _, _, summary = write_reference(args.results, args.write_reference)
        except CompareInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(summary, file=sys.stderr)
        return 0
    if not args.reference or len(args.results) != 1:
        parser.print_usage(sys.stderr)
        print("error: compare needs --reference and exactly one --results (or --write_reference CSV --results "
              "DIR ...)", file=sys.stderr)
        return 2
    try:
        result = compare_paths(
            args.reference,
            args.results[0],
            args.out,
            keys=keys,
            thresholds=args.threshold,
            directions=args.direction,
            metrics=args.metrics,
            allow_missing=args.allow_missing,
            charts=not args.no_charts,
            min_effects=args.min_effect,
        )
    except CompareInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.markdown)
    n = int(result.outliers["regression"].sum())
    print(f"{n} regression(s); outputs in {result.files[-1].parent}", file=sys.stderr)
    return result.exit_code
