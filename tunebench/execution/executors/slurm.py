"""The Slurm executor: one submitit job per experiment, its nodes × GPUs per node taken from the experiment.

Inside the job the same launch path runs as locally (`run_one`: spec.json, command.sh, the launcher, the row),
into the results folder, which must be on a filesystem every node shares (as on every Slurm cluster). A job of
several nodes runs one task per node, each starting the launcher with its node rank; rank 0 listens on the
job's first host at a port derived from the job id (every node computes the same one). Jobs are named
`tunebench-<folder>` (squeue shows them); Ctrl-C or SIGTERM cancels every job still queued or running. A job
that Slurm ends (time limit, node failure, cancellation) is a row of its class with submitit's message.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tunebench.bounds import MAX_MINUTES, Range
from tunebench.errors import InputError, InputProblem
from tunebench.execution.executors import ClusterQueue
from tunebench.execution.executors.nodes import (
    NodeOutcome,
    NodeShape,
    clear_node_folders,
    gather_node_files,
    merge_node_rows,
    no_layout_reason,
)
from tunebench.execution.executors.slurm_cluster import SlurmNode, capacities, local_nodes, shapes
from tunebench.execution.executors.slurm_cluster import check as check_cluster
from tunebench.execution.executors.slurm_cluster import nodes as cluster_nodes
from tunebench.execution.experiment_run import RunOptions, base_row, cpu_slots, run_one, time_limit
from tunebench.execution.launchers.base import Rendezvous
from tunebench.execution.processes import stop_description
from tunebench.experiment.spec import ExperimentSpec
from tunebench.plugins import cli_option
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

_REPO = str(Path(__file__).resolve().parents[3])
JOB_FOLDER = "slurm"  # submitit's pickles and logs, inside the experiment folder
POLL_SECONDS = 1.0
# Slurm's limit must leave tunebench's own --timeout room to fire first (its row then says which experiment
# step hung); the margin covers the job's start-up (imports, data) around the experiment itself.
TIME_LIMIT_MARGIN_MINUTES = 10
_PORT_BASE, _PORT_SPAN = 20000, 30000


@dataclass(frozen=True)
class SlurmSettings:
    """The Slurm executor's options."""

    partition: str | None = field(default=None, metadata=cli_option(
        "--slurm_partition", "Slurm partition of the jobs (default the cluster's default); one sinfo does not list → "
        "exit 2", metavar="NAME"))
    account: str | None = field(default=None, metadata=cli_option(
        "--slurm_account", "Slurm account charged for the jobs", metavar="NAME"))
    time_limit: int | None = field(default=None, metadata=cli_option(
        "--slurm_time_limit", "each job's Slurm time limit in minutes (default `--timeout` + 10 min); a job reaching "
        "it is a `timeout` row", Range(1, MAX_MINUTES), type=int, metavar="MIN"))
    extra: dict[str, str] = field(default_factory=dict, metadata=cli_option(
        "--slurm_extra", "further sbatch arguments, e.g. `--slurm_extra cpus-per-task=16 constraint=h100` "
        "(repeatable)", read=lambda values, problems: sbatch_arguments(values, problems), nargs="+", action="extend",
        metavar="KEY=VALUE"))
    cluster: str = "slurm"  # submitit's cluster: slurm, or local (jobs on this machine: the tests' stand-in)


_SBATCH_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def sbatch_arguments(values: list[str] | None, problems: list[InputProblem]) -> dict[str, str]:
    """`--slurm_extra KEY=VALUE ...` as sbatch's `--KEY=VALUE` lines: a key is a word (sbatch's own spelling),
    a value is one line (it is written into the job script)."""
    found: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not _SBATCH_KEY.fullmatch(key) or not value or any(c in value for c in "\r\n\0"):
            problems.append(InputProblem("command line", "--slurm_extra", f"expected KEY=VALUE with an sbatch "
                                         f"option name and a one-line value, got {item!r}",
                                         "e.g. --slurm_extra cpus-per-task=16 constraint=h100"))
            continue
        found[key] = value
    return found


