"""Executors run the planned experiments of a matrix and hand back their rows: `local` (this machine, side by
side on disjoint GPU/slot sets) and `ray` (tasks on a Ray cluster). Adding one is adding a module here."""

from __future__ import annotations

from tunebench.errors import InputError, InputProblem

EXECUTORS = ("local", "ray")


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
                                           "pip install 'tunebench[ray]' (or pip install ray)")])
        return RayExecutor()
    raise InputError([InputProblem("command line", "--executor", f"unknown executor {name!r}",
                                   f"use one of: {', '.join(EXECUTORS)}")])
