"""What a Slurm cluster offers, asked before anything is submitted: sbatch present, the partition, its nodes' sizes.

`check` turns every reason a matrix cannot go to the cluster into one InputProblem (exit 2, nothing run):
no `sbatch` here, a controller that does not answer, a partition that does not exist, an experiment wider than
the nodes can hold. Every query is `sinfo` with a timeout, argv only (no shell).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from tunebench.errors import InputProblem
from tunebench.execution.executors.nodes import NodeShape, no_layout_reason, node_layout
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)

SINFO_TIMEOUT_SECONDS = 10.0  # a controller that is down answers in a few seconds; a hung one must not hold us
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")  # gpu:8, gpu:h100:8(S:0-1), several per node


@dataclass(frozen=True)
class SlurmNode:
    name: str
    cpus: int
    gpus: int


class SlurmUnavailable(Exception):
    """Slurm cannot be asked (no sinfo, no answer): the message says why, in one line."""


def _sinfo(arguments: list[str]) -> str:
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        raise SlurmUnavailable("no `sinfo` on this machine's PATH")
    try:
        done = subprocess.run([sinfo, "--noheader", *arguments], capture_output=True, text=True,
                              timeout=SINFO_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"sinfo did not answer within {SINFO_TIMEOUT_SECONDS:g} s") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise SlurmUnavailable(f"sinfo failed: {first[:300]}")
    return done.stdout


def partitions() -> list[str]:
    """The cluster's partitions (the default one marked `*` by sinfo, unmarked here)."""
    return sorted({line.strip().rstrip("*") for line in _sinfo(["--format", "%P"]).splitlines() if line.strip()})


def nodes(partition: str | None) -> list[SlurmNode]:
    """Every node of the partition (of the cluster when None), once each, with its CPUs and GPUs."""
    where = ["--partition", partition] if partition else []
    found: dict[str, SlurmNode] = {}
    for line in _sinfo([*where, "--Node", "--format", "%N|%c|%G"]).splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        gpus = sum(int(count) for count in _GPU_GRES.findall(parts[2].strip()))
        found[parts[0]] = SlurmNode(parts[0], int(parts[1]), gpus)
    return list(found.values())


def local_nodes(slots_per_node: int, gpus: int) -> list[SlurmNode]:
    """submitit's local cluster: this machine, as pseudo-nodes of `slots_per_node` processes (CPU) so that a test
    can place an experiment on several "nodes" of one machine; its GPUs as one node."""
    cores = os.cpu_count() or 1
    slots = max(1, slots_per_node)
    return [SlurmNode(f"local{i}", slots, gpus if i == 0 else 0) for i in range(max(1, cores // slots))]


def capacities(found: list[SlurmNode], device_type: str) -> list[float]:
    return [float(n.gpus) for n in found] if device_type == "cuda" else [float(n.cpus) for n in found]


def shapes(experiments: list[ExperimentSpec], found: list[SlurmNode]) -> dict[str, NodeShape | None]:
    """Each experiment's nodes × processes per node on these nodes (folder name → shape, None: does not fit)."""
    return {e.folder_name: node_layout(e.num_gpus, capacities(found, e.device_type)) for e in experiments}


def check(experiments: list[ExperimentSpec], partition: str | None, local: bool, slots_per_node: int,
          gpus: int) -> list[InputProblem]:
    """Every reason these experiments cannot be submitted, as InputProblems (empty: go)."""
    fix = "run tunebench where `sbatch` and `sinfo` reach the cluster (a login node), or pick another --executor"
    if local:
        found = local_nodes(slots_per_node, gpus)
        where = "this machine (submitit's local cluster)"
    else:
        if shutil.which("sbatch") is None:
            return [InputProblem("command line", "--executor slurm", "no `sbatch` on this machine's PATH: Slurm is "
                                 "not installed here or not reachable", fix)]
        try:
            known = partitions()
            if partition and partition not in known:
                return [InputProblem("command line", "--slurm_partition", f"no partition {partition!r} on this "
                                     f"cluster", f"use one of: {', '.join(known) or '(sinfo lists none)'}")]
            found = nodes(partition)
        except SlurmUnavailable as exc:
            return [InputProblem("command line", "--executor slurm", f"Slurm does not answer: {exc}", fix)]
        where = f"partition {partition!r}" if partition else "the cluster"
    misfits = [e for e in experiments if node_layout(e.num_gpus, capacities(found, e.device_type)) is None]
    if not misfits:
        return []
    widest = max(misfits, key=lambda e: e.num_gpus)
    kind = "GPU" if widest.device_type == "cuda" else "CPU"
    others = f" (and {len(misfits) - 1} other experiment(s))" if len(misfits) > 1 else ""
    return [InputProblem("command line", "--executor slurm", f"experiment {widest.folder_name} "
                         + no_layout_reason(widest.num_gpus, kind, capacities(found, widest.device_type), where)
                         + others, "choose a smaller --num_gpus_matrix or a partition with more or larger nodes")]
