"""Launchers start an experiment's processes, chosen by name from LAUNCHERS: one module each plus one registry
line here, or an entry point of another package (group `tunebench.launchers`, tunebench.plugins).

`python` (a new interpreter), `forkserver` (forked from the preload server: the default for one process),
`torchrun` (N ranks on CPU, gloo) and `accelerate` (N ranks on GPUs). `choose` picks one for an experiment: the
run's `--launcher` where it fits the experiment (a multi-process launcher for several processes, another for
one), else the default for its shape; given a `Rendezvous` (an experiment spanning machines), torchrun and
accelerate start this node's part of it.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from tunebench.execution.launchers.base import (
    LaunchCommand,
    LaunchContext,
    Launcher,
    Rendezvous,
    command_script,
)
from tunebench.experiment.spec import ExperimentSpec
from tunebench.plugins import Registry
from tunebench.vocabulary import Launcher as LauncherName

logger = logging.getLogger(__name__)

LAUNCHERS = Registry("launcher", "tunebench.launchers", {
    LauncherName.PYTHON: "tunebench.execution.launchers.python:PythonLauncher",
    LauncherName.FORKSERVER: "tunebench.execution.launchers.forkserver:ForkserverLauncher",
    LauncherName.TORCHRUN: "tunebench.execution.launchers.torchrun:TorchrunLauncher",
    LauncherName.ACCELERATE: "tunebench.execution.launchers.accelerate:AccelerateLauncher",
})

__all__ = ["LAUNCHERS", "LaunchCommand", "LaunchContext", "Launcher", "Rendezvous", "choose", "chosen",
           "command_script", "default_launcher"]


class LauncherChoice(Protocol):
    """What choosing an experiment's launcher reads of the run's options (execution.experiment_run.RunOptions)."""

    launcher: str | None  # the run's --launcher (None: the default for each experiment's shape)
    preload: bool
    accelerate_config_path: str | None
    session: Any  # the run's RunSession: its `preload` server


def needs_fresh_interpreter(spec: ExperimentSpec) -> bool:
    """fms-acceleration's plugins change peft's and transformers' classes for the whole process and allow one custom
    loader per process (tunebench.experiment.fms.seam): such an experiment never runs in a fork of the preload
    server, whose imports it would find already patched or would patch for the next fork's parent."""
    return bool(spec.entry) and bool(spec.value("model", "fms_plugins"))


def default_launcher(spec: ExperimentSpec, preload: bool, node: Rendezvous | None = None) -> str:
    """Several processes need a launcher of ranks (this node's ranks when the experiment spans machines): torchrun
    on CPU, accelerate on GPUs; one process is forked from the preload server unless preloading is off or the
    experiment needs a fresh interpreter."""
    if spec.num_gpus > 1 or node is not None:
        return LauncherName.TORCHRUN if spec.device_type == "cpu" else LauncherName.ACCELERATE
    return LauncherName.FORKSERVER if preload and not needs_fresh_interpreter(spec) else LauncherName.PYTHON


def chosen(spec: ExperimentSpec, options: LauncherChoice, node: Rendezvous | None = None) -> str:
    """The name of the launcher this experiment runs with under `options` (execution.experiment_run.RunOptions):
    the run's `--launcher` where it fits the experiment, else the default for its shape."""
    default = default_launcher(spec, options.preload, node)
    if not options.launcher or options.launcher == default:
        return default
    if options.launcher == LauncherName.FORKSERVER and needs_fresh_interpreter(spec):
        logger.info("%s: fms-acceleration's plugins patch the whole process: started with %s, not forked from the "
                    "preload server", spec.folder_name, default)
        return default
    wanted = LAUNCHERS.load(options.launcher)
    several = spec.num_gpus > 1 or node is not None
    return options.launcher if bool(getattr(wanted, "multi_process", False)) == several else default


def choose(spec: ExperimentSpec, options: LauncherChoice, node: Rendezvous | None = None) -> Launcher:
    """The launcher this experiment runs with under `options`, made for the run (a plugin that fails to load or
    to be made is a PluginError naming it)."""
    name = chosen(spec, options, node)
    context = LaunchContext(options.accelerate_config_path, node, options.session.preload)
    launcher_class = LAUNCHERS.load(name)
    with LAUNCHERS.blame(name, "to start"):
        return launcher_class.for_run(context)
