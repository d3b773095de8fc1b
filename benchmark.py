#!/usr/bin/env python3
"""tunebench entry point: `python benchmark.py [options]`, `benchmark.py compare ...`, `benchmark.py report ...`."""

from tunebench.cli import entry

if __name__ == "__main__":
    entry()
