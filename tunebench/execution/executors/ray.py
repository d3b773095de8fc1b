"""The Ray executor: one Ray task per experiment, asking for the experiment's GPUs (CPUs on a CPU matrix).

Each task runs the same launch path as the local executor (`python -m tunebench.experiment.train`, or
`accelerate launch` / torchrun for several processes) on the node Ray chose, with CUDA_VISIBLE_DEVICES set to
the GPUs Ray assigned. Every node needs tunebench and its dependencies installed (same versions as the
driver). Experiment folders reach the driver's results directory either through Ray's object store (default
`--ray_transfer object`: the task returns its folder as a tar archive) or by writing straight into it
(`--ray_transfer shared`: the results directory must be the same path on every node, e.g. NFS).

An experiment that needs more GPUs (or CPUs) than the largest node has spans several nodes
(executors/ray_spanning.py): a placement group with one bundle per node, the launcher on each node with its
node rank. One that no even split over the nodes can hold is `skipped` with the reason.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tunebench.errors import InputError, InputProblem
from tunebench.execution.executors import ClusterQueue
from tunebench.execution.executors.nodes import no_layout_reason, node_layout
from tunebench.execution.executors.ray_settings import RaySettings
from tunebench.execution.executors.ray_spanning import SpanningRun
from tunebench.execution.executors.ray_tasks import run_task, unpack
from tunebench.execution.experiment_run import RunOptions, base_row
from tunebench.execution.processes import stop_description
from tunebench.execution.scheduling import overlap_columns
from tunebench.experiment.spec import ExperimentSpec
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

_REPO = str(Path(__file__).resolve().parents[3])


def ray_missing() -> str | None:
    """Why `--executor ray` cannot run here, or None. Found, not imported: Ray reads its settings (RAY_AUTH_MODE)
    once at import, and connect() may still set them."""
    if "ray" not in sys.modules and importlib.util.find_spec("ray") is None:
        return "Ray is not installed (it is an optional dependency)"
    return None


def use_token_if_available() -> None:
    """Send this machine's Ray token when joining a cluster by address. Ray itself turns token authentication
    on only for a cluster it finds without an address; given one, a driver without RAY_AUTH_MODE=token is
    refused by a token cluster after ~20 s of retries, even with the token at hand. Sending a token to a cluster
    without authentication is harmless (measured: it joins), so a token present and RAY_AUTH_MODE unset means
    token mode. An explicit RAY_AUTH_MODE is always left as it is."""
    if os.environ.get("RAY_AUTH_MODE"):
        return
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(token_path):
        os.environ["RAY_AUTH_MODE"] = "token"
        logger.info("Ray: a token is available (%s) and RAY_AUTH_MODE is unset: joining with RAY_AUTH_MODE=token",
                    "RAY_AUTH_TOKEN" if os.environ.get("RAY_AUTH_TOKEN") else token_path)


class RayExecutor(ClusterQueue):
    name = "ray"
    Settings = RaySettings
    extra = requirement = "ray"

    missing = staticmethod(ray_missing)

    def connect(self, address: str | None, timeout: float) -> None:
        """Join the cluster at `address` (or start a local Ray when None) now. An unreachable cluster is an
        InputError within `timeout` seconds: ray.init itself retries forever, so joining runs in a thread that
        is abandoned (a daemon) when it has not answered in time."""
        if address:
            use_token_if_available()  # before Ray's first import: its config reads RAY_AUTH_MODE once, then caches it
        import ray

        if ray.is_initialized():
            return
        where = address or "a new local Ray instance"
        fix = ("start the cluster (ray start --head) and give its host:port; a cluster with token authentication "
               "needs its token here too: in ~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")
        if address and ":" in address and not address.startswith("ray://") and address != "auto":
            host, _, port = address.rpartition(":")
            try:  # a refused or unroutable address answers at once, before Ray's own retries
                socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, 10.0)).close()
            except (OSError, ValueError) as exc:
                raise InputError([InputProblem("command line", "--ray_address", f"cannot reach {address}: "
                                               f"{getattr(exc, 'strerror', None) or exc}", fix)]) from None
        # Workers import tunebench: from this checkout on a local cluster; installed on remote nodes.
        env = {"PYTHONPATH": os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p)}
        outcome: dict[str, BaseException] = {}

        def join() -> None:
            try:
                # "local", not None: None would join whichever cluster `ray start` last made on this machine
                # (another user's, another CI job's) instead of the new local instance the option promises.
                ray.init(address=address or "local", runtime_env={"env_vars": env}, log_to_driver=False)
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc

        if not address:
            # Starting a local Ray: in this (the main) thread, never a passing one. Ray's processes die with the
            # thread that started them (parent-death signal), so a thread that ends would take the new instance.
            join()
        else:
            thread = threading.Thread(target=join, name="ray-connect", daemon=True)
            thread.start()
            thread.join(timeout)
        if address and thread.is_alive():
            raise InputError([InputProblem("command line", "--ray_address", f"no answer from the Ray cluster at "
                                           f"{where} within {timeout:g} s (--ray_connect_timeout)", fix)])
        if "error" in outcome:
            first = (str(outcome["error"]).strip().splitlines() or [type(outcome["error"]).__name__])[0][:300]
            raise InputError([InputProblem("command line", "--ray_address", f"cannot join {where}: {first}", fix)])

    def check(self, options: RunOptions, experiments: list[ExperimentSpec]) -> None:
        """Before anything runs (cli.plan): the cluster must answer (an InputError otherwise)."""
        settings = options.settings_of(RaySettings)
        self.connect(settings.address, settings.connect_timeout)

    def run(self, experiments: list[ExperimentSpec], options: RunOptions,
            finished: Callable[[int, dict[str, Any]], None], progress) -> None:
        import ray

        settings = options.settings_of(RaySettings)
        self.connect(settings.address, settings.connect_timeout)
        tasks = _Tasks(self.name, experiments, options, finished, progress)
        try:
            tasks.submit(_node_capacities(ray.nodes()))
            tasks.wait(self._collect)
        except BaseException as exc:
            for index in tasks.cancel():
                self._interrupted(experiments[index], options, stop_description(exc))
            raise
        finally:
            for run in tasks.spans.values():
                run.close()  # the placement group goes, however the run ended

    def _interrupted(self, experiment: ExperimentSpec, options: RunOptions, reason: str) -> None:
        self._interrupted_row(experiment, options, reason, "ran on Ray (its task was cancelled)")

    def _collect(self, ref, experiment: ExperimentSpec, options: RunOptions, intervals, index: int) -> dict[str, Any]:
        import ray

        try:
            row, archive, where = ray.get(ref)
        except ray.exceptions.RayError as exc:  # node died, worker crashed, task failed in the harness
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            logger.warning("%s: Ray task failed: %s", experiment.folder_name, reason)
            return {**base_row(experiment, options), "status": Status.ERROR, "executor": self.name,
                    "error_messages": f"ray: {type(exc).__name__}: {reason}"}
        if archive is not None:
            shutil.rmtree(options.output_dir / experiment.folder_name, ignore_errors=True)
            unpack(archive, options.output_dir)
        intervals[index] = (where["start"], where["end"])
        row.update({"executor": self.name, "ray_node": where["node"]})
        return row


def _node_capacities(nodes: list[dict]) -> dict[str, list[float]]:
    """GPUs and CPUs of every live node. A node counts for GPU work only with a CPU for the task that waits for
    its launcher."""
    alive = [n["Resources"] for n in nodes if n.get("Alive")]
    return {"GPU": [r.get("GPU", 0) for r in alive if r.get("CPU", 0) >= 1],
            "CPU": [r.get("CPU", 0) for r in alive]}


class _Tasks:
    """The Ray tasks of one matrix: one per experiment that a node holds, a SpanningRun (a task per node) for one
    wider than any node, and each row handed to `finished` when its task returns."""

    def __init__(self, executor: str, experiments: list[ExperimentSpec], options: RunOptions,
                 finished: Callable[[int, dict[str, Any]], None], progress):
        self.executor, self.experiments, self.options = executor, experiments, options
        self.finished, self.progress = finished, progress
        self.pending: dict[Any, int] = {}
        self.spans: dict[int, SpanningRun] = {}  # experiments spanning nodes, by index
        self.span_refs: dict[Any, int] = {}
        self.intervals: dict[int, tuple[float, float | None]] = {}
        self.rows: dict[int, dict[str, Any]] = {}

    def submit(self, capacities: dict[str, list[float]]) -> None:
        import ray

        remote = ray.remote(max_retries=0)(run_task)
        # Largest first, as the local scheduler does: the wide experiments are the hard ones to place late.
        for index in sorted(range(len(self.experiments)), key=lambda i: -self.experiments[i].num_gpus):
            experiment, options = self.experiments[index], self.options
            kind = "GPU" if experiment.device_type == "cuda" else "CPU"
            if experiment.num_gpus <= max(capacities[kind], default=0):
                resources = ({"num_gpus": experiment.num_gpus, "num_cpus": 1} if kind == "GPU"
                             else {"num_cpus": experiment.num_gpus})
                self.pending[remote.options(**resources).remote(experiment, options)] = index
                self.progress.submitted(index, "Ray")  # queued in Ray until its resources free up: not known to run
                continue
            shape = node_layout(experiment.num_gpus, capacities[kind])
            row = {**base_row(experiment, options), "executor": self.executor}
            if shape is None:
                reason = no_layout_reason(experiment.num_gpus, kind, capacities[kind], "the Ray cluster")
                self.finished(index, {**row, "status": Status.SKIPPED, "error_messages": reason})
                continue
            self.spans[index] = SpanningRun(experiment, options, shape, row)
            self.span_refs.update({ref: index for ref in self.spans[index].start()})
            self.progress.submitted(index, f"Ray, {shape.describe(kind)}")  # placed when its nodes free up

    def wait(self, collect) -> None:
        """Until every task returned: rows as they come (`collect(ref, experiment, options, intervals, index)`)."""
        import ray

        while self.pending or self.span_refs:
            ready, _ = ray.wait([*self.pending, *self.span_refs], num_returns=1, timeout=0.5)
            for ref in ready:
                if ref in self.pending:
                    index = self.pending.pop(ref)
                    self.rows[index] = collect(ref, self.experiments[index], self.options, self.intervals, index)
                    self.rows[index].update(self._overlaps(index))
                    self.finished(index, self.rows[index])
                else:
                    self._advance(ref)
            for run in self.spans.values():
                run.tick()
        # A task's start is known only when it returns: count the overlaps again with every interval known.
        for index in self.intervals:
            columns = self._overlaps(index)
            if any(self.rows[index].get(name) != value for name, value in columns.items()):
                self.rows[index].update(columns)
                self.finished(index, self.rows[index])

    def _overlaps(self, index: int) -> dict[str, object]:
        """concurrent_* of a row whose interval is known (an error row without one has none)."""
        if index not in self.intervals:
            return {}
        return overlap_columns(self.intervals, index, [e.experiment_id for e in self.experiments])

    def _advance(self, ref) -> None:
        index = self.span_refs.pop(ref)
        run = self.spans[index]
        self.span_refs.update({new: index for new in run.advance(ref)})
        if run.row is None:
            return
        run.close()
        for stale in [r for r, i in self.span_refs.items() if i == index]:
            del self.span_refs[stale]
        self.rows[index] = dict(run.row)
        if run.interval():  # node 0 returned: when the experiment ran is known
            self.intervals[index] = run.interval()
            self.rows[index].update(self._overlaps(index))
        self.finished(index, self.rows[index])

    def cancel(self) -> list[int]:
        """Cancel every task still out; the indexes of the experiments they were running."""
        import ray

        for run in self.spans.values():
            if run.row is None:
                run.cancel(force=True)
        stopped = {*self.pending.values(), *(i for i, run in self.spans.items() if run.row is None)}
        for ref in self.pending:
            ray.cancel(ref, force=True)  # kills the worker; the experiment dies with it (PDEATHSIG)
        return sorted(stopped)
