"""The regression check: results against a reference, each metric judged by its family's rule.

    comparison.py    compare_paths / compare_frames: join the rows, judge every metric, write the findings
    rules.py         families, directions, thresholds, noise bands, experiment identity
    steady.py        steady step-time metrics judged from their step samples (significance, effect, unstable)
    samples.py       the step samples behind rows (experiment folders, a reference's sidecar); write a reference
    significance.py  the statistics: circular block bootstrap, Politis–White block length, Welch t
    reading.py       the CSVs a comparison reads (CompareInputError names what is wrong with one)
    result.py        CompareResult, what a comparison found
    markdown.py      the Markdown summary ($GITHUB_STEP_SUMMARY, summary.md)
"""
