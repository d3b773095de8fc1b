"""tunebench's Python API: the matrix, its plan, typed options in and DataFrames out (the CLI is a client of it)."""
