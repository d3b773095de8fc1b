"""One Ray experiment across several nodes: a STRICT_SPREAD placement group, a rendezvous, a task per node, one row.

The placement group holds one bundle per node (that node's GPUs, or CPUs on a CPU matrix); a probe in the first
bundle picks rank 0's address and a free port there; then every bundle runs the experiment's launcher with its
node rank (`run_task` with a `Rendezvous`). The driver advances each such run as its object refs become ready,
side by side with the single-node tasks. A node that fails (or dies) fails the row; the other nodes get a grace
period to end by themselves (their ranks lose their peer), then their tasks are cancelled, which stops their
launchers (they die with their Ray worker: tunebench.lifetime.parent_death). The placement group is always removed.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import replace
from typing import Any

from tunebench.execution.executors.nodes import (
    NodeOutcome,
    NodeShape,
    clear_node_folders,
    gather_node_files,
    merge_node_rows,
)
from tunebench.execution.executors.ray_settings import RaySettings
from tunebench.execution.executors.ray_tasks import rendezvous_point, run_task, unpack
from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.launchers.base import Rendezvous
from tunebench.experiment.spec import ExperimentSpec
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

# After a node fails, how long the others may take to end by themselves (a rank notices its lost peer at its next
# collective), then how long a gentle cancel (KeyboardInterrupt: the task kills its launcher's process group and
# cleans its scratch folder) may take before the workers are killed outright.
PEER_GRACE_SECONDS = 30.0
CANCEL_GRACE_SECONDS = 15.0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


class SpanningRun:
    """The state of one experiment spanning nodes: placing → rendezvous → running → done (`row` set)."""

    def __init__(self, experiment: ExperimentSpec, options: RunOptions, shape: NodeShape, base: dict[str, Any]):
        self.experiment, self.options, self.shape, self.base = experiment, options, shape, base
        self.cuda = experiment.device_type == "cuda"
        self.folder = options.output_dir / experiment.folder_name
        self.stage = "placing"
        self.group = None
        self.node_ids: dict[int, str] = {}  # bundle (node rank) → Ray node id, once placed
        self.running: dict[Any, int] = {}  # node task ref → node rank
        self.outcomes: list[NodeOutcome] = []  # in the order the nodes ended
        self.archives: dict[int, bytes] = {}
        self.wheres: dict[int, dict[str, Any]] = {}
        self.failed_at: float | None = None
        self.cancel_level = 0  # 0 none, 1 gentle, 2 forced
        self.row: dict[str, Any] | None = None

    # ---------------------------------------------------------------------------------------------- stages
    def start(self) -> list:
        from ray.util.placement_group import placement_group

        if self.options.settings_of(RaySettings).transfer == "shared":
            clear_node_folders(self.folder)
        per = self.shape.per_node
        bundle = {"GPU": per, "CPU": 1} if self.cuda else {"CPU": per}
        self.group = placement_group([dict(bundle) for _ in range(self.shape.nodes)], strategy="STRICT_SPREAD",
                                     name=f"tunebench-{self.experiment.folder_name}")
        return [self.group.ready()]

    def advance(self, ref) -> list:
        """Handle a ref of this run that is ready; returns the refs it waits for next (none once `row` is set)."""
        import ray

        if self.stage == "running":
            self._node_ended(ref)
            return []
        try:
            if self.stage == "placing":
                ray.get(ref)
                table = ray.util.placement_group_table(self.group)
                self.node_ids = {int(k): v for k, v in table.get("bundles_to_node_id", {}).items()}
                self.stage = "rendezvous"
                probe = ray.remote(max_retries=0)(rendezvous_point)
                return [probe.options(num_cpus=0, scheduling_strategy=self._bundle(0)).remote()]
            address, port = ray.get(ref)
        except ray.exceptions.RayError as exc:
            self.row = {**self.base, "status": Status.ERROR,
                        "error_messages": f"ray: {self.stage} failed: {type(exc).__name__}: {_first_line(exc)}"}
            return []
        self.stage = "running"
        task = ray.remote(max_retries=0)(run_task)
        resources = {"num_gpus": self.shape.per_node, "num_cpus": 1} if self.cuda else {"num_cpus": self.shape.per_node}
        logger.info("%s: %s, rank 0 at %s:%d", self.experiment.folder_name, self.shape.describe(
            "GPU" if self.cuda else "CPU"), address, port)
        for rank in range(self.shape.nodes):
            node_options = replace(self.options, node=Rendezvous(self.shape.nodes, rank, address, port))
            ref = task.options(**resources, scheduling_strategy=self._bundle(rank)).remote(
                self.experiment, node_options
            )
            self.running[ref] = rank
        return list(self.running)

    def _bundle(self, index: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index,
                                                placement_group_capture_child_tasks=False)

    def _node_ended(self, ref) -> None:
        import ray

        rank = self.running.pop(ref)
        outcome = NodeOutcome(rank)
        try:
            outcome.row, archive, where = ray.get(ref)
            outcome.where = where["node"]
            self.archives[rank], self.wheres[rank] = archive, where
        except ray.exceptions.RayError as exc:  # node died, worker crashed, cancelled, harness error on the node
            outcome.failure = f"ray: {type(exc).__name__}: {_first_line(exc)}"
        # Once tunebench cancels the remaining nodes, their failures are its doing, not a cause.
        outcome.cancelled = self.cancel_level > 0 and not outcome.ok()
        self.outcomes.append(outcome)
        if not outcome.ok() and self.failed_at is None:
            self.failed_at = time.monotonic()
            logger.warning("%s: node %d ended with %s; the other nodes get %g s to end", self.experiment.folder_name,
                           rank, outcome.failure or outcome.row.get("status"), PEER_GRACE_SECONDS)
        if not self.running:
            self._finish()

    def tick(self) -> None:
        """Called while the driver waits: stops the other nodes of a failed run after their grace period."""
        if self.failed_at is None or not self.running:
            return
        waited = time.monotonic() - self.failed_at
        if self.cancel_level == 0 and waited > PEER_GRACE_SECONDS:
            self.cancel(force=False)
        elif self.cancel_level == 1 and waited > PEER_GRACE_SECONDS + CANCEL_GRACE_SECONDS:
            self.cancel(force=True)

    def cancel(self, force: bool) -> None:
        import ray

        self.cancel_level = max(self.cancel_level, 2 if force else 1)
        for ref in list(self.running):
            try:
                ray.cancel(ref, force=force)
            except Exception as exc:  # already finished, or its node is gone: nothing left to stop
                logger.debug("cancel of a node task failed: %s", exc)

    def _dead_nodes(self) -> set[int]:
        """Node ranks whose Ray node is no longer alive: the cause, whatever their peers reported first."""
        import ray

        try:
            alive = {n["NodeID"]: n.get("Alive", False) for n in ray.nodes()}
        except Exception:  # the cluster itself is unreachable: no verdict
            return set()
        return {rank for rank, node_id in self.node_ids.items() if not alive.get(node_id, False)}

    def _finish(self) -> None:
        for rank in self._dead_nodes():
            for outcome in self.outcomes:
                if outcome.node_rank == rank:
                    outcome.row, outcome.cancelled = None, False
                    outcome.failure = f"its Ray node ({self.node_ids[rank][:12]}) died; {outcome.failure or 'no row'}"
        if any(self.archives.values()):
            shutil.rmtree(self.folder, ignore_errors=True)
            for rank in sorted(self.archives):  # node 0 first: the experiment folder, then nodes/<r>/
                if self.archives[rank]:
                    unpack(self.archives[rank], self.options.output_dir)
        if self.folder.is_dir():
            gather_node_files(self.folder, self.shape.nodes)
        row = merge_node_rows(self.base, self.outcomes)
        row["ray_node"] = ",".join(self.wheres[r]["node"] for r in sorted(self.wheres))
        self.row = row

    def interval(self) -> tuple[float, float] | None:
        """When node 0 ran (the experiment's own wall time), for the overlap count."""
        where = self.wheres.get(0)
        return (where["start"], where["end"]) if where else None

    def close(self) -> None:
        """Remove the placement group: always, however the run ended (idempotent)."""
        if self.group is None:
            return
        from ray.util.placement_group import remove_placement_group

        group, self.group = self.group, None
        try:
            remove_placement_group(group)
        except Exception as exc:  # the cluster is going away: nothing of it is left to hold the bundles
            logger.warning("%s: placement group not removed: %s", self.experiment.folder_name, exc)
