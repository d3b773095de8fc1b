"""`benchmark.py tune`: the fastest (or cheapest) configuration that fits, found by a pruned, ordered search."""
