"""`benchmark.py report RESULTS [--out FILE.html] [--reference REF]`: the self-contained HTML report of a results
folder or CSV (tunebench.results.report), compared with a reference when one is given. Exit 0 when written, 2 on
a usage or input error."""

from __future__ import annotations

import logging
import sys

from tunebench.cli.parsing import Parser, parse
from tunebench.results.compare.reading import CompareInputError
from tunebench.results.report.page import write_report

logger = logging.getLogger(__name__)

DESCRIPTION = (
    "The self-contained HTML report of a results CSV: the page, its tables and sections, and its command line."
)


def build_parser() -> Parser:
    p = Parser(prog="benchmark.py report", description=DESCRIPTION)
    p.add_argument("results", help="results directory (uses raw_summary.csv) or a CSV")
    p.add_argument("--out", default=None, help="HTML file to write (default: <results dir>/report.html)")
    p.add_argument("--reference", default=None, help="also compare with this reference: a CSV or a results directory")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry: 0 = report written, 2 = usage or input error."""
    args = parse(build_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        path = write_report(args.results, args.out, args.reference)
    except CompareInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the report's folder read-only, full or not ours to write
        print(f"error: cannot write {exc.filename or args.out or 'the report'}: {exc.strerror or exc} (fix: --out "
              "a writable path)", file=sys.stderr)
        return 2
    print(f"report written to {path}", file=sys.stderr)
    return 0
