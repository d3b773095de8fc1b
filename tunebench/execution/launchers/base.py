"""What every launcher shares: the command it builds (argv + environment, never a shell string) and its repro."""

from __future__ import annotations

import logging
import os
import shlex
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tunebench.experiment.spec import ExperimentSpec
from tunebench.fileio import library_cache_environment
from tunebench.lifetime.parent_death import LAUNCHED_GROUP_ENV
from tunebench.telemetry.environment import cuda_alloc_conf

logger = logging.getLogger(__name__)

ENTRY_MODULE = "tunebench.experiment.train"
# Variables a repro needs: they change what runs or how it is measured. Anything else in the harness's
# environment is inherited but not written into command.sh (it would leak unrelated, possibly secret, values).
_REPRO_ENV_PREFIXES = ("CUDA_", "NCCL_", "TORCH_", "PYTORCH_", "HF_", "TRANSFORMERS_", "ACCELERATE_", "OMP_",
                       "TOKENIZERS_", "SCANNER_", "TUNEBENCH_", "MASTER_", "NVSHMEM_")
_NOT_INHERITED = ("ACCELERATION_FRAMEWORK_CONFIG_FILE",)
_REPO = str(Path(__file__).resolve().parents[3])  # tunebench/execution/launchers/ → the repository


@dataclass
class LaunchCommand:
    """One experiment's command: what runs it and what command.sh shows."""

    argv: list[str]
    env: dict[str, str]  # complete environment of the child
    repro_env: dict[str, str]  # the subset written into command.sh
    cwd: str
    entry_argv: list[str]  # the training entry's own arguments (`--spec <folder>/spec.json`)


@dataclass(frozen=True)
class LaunchContext:
    """What a launcher is made from for one run: the accelerate config, this node's part of an experiment that
    spans machines (None on one machine), and the run's preload server."""

    accelerate_config: str | None = None
    node: Rendezvous | None = None
    preload: Any = None  # tunebench.execution.preload.PreloadServer


class Launcher(Protocol):
    """Starts an experiment's processes. `command` builds the argv; `start` runs it (a Popen-like process whose
    pid leads its own process group). `multi_process`: it starts the ranks of a multi-process experiment."""

    name: str
    multi_process: bool

    @classmethod
    def for_run(cls, context: LaunchContext) -> Launcher: ...

    def command(self, spec: ExperimentSpec, spec_path: Path, gpu_ids: list[int],
                extra_env: dict[str, str]) -> LaunchCommand: ...

    def start(self, command: LaunchCommand, stdout_path: Path, stderr_path: Path): ...


@dataclass(frozen=True)
class Rendezvous:
    """An experiment that spans machines: how many take part, which one this is, and where rank 0 listens."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int

    def processes_per_node(self, spec: ExperimentSpec) -> int:
        return spec.num_gpus // self.nnodes


def free_port(every_interface: bool = False) -> int:
    """An unused TCP port for torch.distributed's rendezvous (one per experiment: runs never collide). Ranks on
    other machines connect to rank 0's port through the network, so a multi-node rendezvous needs it free on
    every interface, not only loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("" if every_interface else "127.0.0.1", 0))
        return sock.getsockname()[1]


def entry_argv(spec_path: Path) -> list[str]:
    return ["--spec", str(Path(spec_path).resolve())]


CPU_WAIT_POLICY = "PASSIVE"


def environment(spec: ExperimentSpec, gpu_ids: list[int], extra_env: dict[str, str]) -> tuple[dict, dict]:
    """(the child's whole environment, the part command.sh writes): its GPUs, this checkout on the path."""
    repro_env: dict[str, str] = {}
    if spec.device_type == "cuda":
        # nvidia-smi numbers GPUs in PCI bus order; CUDA's default order ranks by speed. Pinning CUDA to PCI
        # order makes "GPU 3" mean the same device to CUDA, to nvidia-smi and to the user.
        repro_env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        repro_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
        repro_env.setdefault("NCCL_NVLS_ENABLE", os.environ.get("NCCL_NVLS_ENABLE", "0"))
        # Expandable segments unless the user chose: the default allocator ran out of memory at the edge on one
        # large request its fragmented cache could not place (planning.allocator_slack); `fits` assumes this.
        repro_env["PYTORCH_CUDA_ALLOC_CONF"] = cuda_alloc_conf()
    else:
        repro_env["CUDA_VISIBLE_DEVICES"] = ""
        # OpenMP threads that spin at every barrier fight any other process for the cores: on a loaded 2-core host
        # a 1-process run measured 186 tokens/s spinning, 8500 sleeping (tunebench.cli sets it for the preload
        # server too, whose forks inherit the thread pool it made).
        repro_env["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", CPU_WAIT_POLICY)
    repro_env.update(library_cache_environment())
    repro_env.update(extra_env)
    # The harness's own package must be importable by the child even when tunebench is not installed.
    python_path = [p for p in [repro_env.get("PYTHONPATH"), _REPO, os.environ.get("PYTHONPATH")] if p]
    repro_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(os.pathsep.join(python_path).split(os.pathsep)))
    for key, value in os.environ.items():
        if key.startswith(_REPRO_ENV_PREFIXES) and key not in repro_env:
            repro_env[key] = value
    # Not in command.sh: only under the harness does every rank die with the launcher that leads its group. fms's
    # AccelerationFramework reads ACCELERATION_FRAMEWORK_CONFIG_FILE when its own file is empty: an experiment runs
    # the plugins its spec names, never a user's leftover variable (tunebench.cli.settings says so once).
    inherited = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    return {**inherited, **repro_env, LAUNCHED_GROUP_ENV: "1"}, repro_env


def python_entry() -> list[str]:
    return [sys.executable, "-m", ENTRY_MODULE]


def command_script(command: LaunchCommand) -> str:
    """A runnable, exactly quoted repro: `bash command.sh` reruns the experiment."""
    lines = ["#!/usr/bin/env bash", "# Re-runs this experiment exactly as tunebench launched it.", "set -euo pipefail",
             f"cd {shlex.quote(command.cwd)}"]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(command.repro_env.items()))
    lines.append(f"env {env} \\\n  {shlex.join(command.argv)}")
    return "\n".join(lines) + "\n"
