"""The CPU multi-process launcher: torchrun (torch.distributed.run) starting N ranks that train over gloo.

`accelerate launch --cpu` starts a single process (multi-CPU there means MPI); torchrun is what accelerate's
multi-GPU launcher runs underneath, and on CPU the Trainer then uses gloo.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tunebench.execution.launchers.base import ENTRY_MODULE, LaunchCommand, entry_argv, environment, free_port
from tunebench.execution.launchers.python import PythonLauncher
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TorchrunSettings:
    master_addr: str = "127.0.0.1"  # one node: the rendezvous is local


class TorchrunLauncher(PythonLauncher):
    name = "torchrun"

    def __init__(self, settings: TorchrunSettings | None = None):
        self.settings = settings or TorchrunSettings()

    def command(self, spec: ExperimentSpec, spec_path: Path, gpu_ids: list[int],
                extra_env: dict[str, str]) -> LaunchCommand:
        env, repro_env = environment(spec, gpu_ids, extra_env)
        arguments = entry_argv(spec_path)
        argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(spec.num_gpus), "--nnodes",
                "1", "--master_addr", self.settings.master_addr, "--master_port", str(free_port()), "-m",
                ENTRY_MODULE, *arguments]
        return LaunchCommand(argv, env, repro_env, os.getcwd(), arguments)
