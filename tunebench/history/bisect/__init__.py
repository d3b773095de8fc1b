"""`benchmark.py bisect` below its command line: the candidates and how one is run (candidates.py), the search."""
