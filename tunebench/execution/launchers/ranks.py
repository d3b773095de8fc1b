"""What the launchers of ranks share (torchrun on CPU, accelerate on GPUs): one command that starts an experiment's
processes, `python -m <launcher module> <layout> -m tunebench.experiment.train --spec <folder>/spec.json`; each
launcher gives its module and its layout (how many ranks, where they meet, this node's part)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from tunebench.execution.launchers.base import ENTRY_MODULE, LaunchCommand, entry_argv, environment
from tunebench.execution.launchers.python import PythonLauncher
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)

ELASTIC_LOGS = "torchelastic"  # a folder of the experiment's (results.folder.EXPERIMENT_TREES)


class RanksLauncher(PythonLauncher):
    """A launcher of an experiment's ranks (this node's ranks when it spans machines), started as one process group."""

    multi_process = True
    module = ""  # the launcher run with `python -m`

    def layout(self, spec: ExperimentSpec) -> list[str]:
        """The launcher's own arguments: the ranks, their rendezvous, its settings."""
        raise NotImplementedError

    def command(self, spec: ExperimentSpec, spec_path: Path, gpu_ids: list[int],
                extra_env: dict[str, str]) -> LaunchCommand:
        env, repro_env = environment(spec, gpu_ids, extra_env)
        arguments = entry_argv(spec_path)
        # torchelastic's logs go into the experiment folder: by default each run left a torchelastic_* folder in
        # the temporary directory (torchrun and accelerate launch both take --log_dir)
        logs = ["--log_dir", str(Path(spec_path).resolve().parent / ELASTIC_LOGS)]
        argv = [sys.executable, "-m", self.module, *logs, *self.layout(spec), "-m", ENTRY_MODULE, *arguments]
        return LaunchCommand(argv, env, repro_env, os.getcwd(), arguments)
