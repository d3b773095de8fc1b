"""The local executor: experiments side by side on disjoint GPU sets of this machine (process slots on CPU).

Each running experiment has its own CUDA_VISIBLE_DEVICES, rendezvous port, sidecar (restricted to its GPUs)
and process group; a worker thread waits for it while the driver thread schedules, records rows and keeps the
CSVs current. With `max_concurrent` 1 (the default) experiments run one after another, in matrix order.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from tunebench.bounds import Range
from tunebench.execution.experiment_run import RunOptions, base_row, cpu_slots, run_one
from tunebench.execution.processes import stop_description
from tunebench.execution.scheduling import Job, Scheduler, SlotPool, overlap_columns
from tunebench.experiment.spec import ExperimentSpec
from tunebench.plugins import PluginError, cli_option
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalSettings:
    """The local executor's options."""

    max_concurrent: int = field(default=1, metadata=cli_option(
        "--max_concurrent", "local executor: up to N experiments at once on disjoint GPU sets (CPU: process slots)",
        Range(1, 4096), type=int, metavar="N"))


class LocalExecutor:
    name = "local"
    Settings = LocalSettings

    @staticmethod
    def missing() -> str | None:
        return None

    @staticmethod
    def concurrency(options: RunOptions) -> int:
        return options.settings_of(LocalSettings).max_concurrent

    def run(self, experiments: list[ExperimentSpec], options: RunOptions,
            finished: Callable[[int, dict[str, Any]], None], progress) -> None:
        cuda = experiments[0].device_type == "cuda"
        slots = list(options.available_gpus) if cuda else list(range(cpu_slots(options)))
        jobs = [
            Job(i, e.num_gpus, exclusive=options.exclusive_timing or e.exclusive) for i, e in enumerate(experiments)
        ]
        max_concurrent = self.concurrency(options)
        scheduler = Scheduler(jobs, SlotPool(slots), max_concurrent)
        if not cuda and max_concurrent > 1 and "OMP_NUM_THREADS" not in options.extra_env:
            # Side by side on CPU, every process's intra-op thread pool sized for the whole machine would
            # oversubscribe the cores many times over (spin-waiting threads): one slot, its share of cores.
            share = max(1, (os.cpu_count() or 1) // len(slots))
            options = replace(options, extra_env={**options.extra_env, "OMP_NUM_THREADS": str(share)})
        preload_seconds = self._warm_preload(experiments, options)
        intervals: dict[int, tuple[float, float | None]] = {}
        ids = [e.experiment_id for e in experiments]
        pool = ThreadPoolExecutor(max_workers=max_concurrent, thread_name_prefix="experiment")
        running: dict[Any, int] = {}

        def record(future, key: int) -> None:
            intervals[key] = (intervals[key][0], time.monotonic())
            row = self._row(future, experiments[key], options)
            row.update(overlap_columns(intervals, key, ids))
            row["executor"] = self.name
            if preload_seconds is not None and row.get("startup_preloaded"):
                row["startup_preload_seconds"] = preload_seconds
            finished(key, row)
            if isinstance(future.exception(), PluginError):  # a broken plugin fails every experiment: stop here
                raise future.exception()

        try:
            while not scheduler.done:
                for job in scheduler.next_ready():
                    experiment = experiments[job.key]
                    intervals[job.key] = (time.monotonic(), None)
                    where = f"{'GPUs' if cuda else 'slots'} {','.join(map(str, job.slots))}"
                    progress.started(job.key, where)
                    running[pool.submit(run_one, experiment, job.slots if cuda else [], options)] = job.key
                done, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    key = running.pop(future)
                    scheduler.finished(key)
                    record(future, key)
        except BaseException as exc:
            # Ctrl-C, or SIGTERM/SIGHUP turned into an exception by the CLI: the worker threads are blocked
            # in their experiments' waits, so the driver ends every running group itself; each worker then
            # returns its experiment's row as interrupted (experiment_run.run_one), which is recorded here.
            stopped = options.session.stop_all(reason=stop_description(exc))
            logger.warning("stopping: %d running experiment(s) killed", stopped)
            pool.shutdown(wait=True, cancel_futures=True)
            for future, key in running.items():
                if future.done() and not future.cancelled():
                    record(future, key)
            raise
        pool.shutdown(wait=True)

    @staticmethod
    def _warm_preload(experiments: list[ExperimentSpec], options: RunOptions) -> float | None:
        """Start the preload server once (its imports), when some experiment will be forked from it."""
        if not options.preload or not any(e.num_gpus == 1 for e in experiments):
            return None
        from tunebench.execution.preload import spawned_early

        started = options.session.preload.warm_seconds is not None
        if not started and not spawned_early():  # the longest silence of a run's start: said before, not only after
            logger.info("starting the preload server: torch, transformers and TRL are imported once (5-15 s)")
        seconds = options.session.preload.warm()
        if not started:
            logger.info("preload server ready: the run waited %.1f s for it (torch, transformers, TRL imported once "
                        "for the run)", seconds)
        return seconds

    @staticmethod
    def _row(future, experiment: ExperimentSpec, options: RunOptions) -> dict[str, Any]:
        try:
            return future.result()
        except PluginError as exc:  # named in one line; the run stops after recording it
            return {**base_row(experiment, options), "status": Status.ERROR, "error_messages": str(exc.problems[0])}
        except Exception as exc:  # a harness bug must cost one row, not the matrix
            logger.exception("experiment %s failed in the harness", experiment.folder_name)
            return {
                **base_row(experiment, options),
                "status": Status.ERROR,
                "error_messages": f"harness error: {exc!r}",
            }
