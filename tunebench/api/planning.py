"""Memory predictions for a matrix from Python: `tunebench.plan(matrix)` is `benchmark.py plan` as a DataFrame,
`fit_map(matrix)` is `plan --fit_map`'s."""

from __future__ import annotations

import logging

from tunebench.api.matrix import Matrix
from tunebench.errors import InputError, InputProblem
from tunebench.vocabulary import Device

logger = logging.getLogger(__name__)


def plan_target(plan_device: str | None, gpus: list, gpu_table: str | None = None, option: str = "--plan_device"):
    """What predictions are judged against (planning.gpu_target.PlanTarget): `plan_device` as a size or a GPU of
    the one GPU table (merged with `gpu_table`), else the GPUs here."""
    from tunebench.planning.gpu_target import plan_target as resolve

    return resolve(plan_device, gpus, gpu_table, option)


def device_to_plan(device: Device, plan_device: str | None, runs_here: bool, gpu_table: str | None = None,
                   option: str = "--plan_device") -> Device:
    """The device a matrix is built for when `plan_device` is given: a GPU named means a CUDA plan, so `auto` becomes
    `cuda` where nothing runs here (`plan`, a dry run); `--device cpu` with a GPU named is a contradiction, and a
    name the GPU table lacks is an InputError of its own."""
    if not plan_target(plan_device, (), gpu_table, option).named:
        return device
    if device == Device.CPU:
        raise InputError([InputProblem("command line", f"{option} and --device", f"{option} {plan_device!r} names a GPU, "
                                       "which plans a CUDA run, but --device cpu asks for a CPU run",
                                       "drop --device cpu to plan for that GPU, or give a size (e.g. "
                                       f"{option} 80GiB) as the CPU run's memory budget")])
    return device if runs_here else Device.CUDA


def for_target(matrix: Matrix, plan_device: str | None, runs_here: bool, gpu_table: str | None = None,
               option: str = "--plan_device") -> Matrix:
    """The matrix to plan against `plan_device`: itself, or (a GPU named, `auto` resolved to the CPU, nothing to run
    here) the same matrix built for CUDA. InputError when the named GPU contradicts the matrix's device."""
    from tunebench.planning.gpu_target import names_gpu

    if not names_gpu(plan_device) or matrix.device_type == "cuda":
        return matrix
    device = device_to_plan(matrix.options.device, plan_device, runs_here, gpu_table, option)  # raises for cpu
    if runs_here:
        raise InputError([InputProblem("command line", f"{option} and --device", f"{option} {plan_device!r} names a "
                                       "GPU, but the experiments would run on this machine's CPU (--device auto "
                                       "found no GPU)", f"plan for it with `benchmark.py plan {option} ...` (nothing "
                                       "runs), run on a GPU host, or give a size (e.g. 80GiB) as the CPU budget")])
    return matrix.on_device(device)


def predictions(matrix: Matrix, plan_device: str | None = None, gpu_table: str | None = None,
                runs_here: bool = True, option: str = "--plan_device") -> dict:
    """pred_* columns per experiment_id, for `plan_device` (a GPU name or a size such as 80GiB) or the GPUs here.
    A GPU named is planned for CUDA (InputError where the matrix contradicts it; `runs_here`: the matrix's own
    experiments are about to run, so it cannot be rebuilt for CUDA)."""
    from tunebench.planning.plan_matrix import plan_experiments

    matrix = for_target(matrix, plan_device, runs_here, gpu_table, option)
    target = plan_target(plan_device, matrix.gpus, gpu_table, option)
    if target.capacity is None and any(e.device_type == "cuda" for e in matrix.experiments):
        logger.warning("no GPU here and no --plan_device: predictions without a fit verdict")
    return plan_experiments(matrix.experiments, target.capacity, host_budget=bool(plan_device),
                            device_name=target.name, gpu_arch=target.arch)


def check_models(matrix: Matrix) -> None:
    """Every hub model of the matrix answers (asked once each); InputError naming the ones that do not."""
    from tunebench.execution.hub_access import matrix_problems

    problems = matrix_problems(matrix.experiments, data=False)
    if problems:
        raise InputError(problems)


def plan(matrix: Matrix, plan_device: str | None = None, found: dict | None = None, gpu_table: str | None = None):
    """One row per experiment: its settings and the `pred_*` columns (what `benchmark.py plan` writes to plan.csv).
    A GPU named as `plan_device` plans the matrix for CUDA (a matrix built with device `auto` on a machine without
    GPUs is built again for CUDA; InputError with device `cpu`). Raises InputError when a model cannot be resolved
    here. `found`: predictions already made for this matrix."""
    from tunebench.results import summaries

    matrix = for_target(matrix, plan_device, False, gpu_table)
    if found is None:
        check_models(matrix)
        found = predictions(matrix, plan_device, gpu_table, runs_here=False)
    return summaries.collect([{**e.describe(), **found.get(e.experiment_id, {})} for e in matrix.experiments])


def fit_map(matrix: Matrix, plan_device: str | None = None, gpu_table: str | None = None):
    """The largest micro-batch predicted to fit, per model × framework config × PEFT × sequence length × GPUs
    (what `benchmark.py plan --fit_map` writes to fit_map.csv); a GPU named is planned for CUDA, as in `plan`.
    InputError when there is no GPU to fit to."""
    from tunebench.planning.fit_map import fit_map as search

    matrix = for_target(matrix, plan_device, False, gpu_table)
    target = plan_target(plan_device, matrix.gpus, gpu_table)
    if target.capacity is None:
        raise InputError([InputProblem("command line", "--fit_map", "there is no GPU here to fit to",
                                       "give --plan_device (a GPU name or a size such as 80GiB)")])
    return search(matrix.experiments, target.capacity, target.name, target.arch)
