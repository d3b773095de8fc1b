"""The column registry: every CSV column declared once, and what is made from the declarations.

    registry.py     the registry (REGISTRY, COLUMNS, `column(name)`): kind, unit, better direction, compare
                    family and meaning of every column; the CSV writer, compare, the report and the docs read it
    types.py        Column, the declaration a plugin's tracker uses for its own columns (docs/explanations/data-flow.md)
    environment.py  the declarations of where and beside what an experiment ran
    declared.py     the kernel-split, projection and learning declarations, as plain data
    docs.py         the column reference page, docs/reference/columns.md (`python -m tunebench.results.columns.docs`)
"""
