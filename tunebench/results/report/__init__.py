"""The self-contained HTML report of a results folder or CSV (`benchmark.py report`, tunebench.report).

    page.py                  write_report: the page, its tables and sections
    html.py                  the building blocks: tables with per-row notes, embedded images, marks
    templates.py             the one jinja2 environment; templates/ holds all the markup (one template per section)
    measurement_warnings.py  which rows' steady figures are qualified, their marks and the summary
    acceleration.py, comparison.py, predictions.py, fit_map.py, projection.py, tune.py: one section each
"""
