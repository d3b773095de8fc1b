"""Projection: throughput, phases, cost and memory of measured experiments on another GPU kind or on N GPUs."""


def project_rows(*args, **kwargs):
    """tunebench.planning.projection.project.project_rows (imported when used: the CLI starts fast)."""
    from tunebench.planning.projection.project import project_rows as run

    return run(*args, **kwargs)