def submitit_missing() -> str | None:
    """Why `--executor slurm` cannot run here, or None."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed (it is an optional dependency)"
    return None


def job_port(job_id: str) -> int:
    """Rank 0's port, the same on every node of the job: from the job id, so jobs sharing a node differ."""
    digits = "".join(c for c in str(job_id) if c.isdigit()) or "0"
    return _PORT_BASE + int(digits) % _PORT_SPAN


def time_limit_minutes(options: RunOptions, experiment: ExperimentSpec | None = None) -> float:
    limit = options.settings_of(SlurmSettings).time_limit
    if limit is not None:
        return limit
    seconds = time_limit(experiment, options) if experiment is not None else options.timeout_seconds
    return math.ceil((seconds or 3600.0) / 60) + TIME_LIMIT_MARGIN_MINUTES


def run_job(experiment: ExperimentSpec, options: RunOptions) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs inside the job, once per node (one task per node): this node's part of the experiment."""
    import submitit

    environment = submitit.JobEnvironment()
    started = time.time()
    if environment.num_tasks > 1:
        # submitit's local cluster runs its "nodes" as tasks of this machine: rank 0 is local.
        host = environment.hostnames[0] if environment.cluster == "slurm" else "127.0.0.1"
        options = replace(options, node=Rendezvous(environment.num_tasks, environment.global_rank, host,
                                                   job_port(environment.job_id)))
    row = run_one(experiment, _job_gpus(experiment), replace(options, preload=False))
    return row, {"host": socket.gethostname(), "start": started, "end": time.time(), "job": environment.job_id}


def _job_gpus(experiment: ExperimentSpec) -> list:
    """The GPUs Slurm gave this task (CUDA_VISIBLE_DEVICES as Slurm set it), as the launcher numbers them."""
    if experiment.device_type != "cuda":
        return []
    visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return [int(g) if g.isdigit() else g for g in visible]


