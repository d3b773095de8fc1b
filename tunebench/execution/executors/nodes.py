"""Experiments that span nodes: how one splits over a cluster's nodes, and how its nodes' rows and files become one.

Shared by the cluster executors (Ray, Slurm). Every node runs the same launcher with its node rank; global rank
0 (on node 0) writes results.json with every rank's figures already gathered, so node 0's row is the row unless
a node failed. Ranks on other nodes write their per-rank files (scan.rank<r>.json, error_rank<r>.json) into
their node's folder (`nodes/<r>/`); `gather_node_files` moves them up so the experiment folder holds every
rank's files, as on one machine.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.execution.experiment_run import node_folder
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

RANK_FILES = ("scan*.json", "error_rank*.json")
NODES_FOLDER = "nodes"


@dataclass(frozen=True)
class NodeShape:
    """nodes × processes per node (GPUs, or processes on a CPU matrix)."""

    nodes: int
    per_node: int

    def describe(self, kind: str) -> str:
        return f"{self.nodes} nodes × {self.per_node} {kind}(s)"


def node_layout(count: int, capacities: list[float]) -> NodeShape | None:
    """The fewest nodes that hold `count` processes split evenly (every node the same number, as torchrun and
    accelerate need), given each node's capacity; None when no even split fits."""
    for nodes in range(1, len(capacities) + 1):
        if count % nodes:
            continue
        per_node = count // nodes
        if sum(1 for capacity in capacities if capacity >= per_node) >= nodes:
            return NodeShape(nodes, per_node)
    return None


def no_layout_reason(count: int, kind: str, capacities: list[float], where: str) -> str:
    """Why `count` processes fit on no even split of these nodes, in one line."""
    sizes = sorted((c for c in capacities if c > 0), reverse=True)
    shown = ", ".join(f"{c:g}" for c in sizes[:8]) + (" …" if len(sizes) > 8 else "")
    return (f"needs {count} {kind}(s): no even split over the nodes of {where} fits ({len(sizes)} node(s) with "
            f"{kind}s: {shown or 'none'})")


# How a node's outcome ranks as the cause of a failed experiment: a node that died (or whose worker did) is the
# cause of its peers' connection errors; an OOM is a cause; a node cancelled by tunebench is a consequence.
_DIED, _OOM, _FAILED, _CANCELLED = 0, 1, 2, 3


@dataclass
class NodeOutcome:
    """One node's end: its row (None when its task never returned one) or the failure of the task itself."""

    node_rank: int
    row: dict[str, Any] | None = None
    failure: str | None = None  # the task/job failed outside the experiment (node died, cancelled, …)
    failure_status: str = "error"  # the row's class for that failure (`timeout` when a job hit its time limit)
    cancelled: bool = False  # tunebench stopped it after another node failed
    where: str = ""  # the node's address

    def ok(self) -> bool:
        return self.failure is None and self.row is not None and self.row.get("status") in (Status.OK, Status.DRY_RUN)

    def severity(self) -> int:
        if self.cancelled:
            return _CANCELLED
        if self.failure is not None:
            return _DIED
        return _OOM if self.row.get("status") == Status.OOM else _FAILED


def merge_node_rows(base: dict[str, Any], outcomes: list[NodeOutcome]) -> dict[str, Any]:
    """One row from every node's outcome, `outcomes` in the order the nodes ended: node 0's row when every node
    succeeded; else node 0's row (or `base`) with the status and message of the cause, naming its node."""
    by_rank = {o.node_rank: o for o in outcomes}
    first = by_rank.get(0)
    row = dict(first.row) if first is not None and first.row is not None else dict(base)
    if outcomes and all(o.ok() for o in outcomes):
        return row
    failed = [o for o in outcomes if not o.ok()]
    # Stable: among equally severe causes, the node that ended first (the others then lost their peer).
    cause = min(failed, key=lambda o: o.severity()) if failed else None
    if cause is None:  # no node ended at all (stopped before any returned)
        return {**row, "status": Status.ERROR, "error_messages": "no node of this experiment returned"}
    where = f"node {cause.node_rank}" + (f" ({cause.where})" if cause.where else "")
    if cause.failure is not None:
        status, message = cause.failure_status, cause.failure
    else:
        status, message = cause.row.get("status", "error"), cause.row.get("error_messages", "")
    row.update(status=status, error_messages=f"{where}: {message}")
    return row


def gather_node_files(experiment_folder: Path, nodes: int) -> None:
    """Move every other node's per-rank files up into the experiment folder (each rank's name is its own)."""
    for rank in range(1, nodes):
        source = node_folder(experiment_folder, rank)
        if not source.is_dir():
            continue
        for pattern in RANK_FILES:
            for path in sorted(source.glob(pattern)):
                if path.is_file() and not path.is_symlink():
                    os.replace(path, experiment_folder / path.name)


def clear_node_folders(experiment_folder: Path) -> None:
    """An earlier attempt's node folders (it may have spanned more nodes): gone before a new attempt starts."""
    target = experiment_folder / NODES_FOLDER
    if target.is_symlink():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
