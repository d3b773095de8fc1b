"""The GPU multi-process launcher: `accelerate launch` with the matrix's accelerate config, one rank per GPU.

With a `Rendezvous` (an experiment spanning machines) the same command runs on every node with its machine
rank; `--num_processes` stays the total over all machines, as accelerate counts it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from tunebench.execution.launchers.base import LaunchContext, Rendezvous, free_port
from tunebench.execution.launchers.ranks import RanksLauncher
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AccelerateSettings:
    config_file: str | None = None  # --accelerate_config (accelerate.yaml); the framework config adds its own args
    node: Rendezvous | None = None  # several machines: this machine's part


class AccelerateLauncher(RanksLauncher):
    name = "accelerate"
    module = "accelerate.commands.launch"

    @classmethod
    def for_run(cls, context: LaunchContext) -> AccelerateLauncher:
        return cls(AccelerateSettings(config_file=context.accelerate_config, node=context.node))

    def __init__(self, settings: AccelerateSettings | None = None):
        self.settings = settings or AccelerateSettings()

    def layout(self, spec: ExperimentSpec) -> list[str]:
        argv = []
        if self.settings.config_file:
            argv += ["--config_file", str(Path(self.settings.config_file).resolve())]
        node = self.settings.node
        if node is None:
            argv += ["--num_processes", str(spec.num_gpus), "--num_machines", "1", "--main_process_port",
                     str(free_port())]
        else:
            argv += ["--num_processes", str(spec.num_gpus), "--num_machines", str(node.nnodes), "--machine_rank",
                     str(node.node_rank), "--main_process_ip", node.master_addr, "--main_process_port",
                     str(node.master_port)]
        for key, value in spec.framework_config.accelerate_args.items():
            argv += [f"--{key}", str(value)]
        return argv
