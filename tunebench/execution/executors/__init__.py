"""Executors run the planned experiments of a matrix and hand back their rows: `local` (this machine, side by
side on disjoint GPU/slot sets), `ray` (tasks on a Ray cluster) and `slurm` (a submitit job each), chosen by name
from EXECUTORS. Another executor is one module plus one registry line here, or an entry point of another package
(group `tunebench.executors`, tunebench.plugins).

An executor class has `name`, `Settings` (a dataclass of its own options, each field's command-line face in its
metadata: tunebench.plugins.cli_option), `missing()` (why it cannot run here: an extra not installed, else None),
`run(experiments, options, finished, progress)`, `concurrency(options)` (experiments it may run at once, for the
progress estimate) and, for a cluster, `check(options, experiments)`: the CLI calls it before anything runs, and
what it finds wrong is an InputError (exit 2)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tunebench.errors import InputError, InputProblem
from tunebench.plugins import Registry, UnknownPlugin
from tunebench.vocabulary import Executor

if TYPE_CHECKING:
    from tunebench.execution.experiment_run import RunOptions
    from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)

EXECUTORS = Registry("executor", "tunebench.executors", {
    Executor.LOCAL: "tunebench.execution.executors.local:LocalExecutor",
    Executor.RAY: "tunebench.execution.executors.ray:RayExecutor",
    Executor.SLURM: "tunebench.execution.executors.slurm:SlurmExecutor",
})


class ClusterQueue:
    """What the executors of a cluster (Ray's tasks, Slurm's jobs) share: the cluster queues the experiments, so how
    many run at once is the cluster's to decide (the progress estimate counts them one at a time)."""

    name = ""

    @staticmethod
    def concurrency(options: RunOptions) -> int:
        return 1

    def _interrupted_row(self, experiment: ExperimentSpec, options: RunOptions, reason: str, how: str) -> None:
        """The error row of an experiment the harness was stopped (by `reason`) while the cluster ran it (`how`);
        it runs again on resume. A row that cannot be written is logged, never raised: the stop goes on."""
        from tunebench.execution.experiment_run import base_row
        from tunebench.results.summaries import write_row
        from tunebench.vocabulary import Status

        row = {**base_row(experiment, options), "status": Status.ERROR, "executor": self.name,
               "error_messages": f"interrupted: tunebench was stopped by {reason} while this experiment {how}; it "
                                 "runs again on resume"}
        folder = options.output_dir / experiment.folder_name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_row(folder, row, root=options.output_dir)
        except (OSError, ValueError) as error:
            logger.error("%s: interrupted row not written: %s", experiment.folder_name, error)


def executor_class(name: str) -> Any:
    """The executor class called `name`; InputError (exit 2) naming the executors there are when it is unknown."""
    try:
        return EXECUTORS.load(name)
    except UnknownPlugin as exc:
        raise InputError([InputProblem("command line", "--executor", str(exc),
                                       f"use one of: {', '.join(EXECUTORS.names())}")]) from None


def make_executor(name: str):
    """The executor called `name`; InputError (exit 2) when it is unknown or its extra is not installed."""
    cls = executor_class(name)
    with EXECUTORS.blame(name, "to check what it needs"):
        missing = cls.missing() if hasattr(cls, "missing") else None
    if missing:
        extra, package = getattr(cls, "extra", None), getattr(cls, "requirement", None)
        fix = (f"from the tunebench clone: pip install -e '.[{extra}]' (or pip install {package})" if extra else
               f"install what the {name} executor needs")
        raise InputError([InputProblem("command line", f"--executor {name}", missing, fix)])
    with EXECUTORS.blame(name, "to start"):
        return cls()
