"""From rows to answers: the rows of the experiment folders on disk, the CSVs, and what is made from them.

    summaries.py   raw_summary.csv and benchmarks.csv, rebuilt from every experiment folder (with repeats.py:
                   --repeats, scaling.py: each multi-GPU row against its one-GPU twin)
    folder.py      the results folder: may tunebench write there, what it may remove, its experiment folders
    columns/       the column registry: every CSV column declared once (kind, unit, direction, compare family)
    compare/       the regression check against a reference (benchmark.py compare, history check)
    parity/        loss parity: does an acceleration setting keep the loss of its baseline
    report/        the self-contained HTML report (benchmark.py report)
    charts/        the PNG charts of the comparison and the report
"""
