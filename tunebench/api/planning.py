"""Memory predictions for a matrix from Python: `tunebench.plan(matrix)` is `benchmark.py plan` as a DataFrame,
`fit_map(matrix)` is `plan --fit_map`'s."""

from __future__ import annotations

import logging

from tunebench.api.checks import argument_problem, raise_problems
from tunebench.api.matrix import Matrix, MatrixOptions
from tunebench.api.words import api_words
from tunebench.errors import InputError, InputProblem

logger = logging.getLogger(__name__)

MAX_PLAN_DEVICE_BYTES = 64 * 1024**4  # no accelerator holds 64 TiB
_LONGEST_NAME = 200  # characters of a GPU name or size: anything longer is not one


def plan_device_problem(spec: str | None, smallest: int = 0) -> str | None:
    """Why `spec` names no device to plan for (a size such as 80GiB, or a known GPU name); None when it does.
    `smallest`: the fewest bytes accepted (0 GiB is a fit map's "not even 1"; tune needs a device with memory)."""
    from tunebench.planning.predict import device_capacity

    if not isinstance(spec, str) or not spec:
        return None
    if len(spec) > _LONGEST_NAME:
        return f"{len(spec):,} characters are neither a size (e.g. 80GiB) nor a GPU name"
    try:
        capacity = device_capacity(spec, None)
    except (ValueError, OverflowError) as exc:
        text = str(exc)
        return text.removeprefix("--plan_device ") if text.startswith("--plan_device") else \
            f"{spec!r} is not a size: {text}"
    if capacity is None or capacity < smallest or capacity > MAX_PLAN_DEVICE_BYTES:
        return f"{spec!r} is not a memory size a device has ({'>' if smallest else '>='} 0 and <= 64 TiB)"
    return None


def plan_target(plan_device: str | None, gpus: list) -> tuple[int | None, str | None]:
    """(capacity in bytes, device name) predictions are judged against: `plan_device`, else the GPUs here."""
    from tunebench.planning.predict import device_capacity

    if why := plan_device_problem(plan_device):
        raise InputError([InputProblem("command line", "--plan_device", why, "e.g. --plan_device 80GiB")])
    capacity = device_capacity(plan_device, gpus[0].memory_total_mib if gpus else None)
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

    _check_arguments("plan", matrix, plan_device)
    with api_words((MatrixOptions, "MatrixOptions"), plan_device="plan"):
        if found is None:
            check_models(matrix)
            found = predictions(matrix, plan_device)
    return summaries.collect([{**e.describe(), **found.get(e.experiment_id, {})} for e in matrix.experiments])


def fit_map(matrix: Matrix, plan_device: str | None = None):
    """The largest micro-batch predicted to fit, per model × framework config × PEFT × sequence length × GPUs
    (what `benchmark.py plan --fit_map` writes to fit_map.csv); InputError when there is no GPU to fit to."""
    _check_arguments("fit_map", matrix, plan_device)
    with api_words((MatrixOptions, "MatrixOptions"), plan_device="fit_map", fit_map="fit_map.plan_device"):
        return fit_map_frame(matrix, plan_device)


def fit_map_frame(matrix: Matrix, plan_device: str | None):
    """`fit_map`, its problems in the command line's words (the CLI's)."""
    from tunebench.planning.attention_kernels import architecture
    from tunebench.planning.fit_map import fit_map as search

    capacity, device_name = plan_target(plan_device, matrix.gpus)
    if capacity is None:
        raise InputError([InputProblem("command line", "--fit_map", "there is no GPU here to fit to",
                                       "give --plan_device (a GPU name or a size such as 80GiB)")])
    return search(matrix.experiments, capacity, device_name, architecture(device_name))


def _check_arguments(function: str, matrix: Matrix, plan_device: str | None) -> None:
    """The matrix and the device of a public planning function, of their types (InputError naming them)."""
    raise_problems([argument_problem(function, "matrix", matrix, Matrix, "build it with tunebench.Matrix.from_yaml"
                                     "(...) or tunebench.Matrix.from_scenarios(...)"),
                    argument_problem(function, "plan_device", plan_device, str | None,
                                     f"a size or a GPU name, e.g. tunebench.{function}(matrix, plan_device='80GiB')")])
