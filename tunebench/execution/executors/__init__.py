"""Executors run the planned experiments of a matrix and hand back their rows: `local` (this machine, side by
side on disjoint GPU/slot sets), `ray` (tasks on a Ray cluster) and `slurm` (a submitit job each). Adding one is
adding a module here. A cluster executor also has `check(options, experiments)`: the CLI calls it before anything
runs, and what it finds wrong is an InputError (exit 2)."""

from __future__ import annotations

from tunebench.errors import InputError, InputProblem

EXECUTORS = ("local", "ray", "slurm")


def make_executor(name: str):
    """The executor called `name`; InputError (exit 2) when it is unknown or its extra is not installed."""
    if name == "local":
        from tunebench.execution.executors.local import LocalExecutor

        return LocalExecutor()
    if name == "ray":
        from tunebench.execution.executors.ray import RayExecutor, ray_missing

        missing = ray_missing()
        if missing:
            raise InputError([InputProblem("command line", "--executor ray", missing,
                                           "from the tunebench clone: pip install -e '.[ray]' (or pip install ray)")])
        return RayExecutor()
    if name == "slurm":
        from tunebench.execution.executors.slurm import SlurmExecutor, submitit_missing

        missing = submitit_missing()
        if missing:
            raise InputError([InputProblem("command line", "--executor slurm", missing,
                                           "from the tunebench clone: pip install -e '.[slurm]' (or pip install submitit)")])
        return SlurmExecutor()
    raise InputError([InputProblem("command line", "--executor", f"unknown executor {name!r}",
                                   f"use one of: {', '.join(EXECUTORS)}")])
