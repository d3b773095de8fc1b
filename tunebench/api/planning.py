"""Memory predictions for a matrix from Python: `tunebench.plan(matrix)` is `benchmark.py plan` as a DataFrame,
`fit_map(matrix)` is `plan --fit_map`'s."""

from __future__ import annotations

import logging

from tunebench.api.matrix import Matrix
from tunebench.errors import InputError, InputProblem

logger = logging.getLogger(__name__)


def plan_target(plan_device: str | None, gpus: list) -> tuple[int | None, str | None]:
    """(capacity in bytes, device name) predictions are judged against: `plan_device`, else the GPUs here."""
    from tunebench.planning.predict import device_capacity

    try:
        capacity = device_capacity(plan_device, gpus[0].memory_total_mib if gpus else None)
    except ValueError as exc:
        raise InputError([InputProblem("command line", "--plan_device", str(exc), "e.g. --plan_device 80GiB")]) from None
    return capacity, plan_device or (gpus[0].name if gpus else None)


def predictions(matrix: Matrix, plan_device: str | None = None) -> dict:
    """pred_* columns per experiment_id, for `plan_device` (a GPU name or a size such as 80GiB) or the GPUs here."""
    from tunebench.planning.plan_matrix import plan_experiments

    capacity, device_name = plan_target(plan_device, matrix.gpus)
    if capacity is None and any(e.device_type == "cuda" for e in matrix.experiments):
        logger.warning("no GPU here and no --plan_device: predictions without a fit verdict")
    return plan_experiments(matrix.experiments, capacity, host_budget=bool(plan_device), device_name=device_name)


def check_models(matrix: Matrix) -> None:
    """Every hub model of the matrix answers (asked once each); InputError naming the ones that do not."""
    from tunebench.execution.hub_access import matrix_problems

    problems = matrix_problems(matrix.experiments, data=False)
    if problems:
        raise InputError(problems)


def plan(matrix: Matrix, plan_device: str | None = None, found: dict | None = None):
    """One row per experiment: its settings and the `pred_*` columns (what `benchmark.py plan` writes to plan.csv).
    Raises InputError when a model cannot be resolved here. `found`: predictions already made for this matrix."""
    from tunebench.results import summaries

    if found is None:
        check_models(matrix)
        found = predictions(matrix, plan_device)
    return summaries.collect([{**e.describe(), **found.get(e.experiment_id, {})} for e in matrix.experiments])


def fit_map(matrix: Matrix, plan_device: str | None = None):
    """The largest micro-batch predicted to fit, per model × framework config × PEFT × sequence length × GPUs
    (what `benchmark.py plan --fit_map` writes to fit_map.csv); InputError when there is no GPU to fit to."""
    from tunebench.planning.attention_kernels import architecture
    from tunebench.planning.fit_map import fit_map as search

    capacity, device_name = plan_target(plan_device, matrix.gpus)
    if capacity is None:
        raise InputError([InputProblem("command line", "--fit_map", "there is no GPU here to fit to",
                                       "give --plan_device (a GPU name or a size such as 80GiB)")])
    return search(matrix.experiments, capacity, device_name, architecture(device_name))