@contextlib.contextmanager
def _repo_importable():
    """Jobs unpickle `run_job` by its module: sbatch (and the local cluster) pass the submitting environment on,
    so this checkout goes on PYTHONPATH while jobs are submitted."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO, before) if p)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


class SlurmExecutor(ClusterQueue):
    name = "slurm"
    Settings = SlurmSettings
    extra, requirement = "slurm", "submitit"

    missing = staticmethod(submitit_missing)

    def check(self, options: RunOptions, experiments: list[ExperimentSpec]) -> None:
        """Before anything runs (cli.plan): sbatch here, the partition, every experiment fits the nodes."""
        settings = options.settings_of(SlurmSettings)
        problems = check_cluster(experiments, settings.partition, settings.cluster == "local",
                                 cpu_slots(options), len(options.available_gpus))
        if problems:
            raise InputError(problems)

    def _nodes(self, options: RunOptions) -> list[SlurmNode]:
        settings = options.settings_of(SlurmSettings)
        if settings.cluster == "local":
            return local_nodes(cpu_slots(options), len(options.available_gpus))
        return cluster_nodes(settings.partition)

    def _executor(self, folder: Path, experiment: ExperimentSpec, shape: NodeShape, options: RunOptions):
        import submitit

        limit = time_limit_minutes(options, experiment)
        signal_delay = max(2, min(90, int(limit * 60 / 4)))  # the job's warning before its time limit
        name = f"tunebench-{experiment.folder_name}"
        cuda = experiment.device_type == "cuda"
        settings = options.settings_of(SlurmSettings)
        if settings.cluster == "local":
            executor = submitit.LocalExecutor(folder=folder)
            executor.update_parameters(timeout_min=limit, tasks_per_node=shape.nodes, signal_delay_s=signal_delay,
                                       gpus_per_node=shape.per_node if cuda else 0)
            return executor
        executor = submitit.SlurmExecutor(folder=folder)
        parameters: dict[str, Any] = {"job_name": name, "time": max(1, math.ceil(limit)), "nodes": shape.nodes,
                                      "ntasks_per_node": 1, "signal_delay_s": signal_delay}
        if cuda:
            parameters["gpus_per_node"] = shape.per_node
        else:
            parameters["cpus_per_task"] = shape.per_node  # one process per CPU, as the local executor packs them
        if options.exclusive_timing or experiment.exclusive:  # timed alone: no other job on its nodes
            parameters["exclusive"] = True
        if settings.partition:
            parameters["partition"] = settings.partition
        if settings.account:
            parameters["account"] = settings.account
        if settings.extra:
            # submitit writes `key_name` as `--key-name`; one spelling, so that a --slurm_extra value replaces
            # the one set here (cpus-per-task) instead of adding a second line that sbatch might read last.
            parameters["additional_parameters"] = {k.replace("-", "_"): v for k, v in settings.extra.items()}
        executor.update_parameters(**parameters)
        return executor

    def run(self, experiments: list[ExperimentSpec], options: RunOptions,
            finished: Callable[[int, dict[str, Any]], None], progress) -> None:
        found = self._nodes(options)
        jobs: dict[int, tuple[Any, NodeShape]] = {}
        try:
            with _repo_importable():
                for index, experiment in enumerate(experiments):
                    shape = shapes([experiment], found)[experiment.folder_name]
                    kind = "GPU" if experiment.device_type == "cuda" else "CPU"
                    if shape is None:  # the cluster shrank since the check
                        reason = no_layout_reason(experiment.num_gpus, kind, capacities(
                            found, experiment.device_type), "the Slurm cluster")
                        finished(index, {**base_row(experiment, options), "status": Status.SKIPPED,
                                         "error_messages": reason, "executor": self.name})
                        continue
                    folder = options.output_dir / experiment.folder_name
                    folder.mkdir(parents=True, exist_ok=True)
                    clear_node_folders(folder)
                    try:
                        job = self._executor(folder / JOB_FOLDER, experiment, shape, options).submit(
                            run_job, experiment, options)
                    except Exception as exc:  # sbatch refused it (account, a --slurm_extra value, limits)
                        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
                        finished(index, {**base_row(experiment, options), "status": Status.ERROR, "executor": self.name,
                                         "error_messages": f"slurm: not submitted: {first}"})
                        continue
                    jobs[index] = (job, shape)
                    progress.submitted(index, f"Slurm job {job.job_id} ({shape.describe(kind)})")
            while jobs:
                for index in [i for i, (job, _) in jobs.items() if job.done()]:
                    job, shape = jobs.pop(index)
                    finished(index, self._collect(job, shape, experiments[index], options))
                if jobs:
                    time.sleep(POLL_SECONDS)
        except BaseException as exc:
            reason = stop_description(exc)
            for index, (job, _) in jobs.items():
                with contextlib.suppress(Exception):  # a job that already ended cannot be cancelled
                    job.cancel(check=False)
                self._interrupted(experiments[index], options, reason, job.job_id)
            raise

    def _collect(self, job, shape: NodeShape, experiment: ExperimentSpec, options: RunOptions) -> dict[str, Any]:
        """One row from the job's tasks (one per node), with its class when Slurm or submitit ended it."""
        tasks = [job.task(rank) for rank in range(shape.nodes)] if shape.nodes > 1 else [job]
        outcomes = []
        for rank, task in enumerate(tasks):
            outcome = NodeOutcome(rank)
            try:
                outcome.row, where = task.result()
                outcome.where = where["host"]
            except Exception as exc:  # submitit's FailedJobError / UncompletedJobError: the job's own words
                outcome.failure_status, outcome.failure = _job_failure(exc, job)
            outcomes.append(outcome)
        folder = options.output_dir / experiment.folder_name
        if folder.is_dir():
            gather_node_files(folder, shape.nodes)
        row = merge_node_rows(base_row(experiment, options), outcomes)
        row["executor"] = self.name
        return row

    def _interrupted(self, experiment: ExperimentSpec, options: RunOptions, reason: str, job_id: str) -> None:
        self._interrupted_row(experiment, options, reason, f"ran as Slurm job {job_id} (the job was cancelled)")


def _job_failure(exc: BaseException, job) -> tuple[str, str]:
    """(class, `slurm: job <id> (<state>): <submitit's message>`); `timeout` when the job reached its limit."""
    text = str(exc).strip()
    try:
        state = str(job.state)
    except Exception:  # sacct unavailable: the message alone decides
        state = "UNKNOWN"
    timed_out = state.upper().startswith("TIMEOUT") or "DUE TO TIME LIMIT" in text or "timed-out" in text
    return (
        Status.TIMEOUT if timed_out else Status.ERROR
    ), f"slurm: job {job.job_id} ({state}): {text[-1500:] or type(exc).__name__}"
