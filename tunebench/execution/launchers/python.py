"""The plain launcher: one process, `python -m tunebench.experiment.train --spec spec.json`, in a new interpreter."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from tunebench.execution.launchers.base import (
    LaunchCommand,
    LaunchContext,
    entry_argv,
    environment,
    python_entry,
)
from tunebench.experiment.spec import ExperimentSpec
from tunebench.lifetime.parent_death import preexec_dying_with_parent

logger = logging.getLogger(__name__)


class PythonLauncher:
    name = "python"
    multi_process = False  # starts one process: the experiment's only rank

    @classmethod
    def for_run(cls, context: LaunchContext) -> PythonLauncher:
        return cls()

    def command(self, spec: ExperimentSpec, spec_path: Path, gpu_ids: list[int],
                extra_env: dict[str, str]) -> LaunchCommand:
        env, repro_env = environment(spec, gpu_ids, extra_env)
        arguments = entry_argv(spec_path)
        return LaunchCommand([*python_entry(), *arguments], env, repro_env, os.getcwd(), arguments)

    def start(self, command: LaunchCommand, stdout_path: Path, stderr_path: Path):
        """A new session (the harness kills the whole group) that dies with the harness (PR_SET_PDEATHSIG)."""
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            return subprocess.Popen(command.argv, env=command.env, cwd=command.cwd, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, preexec_fn=preexec_dying_with_parent())
