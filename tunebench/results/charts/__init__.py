"""The charts of the comparison and the report, as PNG bytes (matplotlib's Agg, no pyplot state).

    figures.py  the comparison's and the report's charts
    pareto.py   the Pareto chart: steady tokens/s against peak memory and J/token, the front marked
    layout.py   a chart's text kept inside its PNG (wrapped titles, legends in the columns that fit)
"""
