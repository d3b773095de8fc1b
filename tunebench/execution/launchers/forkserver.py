"""The preloaded launcher: one process forked from the preload server (torch, transformers, TRL imported once).

The same entry and arguments as the python launcher, so command.sh (which starts a new interpreter) reruns the
experiment exactly; only the start-up differs (tunebench.execution.preload explains the server).
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from tunebench.execution.launchers.base import LaunchCommand, LaunchContext
from tunebench.execution.launchers.python import PythonLauncher

logger = logging.getLogger(__name__)


class PreloadedProcess:
    """A Popen-like view (pid, poll, wait, returncode) of an experiment forked from the preload server."""

    def __init__(self, process):
        self.process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(f"preloaded experiment {self.pid}", timeout)
        return self.process.exitcode


class ForkserverLauncher(PythonLauncher):
    name = "forkserver"

    def __init__(self, server=None):
        self.server = server  # the run's PreloadServer (tunebench.execution.preload)

    @classmethod
    def for_run(cls, context: LaunchContext) -> ForkserverLauncher:
        return cls(context.preload)

    def start(self, command: LaunchCommand, stdout_path: Path, stderr_path: Path):
        if self.server is None:
            from tunebench.execution.preload import PreloadServer

            self.server = PreloadServer()
        return PreloadedProcess(self.server.start(command.entry_argv, command.env, command.cwd, str(stdout_path),
                                                  str(stderr_path)))
