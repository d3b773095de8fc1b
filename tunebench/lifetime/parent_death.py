"""Processes that never outlive their parent: Linux's PR_SET_PDEATHSIG, set without a race.

A SIGKILLed harness runs no clean-up, so every process it starts (experiments, launchers' ranks, the preload
forkserver, GPU pollers) asks the kernel to SIGKILL it the moment its parent dies. The death signal fires when
the parent *thread* that created the process exits: create children from a thread that outlives them. The
check after prctl closes the race of a parent that died before the request took effect.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable

# The harness's pid, for its preload forkserver to die with (tunebench.lifetime.forkserver_setup reads it there;
# no other process acts on it: an inherited value names another process's harness).
HARNESS_PID_ENV = "TUNEBENCH_HARNESS_PID"
# The name of every process forked from that server (execution/preload.py): the server skips re-running the user's
# `__main__` for these (tunebench.lifetime.forkserver_setup says why).
PRELOADED_PROCESS_NAME = "tunebench-preloaded"
logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# Set by the harness in the environment of the processes it launches (not in command.sh): under the harness a
# launcher's ranks die with their launcher.
LAUNCHED_GROUP_ENV = "TUNEBENCH_LAUNCHED_GROUP"


@functools.lru_cache(maxsize=1)
def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(expected_parent: int | None = None) -> bool:
    """SIGKILL this process when its parent dies; exit at once if `expected_parent` is no longer the parent
    (it died before the request). Returns whether the platform supports it."""
    prctl = _prctl()
    if prctl is None:
        logger.warning("PR_SET_PDEATHSIG unavailable: this process will not die with its parent")
        return False
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)
    return True


def die_with_launcher() -> None:
    """In a rank that a launcher started (torchrun, accelerate launch: LOCAL_RANK is set) under the harness:
    die with that launcher, its parent. The launchers start each rank in a session of its own, so neither the
    harness's group kill nor the launcher's own clean-up reaches a rank whose launcher was SIGKILLed."""
    if os.environ.get(LAUNCHED_GROUP_ENV) != "1" or "LOCAL_RANK" not in os.environ:
        return
    parent = os.getppid()
    if parent == 1:  # the launcher is already gone (the rank was handed to init)
        os._exit(1)
    die_with_parent(expected_parent=parent)


def preexec_dying_with_parent(new_session: bool = True) -> Callable[[], None]:
    """A Popen preexec_fn: a session (or process group) of its own, and SIGKILL when the parent dies.

    libc is resolved here, in the parent, so the child only makes a few system calls between fork and exec.
    """
    parent = os.getpid()
    prctl = _prctl()
    if prctl is None:
        logger.warning("PR_SET_PDEATHSIG unavailable: a child will not die if the harness is SIGKILLed")

    def preexec() -> None:
        if new_session:
            os.setsid()
        else:
            os.setpgid(0, 0)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec
