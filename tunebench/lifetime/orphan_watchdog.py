"""A watchdog that outlives a killed harness by a moment and takes every process of its matrix with it.

Parent-death signals chain process to parent (parent_death.py beside it), but not every process of a matrix is a
child that tunebench starts: a local Ray instance's raylet, its agents and pooled workers are started by Ray
and noticed their driver's death 2-12 s after a SIGKILL. This watchdog, a child of the harness with a
parent-death signal of its own, knows the matrix's processes two ways, because neither alone is enough:

* the harness's process tree, which it reads every quarter second (an orphan loses its parent link the moment
  the harness dies, so the tree must be known before);
* the run's token, which every process started by the run inherits in its environment (TUNEBENCH_MATRIX_TOKEN)
  and which finds a process started after the last look. Ray's agents rename themselves (setproctitle), which
  can overwrite the environment that the kernel shows (psutil's Process.environ): the tree finds those.

When the harness dies, however it dies, the watchdog freezes (SIGSTOP) everything it knows, adds the children
of what it froze, and SIGKILLs them all. Started as a script (`python -I orphan_watchdog.py TOKEN HARNESS_PID`): it
imports nothing of tunebench (psutil only) and starts in a tenth of a second. A harness that ends normally tells it
to leave quietly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil

logger = logging.getLogger(__name__)

TOKEN_ENV = "TUNEBENCH_MATRIX_TOKEN"
_DEATH_SIGNAL = signal.SIGUSR2  # the kernel sends it when the harness dies (PR_SET_PDEATHSIG)
_QUIET_SIGNAL = signal.SIGUSR1  # the harness ended normally: leave without sweeping
# Seconds between two readings of the harness's process tree (~14 ms each with 120 processes through psutil, on a
# loaded 2-core machine where reading /proc/<pid>/stat by hand took 4 ms): often while a
# run starts its long-lived processes (Ray, the preload server), then rarely. What starts between two readings
# either inherits the token or is the child of a process already known (found when the sweep freezes it).
_LOOK_EVERY = (0.25, 1.0)
_STARTING_SECONDS = 30.0
# Sweep until nothing of the matrix has been seen for QUIET seconds (a process caught mid-fork appears a
# moment later), and never longer than LIMIT.
_QUIET_SECONDS = 1.0
_LIMIT_SECONDS = 10.0


_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)  # a zombie holds nothing; it is its parent's to reap


def _processes() -> dict[int, tuple[int, float, str, psutil.Process]]:
    """pid -> (parent pid, start time, state, the process) of every process. A start time is read once per process
    (psutil caches it, and process_iter keeps the Process): a pid seen with another start time was reused."""
    table = {}
    for process in psutil.process_iter():
        try:
            with process.oneshot():
                table[process.pid] = (process.ppid(), process.create_time(), process.status(), process)
        except psutil.Error:  # gone since the listing, or not ours to read
            continue
    return table


def _descendants(roots: set[int], table: dict[int, tuple[int, float, str, psutil.Process]]) -> dict[int, float]:
    """Every live process below `roots` (roots excluded): pid -> start time (a recycled pid is not the same)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, *_) in table.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, float] = {}
    pending = list(roots)
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found and table[child][2] not in _GONE:
                found[child] = table[child][1]
                pending.append(child)
    return found


def _carries(process: psutil.Process, variable: str, token: str) -> bool:
    """Whether the process's environment holds `variable`=`token` (False where it is gone or unreadable)."""
    try:
        return process.environ().get(variable) == token
    except psutil.Error:
        return False


