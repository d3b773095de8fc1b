"""A second process on the GPU for the history evidence: small matmuls with sleeps (a few percent of an H100).

Usage: python3 docs/evidence/history-h100/cotenant.py --seconds 900 [--busy_ms 2 --idle_ms 40] > cotenant.log
Dies with its parent (PR_SET_PDEATHSIG) and after --seconds whatever happens; prints its duty cycle when stopped.
On a machine without CUDA (the CPU dry run of docs/evidence/history-h100/history_evidence.sh) it keeps a CPU core busy
instead.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=900.0)
    parser.add_argument("--busy_ms", type=float, default=2.0, help="GPU work per cycle")
    parser.add_argument("--idle_ms", type=float, default=40.0, help="sleep per cycle")
    args = parser.parse_args()
    parent = os.getppid()
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        return 1
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    import torch

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    a = torch.randn(4096 if cuda else 256, 4096 if cuda else 256, device=device,
                    dtype=torch.bfloat16 if cuda else torch.float32)
    started, busy, cycles = time.monotonic(), 0.0, 0
    print(f"cotenant pid {os.getpid()} on {device}", flush=True)
    while not stop["now"] and time.monotonic() - started < args.seconds:
        t0 = time.monotonic()
        while (time.monotonic() - t0) * 1000 < args.busy_ms:
            a = (a @ a).clamp_(-1, 1)
            if cuda:
                torch.cuda.synchronize()
        busy += time.monotonic() - t0
        cycles += 1
        time.sleep(args.idle_ms / 1000)
    wall = time.monotonic() - started
    print(f"cotenant: {cycles} cycles, busy {busy:.1f} s of {wall:.1f} s ({100 * busy / max(wall, 1e-9):.1f} %)",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
