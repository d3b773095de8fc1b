#!/usr/bin/env python3
"""tunebench entry point: `python benchmark.py [options]`, `benchmark.py compare ...`, `benchmark.py report ...`."""

import sys

from tunebench.cli import main

if __name__ == "__main__":
    sys.exit(main())
