"""The Ray executor: one Ray task per experiment, asking for the experiment's GPUs (CPUs on a CPU matrix).

Each task runs the same launch path as the local executor (`python -m tunebench.experiment.train`, or
`accelerate launch` / torchrun for several processes) on the node Ray chose, with CUDA_VISIBLE_DEVICES set to
the GPUs Ray assigned. Every node needs tunebench and its dependencies installed (same versions as the
driver). Experiment folders reach the driver's results directory either through Ray's object store (default
`--ray_transfer object`: the task returns its folder as a tar archive) or by writing straight into it
(`--ray_transfer shared`: the results directory must be the same path on every node, e.g. NFS).

An experiment that needs more GPUs (or CPUs) than the largest node has is `skipped` with the reason: one
experiment spanning several nodes (placement group + multi-node rendezvous) is not supported yet.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tunebench.errors import InputError, InputProblem
from tunebench.execution.experiment_run import RunOptions, base_row, run_one
from tunebench.execution.processes import stop_description
from tunebench.execution.scheduling import overlaps
from tunebench.experiment.spec import ExperimentSpec
from tunebench.results.summaries import write_row

logger = logging.getLogger(__name__)

_REPO = str(Path(__file__).resolve().parents[3])


def ray_missing() -> str | None:
    """Why `--executor ray` cannot run here, or None."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed (it is an optional dependency)"
    return None


def _task(experiment: ExperimentSpec, options: RunOptions) -> tuple[dict[str, Any], bytes | None, dict[str, Any]]:
    """Runs on a Ray worker: the experiment through the normal launch path; returns (row, folder tar, where)."""
    import ray

    started = time.time()
    gpu_ids = [int(g) for g in ray.get_gpu_ids()] if experiment.device_type == "cuda" else []
    shared = options.ray_transfer == "shared"
    scratch = None if shared else Path(tempfile.mkdtemp(prefix="tunebench-ray-"))
    node_options = replace(options, output_dir=options.output_dir if shared else scratch, preload=False)
    try:
        row = run_one(experiment, gpu_ids, node_options)
        archive = None
        if not shared:
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
                tar.add(scratch / experiment.folder_name, arcname=experiment.folder_name,
                        filter=lambda info: None if "trainer_output" in info.name else info)
            archive = buffer.getvalue()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    where = {"node": ray.util.get_node_ip_address(), "gpus": gpu_ids, "start": started, "end": time.time()}
    return row, archive, where


class RayExecutor:
    name = "ray"

    def connect(self, address: str | None, timeout: float) -> None:
        """Join the cluster at `address` (or start a local Ray when None) now. An unreachable cluster is an
        InputError within `timeout` seconds: ray.init itself retries forever, so joining runs in a thread that
        is abandoned (a daemon) when it has not answered in time."""
        import ray

        if ray.is_initialized():
            return
        where = address or "a new local Ray instance"
        fix = ("start the cluster (ray start --head) and give its host:port; with token authentication the "
               "driver needs the cluster's token (RAY_AUTH_MODE=token and ~/.ray/auth_token or RAY_AUTH_TOKEN)")
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
                ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False)
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

    def run(self, experiments: list[ExperimentSpec], options: RunOptions,
            finished: Callable[[int, dict[str, Any]], None], progress) -> None:
        import ray

        self.connect(options.ray_address, options.ray_connect_timeout)
        largest = _largest_node(ray.nodes())
        remote = ray.remote(max_retries=0)(_task)
        pending: dict[Any, int] = {}
        # Largest first, as the local scheduler does: the wide experiments are the hard ones to place late.
        for index in sorted(range(len(experiments)), key=lambda i: -experiments[i].num_gpus):
            experiment = experiments[index]
            kind = "GPU" if experiment.device_type == "cuda" else "CPU"
            if experiment.num_gpus > largest[kind]:
                reason = (f"needs {experiment.num_gpus} {kind}(s) on one node, the largest Ray node has "
                          f"{largest[kind]:g}; experiments spanning several nodes are not supported yet")
                finished(index, {**base_row(experiment, options), "status": "skipped", "error_messages": reason,
                                 "executor": self.name})
                continue
            resources = ({"num_gpus": experiment.num_gpus, "num_cpus": 1} if kind == "GPU"
                         else {"num_cpus": experiment.num_gpus})
            pending[remote.options(**resources).remote(experiment, options)] = index
            progress.submitted(index, "Ray")  # queued in Ray until its resources free up: not known to run
        intervals: dict[int, tuple[float, float | None]] = {}
        rows: dict[int, dict[str, Any]] = {}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                for ref in ready:
                    index = pending.pop(ref)
                    rows[index] = self._collect(ref, experiments[index], options, intervals, index)
                    finished(index, rows[index])
            # A task's start is known only when it returns: count the overlaps again with every interval known.
            for index in intervals:
                if rows[index].get("concurrent_experiments") != overlaps(intervals, index):
                    rows[index]["concurrent_experiments"] = overlaps(intervals, index)
                    finished(index, rows[index])
        except BaseException as exc:
            reason = stop_description(exc)
            for ref, index in pending.items():
                ray.cancel(ref, force=True)  # kills the worker; the experiment dies with it (PDEATHSIG)
                experiment = experiments[index]
                row = {**base_row(experiment, options), "status": "error", "executor": self.name,
                       "error_messages": f"interrupted: tunebench was stopped by {reason} while this experiment "
                                         "ran on Ray (its task was cancelled); it runs again on resume"}
                folder = options.output_dir / experiment.folder_name
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                    write_row(folder, row, root=options.output_dir)
                except (OSError, ValueError) as error:
                    logger.error("%s: interrupted row not written: %s", experiment.folder_name, error)
            raise

    def _collect(self, ref, experiment: ExperimentSpec, options: RunOptions, intervals, index: int) -> dict[str, Any]:
        import ray

        try:
            row, archive, where = ray.get(ref)
        except ray.exceptions.RayError as exc:  # node died, worker crashed, task failed in the harness
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            logger.warning("%s: Ray task failed: %s", experiment.folder_name, reason)
            return {**base_row(experiment, options), "status": "error", "executor": self.name,
                    "error_messages": f"ray: {type(exc).__name__}: {reason}"}
        if archive is not None:
            target = options.output_dir / experiment.folder_name
            shutil.rmtree(target, ignore_errors=True)
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
                tar.extractall(options.output_dir, filter="data")
        intervals[index] = (where["start"], where["end"])
        row.update({"executor": self.name, "ray_node": where["node"],
                    "concurrent_experiments": overlaps(intervals, index)})
        return row


def _largest_node(nodes: list[dict]) -> dict[str, float]:
    alive = [n for n in nodes if n.get("Alive")]
    return {"GPU": max((n["Resources"].get("GPU", 0) for n in alive), default=0),
            "CPU": max((n["Resources"].get("CPU", 0) for n in alive), default=0)}