def sweep(token: str, known: dict[int, float], spare: set[int], variable: str = TOKEN_ENV) -> int:
    """Freeze and SIGKILL the known processes, their children and every token holder (`variable`=`token` in its
    environment), until none has been seen for _QUIET_SECONDS; returns how many were stopped."""
    killed: set[int] = set()
    started = last_seen = time.monotonic()
    while time.monotonic() - last_seen < _QUIET_SECONDS and time.monotonic() - started < _LIMIT_SECONDS:
        table = _processes()
        alive = {pid for pid, begun in known.items() if pid in table and table[pid][1] == begun}
        alive |= {pid for pid, (_, _, state, process) in table.items()
                  if pid not in spare and state not in _GONE and _carries(process, variable, token)}
        alive -= spare
        for pid in alive:  # frozen first: a stopped process starts nothing new while its children are found
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        alive |= set(_descendants(alive, _processes())) - spare
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= alive
        known = {}
        if alive:
            last_seen = time.monotonic()
        time.sleep(0.02)
    return len(killed)


def _watch(token: str, harness_pid: int, variable: str = TOKEN_ENV, always: bool = False) -> int:
    """Watch the harness; sweep when it dies (`always`: when it ends in any way, as a test session does)."""
    import ctypes

    state = {"sweep": False, "done": False}

    def on_death(signum, frame):
        state["sweep"] = state["done"] = True

    def on_quiet(signum, frame):
        state["sweep"], state["done"] = always, True

    def on_term(signum, frame):  # a group-wide SIGTERM: the harness stops its own experiments while it lives
        if os.getppid() != harness_pid:
            state["sweep"] = state["done"] = True

    signal.signal(_DEATH_SIGNAL, on_death)
    signal.signal(_QUIET_SIGNAL, on_quiet)
    signal.signal(signal.SIGTERM, on_term)
    for ignored in (signal.SIGINT, signal.SIGHUP):  # a terminal's Ctrl-C or hang-up is for the harness
        signal.signal(ignored, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(_DEATH_SIGNAL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return 1
    if os.getppid() != harness_pid:  # the harness died before the request took effect
        state["sweep"] = state["done"] = True
    own = {os.getpid(), harness_pid}
    known: dict[int, float] = {}
    began = time.monotonic()
    while not state["done"]:
        known.update(_descendants({harness_pid}, _processes()))
        known.pop(os.getpid(), None)
        # A signal's handler sets the state during the sleep, which then runs out (PEP 475): the sweep starts
        # within one period of the harness's death.
        time.sleep(_LOOK_EVERY[time.monotonic() - began > _STARTING_SECONDS])
    if state["sweep"]:
        count = sweep(token, known, spare=own, variable=variable)
        if count and not always:
            print(f"tunebench watchdog: the harness (pid {harness_pid}) died; stopped {count} process(es) of its "
                  "matrix", file=sys.stderr, flush=True)
    return 0


class Guardian:
    """Context manager in the harness: sets the run's token and keeps the watchdog for the run's duration.
    `variable` names the token's environment variable; `always`: the watchdog sweeps however the harness ends
    (the test suite's own guardian, tests/conftest.py: a test's helpers never outlive the session)."""

    def __init__(self, variable: str = TOKEN_ENV, always: bool = False):
        self.token = uuid.uuid4().hex
        self.process: subprocess.Popen | None = None
        self.variable, self.always = variable, always

    def __enter__(self) -> Guardian:
        os.environ[self.variable] = self.token  # inherited by everything the run starts from now on
        if sys.platform.startswith("linux"):  # PR_SET_PDEATHSIG: Linux only
            try:
                self.process = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), self.token,
                                                 str(os.getpid()), self.variable, str(int(self.always))],
                                                stdin=subprocess.DEVNULL, close_fds=True)
            except OSError as exc:  # the parent-death chains still hold; only the Ray instance may linger
                logger.warning("no matrix watchdog (%s): a SIGKILLed harness may leave Ray workers for seconds", exc)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(_QUIET_SIGNAL)
            try:
                self.process.wait(timeout=_LIMIT_SECONDS + 5)  # `always`: its sweep runs first
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if os.environ.get(self.variable) == self.token:
            del os.environ[self.variable]


if __name__ == "__main__":
    sys.exit(_watch(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4], *(bool(int(a)) for a in sys.argv[4:5])))
