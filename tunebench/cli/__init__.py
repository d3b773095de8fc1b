"""Command line of benchmark.py: read the options, expand and validate the matrix, run it, write the CSVs."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path

from tunebench.api.matrix import Matrix, MatrixOptions, build
from tunebench.api.planning import plan_target
from tunebench.api.planning import predictions as api_predictions
from tunebench.cli.options import (
    OPTION_RANGES,
    booleans,
    build_parser,
    numbers,
    sbatch_arguments,
    split,
)
from tunebench.command_line import option_problems
from tunebench.errors import InputError, InputProblem
from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.guard import HarnessStopped, results_lock, stop_on_signals
from tunebench.execution.guardian import Guardian
from tunebench.execution.runner import run_matrix
from tunebench.experiment.arguments import parse_memory_logging
from tunebench.fileio import write_atomic
from tunebench.results import folder as results_folder
from tunebench.results import summaries as results

logger = logging.getLogger(__name__)

# Subcommands and the module whose main() runs each (imported only when used: start-up stays short).
SUBCOMMANDS = {"compare": "tunebench.results.compare_cli", "report": "tunebench.results.report",
               "tune": "tunebench.tune.command", "verify": "tunebench.verify.command",
               "history": "tunebench.history.command", "bisect": "tunebench.history.bisect_command"}


def resolve_device(device: str, gpus: list) -> str:
    """`--device` as run: cuda when asked, or on `auto` when nvidia-smi lists GPUs; else cpu."""
    return "cuda" if device == "cuda" or (device == "auto" and gpus) else "cpu"


def plan(options: argparse.Namespace):
    """Load, expand and validate; raises InputError with every problem found (the command line's and the files')."""
    problems: list[InputProblem] = []
    matrices = dict(
        num_gpus=numbers(options.num_gpus_matrix, "--num_gpus_matrix", problems) or [1],
        effective_batch_size=numbers(options.effective_batch_size_matrix, "--effective_batch_size_matrix", problems),
        max_seq_len=numbers(options.max_seq_len_matrix, "--max_seq_len_matrix", problems),
        packing=booleans(options.packing_matrix, problems),
        attn_implementation=split(options.attn_implementation_matrix) if options.attn_implementation_matrix else None,
    )
    try:
        memory_logging = parse_memory_logging(options.memory_logging)
    except ValueError as exc:
        problems.append(InputProblem("command line", "--memory_logging (or MEMORY_LOGGING)", str(exc),
                                     "e.g. --memory_logging scanner,nvidia"))
        memory_logging = set()
    memory_logging |= {"nvidia"} if options.log_nvidia_smi else set()
    memory_logging |= {"huggingface"} if options.log_memory_hf else set()
    problems += results_folder.check(options.results_output_path)
    sbatch_arguments(options.slurm_extra, problems)
    problems += option_problems(options, OPTION_RANGES)
    if options.executor != "local" and not options.dry_run:
        from tunebench.execution.executors import make_executor

        try:  # a missing optional dependency is an input error, before anything runs
            executor = make_executor(options.executor)
        except InputError as exc:
            problems += exc.problems
    matrix = build(MatrixOptions(
        scenarios=options.scenarios_config_path, defaults=options.defaults_config_path,
        framework_configs=options.framework_configs_path, accelerate_config=options.accelerate_config,
        device=options.device, run_only_scenarios=split(options.run_only_scenarios) if options.run_only_scenarios
        else None, include_slow=options.include_slow, memory_logging=frozenset(memory_logging),
        repeats=options.repeats, **matrices), problems)
    if options.executor != "local" and not options.dry_run:
        # Last: asking the cluster is the slowest check (joining Ray, sinfo). An unreachable cluster, or one the
        # experiments do not fit, is an input error within a bound.
        executor.check(run_options(options, matrix.gpus, memory_logging, {}), matrix.experiments)
    return matrix.experiments, matrix.device_type, matrix.gpus, memory_logging


def run_options(options: argparse.Namespace, gpus, memory_logging: set[str], predictions: dict) -> RunOptions:
    """What the runner and the executors take from the command line."""
    extra_env = {"TUNEBENCH_REQUIRE_DATA_CACHE": "1"} if options.no_data_processing else {}
    return RunOptions(
        output_dir=Path(options.results_output_path), accelerate_config_path=options.accelerate_config,
        timeout_seconds=options.timeout, dry_run=options.dry_run, resume=not options.no_resume,
        available_gpus=list(range(len(gpus))),  # CUDA ordinals under CUDA_DEVICE_ORDER=PCI_BUS_ID
        log_nvidia_smi="nvidia" in memory_logging, nvidia_smi_loop_ms=options.nvidia_smi_loop_ms,
        nvidia_smi_backend=options.nvidia_smi_backend, extra_env=extra_env, preload=not options.no_preload,
        executor=options.executor, max_concurrent=options.max_concurrent, cpu_slots=options.cpu_slots,
        exclusive_timing=options.exclusive_timing, ray_address=options.ray_address, ray_transfer=options.ray_transfer,
        ray_connect_timeout=options.ray_connect_timeout, slurm_partition=options.slurm_partition,
        slurm_account=options.slurm_account, slurm_time_limit=options.slurm_time_limit,
        slurm_extra=sbatch_arguments(options.slurm_extra, []), predictions=predictions,
        skip_predicted_oom=options.skip_predicted_oom,
    )


def predictions_for(options, experiments, gpus) -> dict:
    """pred_* columns per experiment_id, for the device given by --plan_device or the GPUs present."""
    return api_predictions(Matrix(experiments, "", gpus, MatrixOptions()), options.plan_device)


def _write_fit_map(options, experiments, gpus) -> int:
    """`plan --fit_map`: the largest micro-batch that fits, per model × framework config × PEFT × length."""
    from tunebench.planning.attention_kernels import architecture
    from tunebench.planning.fit_map import fit_map

    capacity, device_name = plan_target(options.plan_device, gpus)
    if capacity is None:
        raise InputError([InputProblem("command line", "--fit_map", "there is no GPU here to fit to",
                                       "give --plan_device (a GPU name or a size such as 80GiB)")])
    frame = fit_map(experiments, capacity, device_name, architecture(device_name))
    print(frame.drop(columns=["pred_note"]).to_string(index=False))
    path = Path(options.results_output_path) / results_folder.FIT_MAP
    write_atomic(path, frame.to_csv(index=False))
    print(f"wrote {path}")
    return 0


def _input_error(exc: InputError) -> int:
    print(f"tunebench: {len(exc.problems)} problem(s) in the input; nothing was run:", file=sys.stderr)
    for problem in exc.problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def _environment_error(exc: OSError) -> int:
    """A fault of the machine (disk full, permissions, an unreachable hub) rather than of the input: one line, exit 2."""
    from tunebench.cli.diagnosis import environment_line

    print(environment_line(exc), file=sys.stderr)
    return 2


def _write_plan(output_dir: Path, experiments, predictions) -> int:
    from tunebench.planning.plan_matrix import plan_table

    print(plan_table(experiments, predictions).to_string(index=False))
    frame = results.collect([{**e.describe(), **predictions.get(e.experiment_id, {})} for e in experiments])
    write_atomic(output_dir / results_folder.PLAN, frame.to_csv(index=False))
    print(f"wrote {output_dir / results_folder.PLAN}")
    return 0


def _write_pip_freeze(output_dir: Path) -> None:
    """The installed distributions, as `pip freeze` lists them (read from metadata: no subprocess)."""
    from importlib.metadata import distributions

    names = sorted({f"{d.metadata['Name']}=={d.version}" for d in distributions() if d.metadata["Name"]},
                   key=str.lower)
    write_atomic(output_dir / "pip-freeze.txt", "\n".join(names) + "\n")


def _run(options, experiments, device_type, gpus, memory_logging, predictions) -> int:
    """Claim and lock the results folder, run the matrix, and rebuild the CSVs from disk however it ends."""
    output_dir = Path(options.results_output_path)
    if options.repeats > 1:  # interleaved: a slow spell of the machine touches one run of many experiments
        from dataclasses import replace

        experiments = [replace(e, repeat=k) for k in range(1, options.repeats + 1) for e in experiments]
    settings = run_options(options, gpus, memory_logging, predictions)
    if device_type == "cpu":  # before the preload server starts: its forks keep the OpenMP pool it makes
        import os

        from tunebench.execution.launchers.base import CPU_WAIT_POLICY

        os.environ.setdefault("OMP_WAIT_POLICY", CPU_WAIT_POLICY)
    with stop_on_signals(), results_lock(output_dir):
        if options.overwrite and not options.dry_run:
            removed = results_folder.remove_previous_results(output_dir)
            print(f"--overwrite: removed {removed} earlier experiment folder(s) from {output_dir}/", flush=True)
        if not options.dry_run:
            _write_pip_freeze(output_dir)
        print(f"{len(experiments)} experiment(s) on {device_type} -> {output_dir}/", flush=True)
        order = [e.folder_name for e in experiments]
        try:
            rows = run_matrix(experiments, settings)
        except BaseException:
            # Every stop path (Ctrl-C, SIGTERM/SIGHUP, an executor error) leaves CSVs holding every experiment
            # on disk, the interrupted ones as error rows; a failure to write them must not hide the cause.
            if not options.dry_run:
                try:
                    results.write_summaries(output_dir, order)
                except OSError as exc:
                    logger.error("could not rebuild the CSVs in %s: %s", output_dir, exc)
            raise
        if not options.dry_run:
            frame = results.write_summaries(output_dir, order)
    if options.dry_run:
        frame = results.collect(rows)
        print(frame[[c for c in results.KEY_COLUMNS + ["effective_batch_size", "per_device_train_batch_size",
                     "gradient_accumulation_steps", "max_seq_len", "packing", "peft_method"] if c in frame.columns]]
              .to_string(index=False))
        print(f"dry run: wrote command.sh for each experiment under {output_dir}/, ran nothing")
        return 0
    print(results.summary_table(results.collect(rows)))
    earlier = len(frame) - len(rows)
    print(f"wrote {output_dir / results_folder.RAW_SUMMARY} and {output_dir / results_folder.BENCHMARKS}"
          + (f" ({len(frame)} rows: {earlier} from earlier runs in this folder)" if earlier > 0 else ""))
    if options.compare_with:
        from tunebench.results.compare import CompareInputError, compare_paths
        try:
            outcome = compare_paths(options.compare_with, str(output_dir), str(output_dir / "compare"),
                                    thresholds=options.compare_threshold)
        except CompareInputError as exc:
            print(f"tunebench compare: {exc}", file=sys.stderr)
            return 2
        print(outcome.markdown)
        return outcome.exit_code
    return 0


def _needs_hub(options, planning_only: bool) -> bool:
    """Whether this command loads models (a dry run without predictions loads none)."""
    return planning_only or options.preload_models or not options.dry_run or options.plan or options.skip_predicted_oom


def _checked_run(options, planning_only: bool) -> int:
    experiments, device_type, gpus, memory_logging = plan(options)
    if _needs_hub(options, planning_only):
        from tunebench.execution.hub_access import matrix_problems

        # The data is read from the hub only when a run builds it.
        if problems := matrix_problems(experiments, data=not (options.dry_run or planning_only
                                                               or options.no_data_processing)):
            raise InputError(problems)
    if options.preload_models:
        from tunebench.execution.preparation import preload_models
        preload_models(experiments)
    if not (options.dry_run or planning_only):
        from tunebench.execution.preparation import preprocess_data
        preprocess_data(experiments, build=not options.no_data_processing)
    if planning_only and options.fit_map:
        with results_lock(Path(options.results_output_path)):
            return _write_fit_map(options, experiments, gpus)
    predictions = predictions_for(options, experiments, gpus) if planning_only or options.plan or \
        options.skip_predicted_oom else {}
    if planning_only:
        with results_lock(Path(options.results_output_path)):  # never into a folder a run holds
            return _write_plan(Path(options.results_output_path), experiments, predictions)
    return _run(options, experiments, device_type, gpus, memory_logging, predictions)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        from importlib import import_module
        return import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
    planning_only = bool(argv) and argv[0] == "plan"
    options = build_parser("benchmark.py plan" if planning_only else "benchmark.py").parse_args(
        argv[1:] if planning_only else argv)
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A run starts processes (Ray, the preload server, experiments): a watchdog takes them all along if the
    # harness is killed. A dry run and `plan` start none.
    watchdog = contextlib.nullcontext() if options.dry_run or planning_only else Guardian()
    try:
        with watchdog:
            return _checked_run(options, planning_only)
    except InputError as exc:
        return _input_error(exc)
    except HarnessStopped as exc:
        print(f"stopped by {exc}: every running experiment was stopped; the CSVs hold every experiment on disk "
              "(interrupted ones as error rows)", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("interrupted: every running experiment was stopped; the CSVs hold every experiment on disk "
              "(interrupted ones as error rows)", file=sys.stderr)
        return 130
    except OSError as exc:
        return _environment_error(exc)
