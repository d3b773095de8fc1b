"""Launchers start an experiment's processes: one module each, one line in LAUNCHERS to add another.

`python` (a new interpreter), `forkserver` (forked from the preload server: the default for one process),
`torchrun` (N ranks on CPU, gloo) and `accelerate` (N ranks on GPUs). `choose` picks one for an experiment; given
a `Rendezvous` (an experiment spanning machines), torchrun and accelerate start this node's part of it.
"""

from __future__ import annotations

import logging

from tunebench.execution.launchers.accelerate import AccelerateLauncher, AccelerateSettings
from tunebench.execution.launchers.base import LaunchCommand, Launcher, Rendezvous, command_script
from tunebench.execution.launchers.forkserver import ForkserverLauncher
from tunebench.execution.launchers.python import PythonLauncher
from tunebench.execution.launchers.torchrun import TorchrunLauncher, TorchrunSettings
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)

LAUNCHERS = {launcher.name: launcher for launcher in (PythonLauncher, ForkserverLauncher, TorchrunLauncher,
                                                      AccelerateLauncher)}

__all__ = ["LAUNCHERS", "LaunchCommand", "Launcher", "Rendezvous", "choose", "command_script"]


def choose(spec: ExperimentSpec, preload: bool, accelerate_config: str | None,
           node: Rendezvous | None = None) -> Launcher:
    """The launcher an experiment runs with: several processes need a launcher of ranks (this node's ranks when
    it spans machines); one is forked from the preload server unless preloading is off."""
    if spec.num_gpus > 1 or node is not None:
        if spec.device_type == "cpu":
            return TorchrunLauncher(TorchrunSettings(node=node))
        return AccelerateLauncher(AccelerateSettings(config_file=accelerate_config, node=node))
    return ForkserverLauncher() if preload else PythonLauncher()
