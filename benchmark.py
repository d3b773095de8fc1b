#!/usr/bin/env python3
"""tunebench entry point: `python benchmark.py [options]`, `benchmark.py compare ...`, `benchmark.py report ...`."""

import os
import signal
import sys

from tunebench.cli import main


def _exit_interrupted(*_) -> None:
    os._exit(130)


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:  # a Ctrl-C between main's own handler and the next line: main had stopped already
        code = 130
    # The command is done and its files are written: a Ctrl-C while the interpreter shuts down (flushing stdout,
    # multiprocessing joining the preload server, Ray's atexit) ends it with 130 at once, not a KeyboardInterrupt
    # in a finalizer. The handler comes before the flush: CI once caught the signal inside the flush.
    signal.signal(signal.SIGINT, _exit_interrupted)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
