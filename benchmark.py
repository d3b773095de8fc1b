#!/usr/bin/env python3
"""tunebench entry point: `python benchmark.py [options]`, `benchmark.py compare ...`, `benchmark.py report ...`."""

import os
import signal
import sys

from tunebench.cli import main

if __name__ == "__main__":
    code = main()
    # The command is done and its files are written: a Ctrl-C while the interpreter shuts down (multiprocessing
    # joining the preload server, Ray's atexit) ends it with 130 at once, not a KeyboardInterrupt in a finalizer.
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    sys.exit(code)
