"""The column registry: every CSV column declared once, and what is made from the declarations.

    registry.py     the registry (REGISTRY, COLUMNS, `column(name)`): kind, unit, better direction, compare
                    family and meaning of every column; the CSV writer, compare, the report and the README read it
    types.py        Column, the declaration a plugin's tracker uses for its own columns (README "Plugins")
    environment.py  the declarations of where and beside what an experiment ran
    declared.py     the kernel-split, projection and learning declarations, as plain data
    docs.py         the README's column tables (`python -m tunebench.results.columns.docs`)
"""
