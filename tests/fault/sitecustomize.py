"""Test-only fault injection for one rank (on PYTHONPATH only in tests): TUNEBENCH_TEST_FAULT=oom|kill,
TUNEBENCH_TEST_FAULT_RANK=<rank>. Once that rank is inside a training step, it raises a CUDA-style OOM or
SIGKILLs itself, like a real failing rank. Also a planted data-loading slowdown (TUNEBENCH_TEST_SLOW_FETCH_MS,
below)."""

import os
import signal
import sys

_MODE = os.environ.get("TUNEBENCH_TEST_FAULT")
_RANK = os.environ.get("TUNEBENCH_TEST_FAULT_RANK", "1")


def _in_training_step(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "training_step":
            return True
        frame = frame.f_back
    return False


def _handler(signum, frame):
    if not _in_training_step(frame):
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # not training yet: look again shortly
        return
    if _MODE == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (injected by the test)")


if _MODE in ("oom", "kill") and os.environ.get("RANK") == _RANK and "torch.distributed.run" not in " ".join(sys.argv):
    signal.signal(signal.SIGALRM, _handler)
    signal.setitimer(signal.ITIMER_REAL, 1.0)


# TUNEBENCH_TEST_SLOW_FETCH_MS=<ms>: every batch the data loader fetches first sleeps that long (read at each fetch,
# so each experiment forked from a preload server started with the variable takes its own value): a slowdown
# planted in the data path, with no argument changed (tests/tunebench/history/test_check_and_bisection_e2e.py).
if "TUNEBENCH_TEST_SLOW_FETCH_MS" in os.environ:
    import time

    import torch.utils.data._utils.fetch as _fetch

    _original_fetch = _fetch._MapDatasetFetcher.fetch

    def _slow_fetch(self, possibly_batched_index):
        time.sleep(float(os.environ.get("TUNEBENCH_TEST_SLOW_FETCH_MS", "0")) / 1000.0)
        return _original_fetch(self, possibly_batched_index)

    _fetch._MapDatasetFetcher.fetch = _slow_fetch
