"""The CPU multi-process launcher: torchrun (torch.distributed.run) starting N ranks that train over gloo.

`accelerate launch --cpu` starts a single process (multi-CPU there means MPI); torchrun is what accelerate's
multi-GPU launcher runs underneath, and on CPU the Trainer then uses gloo. With a `Rendezvous` (an experiment
spanning machines) the same command runs on every node, each with its node rank, meeting at rank 0's address.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tunebench.execution.launchers.base import LaunchContext, Rendezvous, free_port
from tunebench.execution.launchers.ranks import RanksLauncher
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TorchrunSettings:
    master_addr: str = "127.0.0.1"  # one node: the rendezvous is local
    node: Rendezvous | None = None  # several nodes: this node's part (master_addr then comes from it)


class TorchrunLauncher(RanksLauncher):
    name = "torchrun"
    module = "torch.distributed.run"

    @classmethod
    def for_run(cls, context: LaunchContext) -> TorchrunLauncher:
        return cls(TorchrunSettings(node=context.node))

    def __init__(self, settings: TorchrunSettings | None = None):
        self.settings = settings or TorchrunSettings()

    def layout(self, spec: ExperimentSpec) -> list[str]:
        node = self.settings.node
        if node is None:
            return ["--nproc_per_node", str(spec.num_gpus), "--nnodes", "1", "--master_addr",
                    self.settings.master_addr, "--master_port", str(free_port())]
        # Static rendezvous: global ranks are node_rank × processes per node + local rank, as on one node.
        return ["--nproc_per_node", str(node.processes_per_node(spec)), "--nnodes", str(node.nnodes),
                "--node_rank", str(node.node_rank), "--master_addr", node.master_addr,
                "--master_port", str(node.master_port)]
