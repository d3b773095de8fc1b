"""Experiment processes: run one in its own process group with a timeout, and kill every group when the harness
stops."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

logger = logging.getLogger(__name__)


@dataclass
class ProcessOutcome:
    returncode: int | None
    timed_out: bool
    wall_seconds: float
    started_unix: float = 0.0  # wall clock when the process was spawned


def kill_process_group(proc, grace_seconds: float = 10.0) -> None:
    """SIGTERM the whole group (launcher + every rank), then SIGKILL what is left: no orphans.

    `proc` is a Popen or a PreloadedProcess; its pid is its process group id (both start a new session).
    """
    if proc.poll() is not None and not _group_alive(proc.pid):
        return
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            if proc.poll() is not None:
                return
            os.kill(proc.pid, sig)  # a fork not yet in its own session: signal the process itself
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.05)
    proc.wait(timeout=5)


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in the group. Zombies count as gone: they hold no
    memory or GPU and are reaped by whoever inherited them."""
    for process in psutil.process_iter():
        try:
            if process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) and os.getpgid(process.pid) == pgid:
                return True
        except (psutil.Error, ProcessLookupError):  # gone since the listing
            continue
    return False


def run_process(launcher, command, stdout_path: Path, stderr_path: Path, timeout_seconds: float | None,
                session: RunSession | None = None, starting=None) -> ProcessOutcome:
    """Start `command` with `launcher` and wait for it, or for the timeout; on timeout or Ctrl-C the whole
    process group is killed. `session` (the run's) knows it while it runs, so that stopping the run ends it.
    `starting`: a context around the launcher's start (its registry's blame: a plugin that fails there is named)."""
    start, started_unix = time.monotonic(), time.time()
    with starting or contextlib.nullcontext():
        proc = launcher.start(command, stdout_path, stderr_path)
    return _wait(proc, start, started_unix, timeout_seconds, session or RunSession())


def stop_description(exc: BaseException) -> str:
    """What stopped the harness, for the rows of the experiments it interrupted."""
    signum = getattr(exc, "signum", None)
    if signum is not None:
        return signal.Signals(signum).name
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT (Ctrl-C)"
    return f"a harness error ({type(exc).__name__}: {str(exc)[:200]})"


class RunSession:
    """One harness run's live processes and why it is stopping (None while it runs normally).

    The executors' worker threads start experiment process groups; when the run is interrupted or terminated,
    `stop_all` ends every one of them and records why, so each interrupted experiment's row names the cause.
    One object per run (a tune search keeps one for all its batches, and its preload server), never module
    state: two runs in one Python process (a notebook, tune) never see each other's processes or stop reasons.
    """

    def __init__(self):
        self._running: set = set()
        self._lock = threading.Lock()
        self.stop_reason: str | None = None
        self._preload = None

    @property
    def preload(self):
        """The run's preload server (execution.preload), made on first use."""
        if self._preload is None:
            from tunebench.execution.preload import PreloadServer

            self._preload = PreloadServer()
        return self._preload

    def add(self, proc) -> None:
        with self._lock:
            self._running.add(proc)

    def discard(self, proc) -> None:
        with self._lock:
            self._running.discard(proc)

    def stop_all(self, grace_seconds: float = 3.0, reason: str = "a stop request") -> int:
        """Kill every running experiment's process group; returns how many there were."""
        self.stop_reason = reason
        with self._lock:
            running = list(self._running)
        for proc in running:
            kill_process_group(proc, grace_seconds=grace_seconds)
        return len(running)


def _wait(proc, start: float, started_unix: float, timeout_seconds: float | None,
          session: RunSession) -> ProcessOutcome:
    session.add(proc)
    try:
        returncode = proc.wait(timeout=timeout_seconds)
        # Ranks can outlive a launcher that exited early; reap the group either way.
        kill_process_group(proc, grace_seconds=2.0)
        return ProcessOutcome(returncode, False, time.monotonic() - start, started_unix)
    except subprocess.TimeoutExpired:
        logger.warning("experiment timed out after %.0f s; killing its process group", timeout_seconds)
        kill_process_group(proc)
        return ProcessOutcome(proc.returncode, True, time.monotonic() - start, started_unix)
    except BaseException:  # Ctrl-C, SIGTERM/SIGHUP turned into exceptions: stop the experiment first
        kill_process_group(proc, grace_seconds=3.0)
        raise
    finally:
        session.discard(proc)
