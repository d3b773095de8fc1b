"""Memory predictions for a matrix from Python: `tunebench.plan(matrix)` is `benchmark.py plan` as a DataFrame,
`fit_map(matrix)` is `plan --fit_map`'s."""

from __future__ import annotations

import logging
import os

from tunebench.api.checks import argument_problem, raise_problems
from tunebench.api.matrix import Matrix, MatrixOptions
from tunebench.api.words import api_words
from tunebench.errors import InputError, InputProblem
from tunebench.vocabulary import Device

logger = logging.getLogger(__name__)

MAX_PLAN_DEVICE_BYTES = 64 * 1024**4  # no accelerator holds 64 TiB
_LONGEST_NAME = 200  # characters of a GPU name or size: anything longer is not one


def plan_device_problem(spec: str | None, smallest: int = 0, gpu_table: str | None = None) -> str | None:
    """Why `spec` names no device to plan for (a size such as 80GiB, or a GPU of the GPU table); None when it does.
    `smallest`: the fewest bytes accepted (0 GiB is a fit map's "not even 1"; tune needs a device with memory)."""
    from tunebench.planning.gpu_target import parse_size
    from tunebench.planning.gpu_target import plan_target as resolve

    if not isinstance(spec, str) or not spec:
        return None
    if len(spec) > _LONGEST_NAME:
        return f"{len(spec):,} characters are neither a size (e.g. 80GiB) nor a GPU name"
    capacity = parse_size(spec)
    if capacity is None:
        try:
            capacity = resolve(spec, (), gpu_table).capacity
        except InputError as exc:  # a bad --gpu_table is that option's problem, said where it is checked
            return next((p.message for p in exc.problems if "plan_device" in p.key), None)
    if capacity is None or capacity < smallest or capacity > MAX_PLAN_DEVICE_BYTES:
        return f"{spec!r} is not a memory size a device has ({'>' if smallest else '>='} 0 and <= 64 TiB)"
    return None


def plan_target(plan_device: str | None, gpus: list, gpu_table: str | None = None, option: str = "--plan_device"):
    """What predictions are judged against (planning.gpu_target.PlanTarget): `plan_device` as a size or a GPU of
    the one GPU table (merged with `gpu_table`), else the GPUs here."""
    from tunebench.planning.gpu_target import plan_target as resolve

    if why := plan_device_problem(plan_device, gpu_table=gpu_table):
        raise InputError([InputProblem("command line", option, why, "e.g. --plan_device 80GiB")])
    return resolve(plan_device, gpus, gpu_table, option)


def device_to_plan(device: Device, plan_device: str | None, runs_here: bool, gpu_table: str | None = None,
                   option: str = "--plan_device") -> Device:
    """The device a matrix is built for when `plan_device` is given: a GPU named means a CUDA plan, so `auto` becomes
    `cuda` where nothing runs here (`plan`, a dry run); `--device cpu` with a GPU named is a contradiction, and a
    name the GPU table lacks is an InputError of its own."""
    if not plan_target(plan_device, (), gpu_table, option).named:
        return device
    if device == Device.CPU:
        raise InputError([InputProblem("command line", f"{option} and --device", f"{option} {plan_device!r} names a "
                                                                                 f"GPU, "
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
    from tunebench.execution.experiment_run import skip_reason
    from tunebench.planning.plan_matrix import plan_experiments

    matrix = for_target(matrix, plan_device, runs_here, gpu_table, option)
    target = plan_target(plan_device, matrix.gpus, gpu_table, option)
    if target.capacity is None and any(e.device_type == "cuda" for e in matrix.experiments):
        logger.warning("no GPU here and no --plan_device: predictions without a fit verdict")
    # a row the run would skip for its settings (not for this machine's size) is said so, not planned: its fake
    # step would fail for the reason the run skips it, and say something else
    skipped = {e.experiment_id: reason for e in matrix.experiments if (reason := skip_reason(e, None))}
    return plan_experiments(matrix.experiments, target.capacity, host_budget=bool(plan_device),
                            device_name=target.name, gpu_arch=target.arch, skipped=skipped)


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

    _check_arguments("plan", matrix, plan_device, gpu_table)
    with api_words((MatrixOptions, "MatrixOptions"), plan_device="plan"):
        matrix = for_target(matrix, plan_device, False, gpu_table)
        if found is None:
            check_models(matrix)
            found = predictions(matrix, plan_device, gpu_table, runs_here=False)
    return summaries.collect([{**e.describe(), **found.get(e.experiment_id, {})} for e in matrix.experiments])


def fit_map(matrix: Matrix, plan_device: str | None = None, gpu_table: str | None = None):
    """The largest micro-batch predicted to fit, per model × framework config × PEFT × sequence length × GPUs
    (what `benchmark.py plan --fit_map` writes to fit_map.csv); a GPU named is planned for CUDA, as in `plan`.
    InputError when there is no GPU to fit to."""
    _check_arguments("fit_map", matrix, plan_device, gpu_table)
    with api_words((MatrixOptions, "MatrixOptions"), plan_device="fit_map", fit_map="fit_map.plan_device"):
        return fit_map_frame(matrix, plan_device, gpu_table)


def fit_map_frame(matrix: Matrix, plan_device: str | None, gpu_table: str | None = None):
    """`fit_map`, its problems in the command line's words (the CLI's)."""
    from tunebench.planning.fit_map import fit_map as search

    matrix = for_target(matrix, plan_device, False, gpu_table)
    target = plan_target(plan_device, matrix.gpus, gpu_table)
    if target.capacity is None:
        raise InputError([InputProblem("command line", "--fit_map", "there is no GPU here to fit to",
                                       "give --plan_device (a GPU name or a size such as 80GiB)")])
    return search(matrix.experiments, target.capacity, target.name, target.arch)


def _check_arguments(function: str, matrix: Matrix, plan_device: str | None, gpu_table: str | None) -> None:
    """The matrix, the device and the GPU table of a public planning function, of their types (InputError naming
    them, before anything is planned)."""
    raise_problems([argument_problem(function, "matrix", matrix, Matrix, "build it with tunebench.Matrix.from_yaml"
                                     "(...) or tunebench.Matrix.from_scenarios(...)"),
                    argument_problem(function, "plan_device", plan_device, str | None,
                                     f"a size or a GPU name, e.g. tunebench.{function}(matrix, plan_device='80GiB')"),
                    argument_problem(function, "gpu_table", gpu_table, str | os.PathLike | None,
                                     f"the path of a YAML file, e.g. tunebench.{function}(matrix, '80GiB', "
                                     "gpu_table='my-gpus.yaml')")])
