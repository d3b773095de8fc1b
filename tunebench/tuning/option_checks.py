"""tune's option values checked in the user's words, before any scenario is built: each problem names the option.

tune turns its options into generated scenarios; a value the pipeline would refuse there comes back naming a
temporary file and one line per point of the space. Every value is therefore checked here first, by the same
functions the pipeline uses (model source, data source, ranges, the trainer's optimizer names).
"""

from __future__ import annotations

import difflib
import logging
import re
import typing
from pathlib import Path

from tunebench.errors import InputError, InputProblem
from tunebench.experiment.ranges import Range
from tunebench.hardware.gpus import load_table
from tunebench.tuning.options import TuneOptions

logger = logging.getLogger(__name__)

# Numeric options: finite, and within what a search on one host can mean (the upper ends rule out values that
# overflow a timer or make the space's divisor loop run for minutes, not real configurations).
RANGES: dict[str, Range] = {
    "num_gpus": Range(1, 1024), "effective_batch": Range(1, 65536), "max_seq_len": Range(1, 1_048_576),
    "lora_ranks": Range(1, 65536), "micro_batches": Range(1, 65536), "confirm": Range(1, 100),
    "tolerance_pct": Range(0, 100, high_open=True), "margin_pct": Range(0, 100, high_open=True),
    "timeout": Range(0, 7 * 86400, low_open=True), "budget_minutes": Range(0, 10_000_000, low_open=True),
    "gpu_hour_price": Range(0, 1_000_000, low_open=True),
}
EXAMPLES = {"num_gpus": "1", "effective_batch": "16", "max_seq_len": "1024", "lora_ranks": "16",
            "micro_batches": "1 2 4", "confirm": "2", "tolerance_pct": "5", "margin_pct": "2", "timeout": "3600",
            "budget_minutes": "60", "gpu_hour_price": "2.5"}
MAX_VALUES = 64  # values of one list option (the space multiplies them)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _problem(option: str, message: str, fix: str) -> InputProblem:
    return InputProblem("command line", f"--{option}", message, fix)


def numeric_problems(options: TuneOptions) -> list[InputProblem]:
    """Every numeric option within its range (NaN and inf never are)."""
    problems = []
    for name, allowed in RANGES.items():
        value = getattr(options, name)
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(values) > MAX_VALUES:
            problems.append(_problem(name, f"{len(values)} values (at most {MAX_VALUES})", "give fewer values"))
            continue
        for v in values:
            why = allowed.problem(v)
            if why:
                problems.append(_problem(name, why, f"e.g. --{name} {EXAMPLES[name]}"))
                break
    return problems


def micro_batch_problem(options: TuneOptions) -> InputProblem | None:
    """--micro_batches must divide the per-device batch (--effective_batch / --num_gpus): one that does not
    would be dropped from the space, and none left would leave nothing to search."""
    if not options.micro_batches or options.num_gpus < 1 or options.effective_batch % options.num_gpus:
        return None
    per_device = options.effective_batch // options.num_gpus
    wrong = [m for m in dict.fromkeys(options.micro_batches) if per_device % m]
    if not wrong:
        return None
    divisors = " ".join(str(d) for d in range(1, per_device + 1) if per_device % d == 0)
    return _problem("micro_batches", f"{' '.join(map(str, wrong))} does not divide the per-device batch "
                    f"{per_device} (--effective_batch {options.effective_batch} / --num_gpus {options.num_gpus})",
                    f"give divisors of {per_device}: {divisors}, or change --effective_batch")


def _optimizer_names() -> list[str]:
    # Importing TrainingArguments imports bitsandbytes, which logs a warning about an optional kernel package on
    # a CPU-only machine; at the edge, before logging is set up, that line would sit above the user's error.
    quiet = logging.getLogger("bitsandbytes")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from transformers.training_args import OptimizerNames
    finally:
        quiet.setLevel(level)
    return [o.value for o in OptimizerNames]


def optimizer_problem(optimizers: list[str]) -> InputProblem | None:
    known = _optimizer_names()
    unknown = [o for o in optimizers if o not in known]
    if not unknown:
        return None
    close = difflib.get_close_matches(unknown[0], known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return _problem("optimizers", f"unknown optimizer {unknown[0]!r}",
                    f"{hint}choose from TrainingArguments' optim values: {', '.join(known)}")


def _distributions() -> tuple[str, ...]:
    from tunebench.experiment.arguments import DataArguments

    return typing.get_args(typing.get_type_hints(DataArguments)["synthetic_length_distribution"])


def source_problems(options: TuneOptions) -> list[InputProblem]:
    """The model, the data and the distribution, judged as the pipeline would judge them (offline)."""
    from tunebench.experiment.data import data_source_problem
    from tunebench.experiment.models import resolve_model_source

    problems = []
    try:
        resolve_model_source(options.model)
    except ValueError as exc:
        problems.append(_problem("model", str(exc), "use preset:<name>, a local model folder or a hub id org/name"))
    data = data_source_problem(options.training_data_path)
    if data:
        problems.append(_problem("training_data_path", data,
                                 "use 'synthetic', an existing .json/.jsonl/.parquet file or a hub id org/name"))
    allowed = _distributions()
    if options.synthetic_length_distribution not in allowed:
        problems.append(_problem("synthetic_length_distribution", f"{options.synthetic_length_distribution!r} is not "
                                 "a distribution", f"choose from {', '.join(allowed)}"))
    return problems


def plan_device_problem(spec: str | None, gpu_table: str | None = None) -> InputProblem | None:
    """--plan_device: a size a device has, or a GPU of the GPU table (planning.gpu_target, as `plan` resolves it)."""
    from tunebench.api.planning import plan_device_problem as device_problem

    why = device_problem(spec, smallest=1, gpu_table=gpu_table)
    return _problem("plan_device", why, "a size or a GPU name, e.g. --plan_device 80GiB") if why else None


def config_file_problems(options: TuneOptions) -> list[InputProblem]:
    """--defaults_config_path and --framework_configs_path read as the pipeline reads them; a problem in the file
    keeps its file and key, and says which option named the file."""
    from tunebench.matrix.inputs import load_defaults, load_framework_configs

    problems: list[InputProblem] = []
    for option, load in (("defaults_config_path", load_defaults), ("framework_configs_path", load_framework_configs)):
        path = getattr(options, option)  # defaults_config_path, framework_configs_path
        if path is None:
            continue
        if not str(path).strip() or not Path(path).is_file():
            problems.append(_problem(option, f"{path!r} is not a file", f"give an existing YAML file, or leave "
                                     f"--{option} out for the repository's"))
            continue
        found: list[InputProblem] = []
        load(path, found)
        problems += [InputProblem(f"--{option} {p.source}", p.key, p.message, p.fix) for p in found]
    return problems


def project_to_problems(target: str | None, gpu_table: str | None, num_gpus: int) -> list[InputProblem]:
    """--gpu_table readable, and --project_to a GPU of the table (the shipped one merged with --gpu_table's), runs on
    one GPU."""
    try:
        table = load_table(gpu_table)
    except InputError as exc:  # the file's problems, each saying which option named the file
        return [p if p.key == "--gpu_table" else InputProblem(f"--gpu_table {p.source}", p.key, p.message, p.fix)
                for p in exc.problems]
    if target is None:
        return []
    from tunebench.planning.gpu_target import one_device

    try:  # one GPU kind, named (the one resolver of device lists: "A, B" was read as A by a fragment)
        target = one_device(target, "--project_to")
    except InputError as exc:
        return [_problem("project_to", p.message, p.fix) for p in exc.problems]
    problems = []
    if table.lookup(target) is None:
        problems.append(_problem("project_to", f"{target!r} is not in the GPU table",
                                 f"one of {', '.join(table.names())}, or add it with --gpu_table FILE"))
    if num_gpus != 1:
        problems.append(_problem("project_to", f"projects runs on one GPU; --num_gpus is {num_gpus}",
                                 "tune with --num_gpus 1 --project_to, then `benchmark.py plan --project_from "
                                 "--project_num_gpus N` for N GPUs"))
    return problems


def log_level_problem(level: str, option: str = "log_level") -> InputProblem | None:
    if str(level).upper() in LOG_LEVELS:
        return None
    return _problem(option, f"{level!r} is not a logging level", f"choose from {', '.join(LOG_LEVELS)}")


def value_problems(options: TuneOptions) -> list[InputProblem]:
    """Every problem of the parsed options, one per option, in the user's words."""
    from tunebench.results import folder as results_folder

    problems = numeric_problems(options)
    named = {p.key for p in problems}
    if "--micro_batches" not in named and not {"--effective_batch", "--num_gpus"} & named:
        divides = micro_batch_problem(options)
        problems += [divides] if divides else []
    if options.objective == "cost" and options.gpu_hour_price is None:
        problems.append(_problem("gpu_hour_price", "--objective cost needs the price of a GPU hour",
                                 "e.g. --objective cost --gpu_hour_price 2.5"))
    if "--effective_batch" not in named and "--num_gpus" not in named and options.effective_batch % options.num_gpus:
        problems.append(_problem("effective_batch", f"{options.effective_batch} samples do not split over "
                                 f"{options.num_gpus} GPUs", "give a multiple of --num_gpus"))
    for found in (optimizer_problem(options.optimizers),
                  plan_device_problem(options.plan_device, options.gpu_table),
                  log_level_problem(options.log_level)):
        problems += [found] if found else []
    problems += project_to_problems(options.project_to, options.gpu_table, options.num_gpus)
    problems += source_problems(options)
    problems += config_file_problems(options)
    problems += results_folder.check(options.results_output_path)
    return problems


# The tune option behind each argument of the scenarios tune generates (a problem found there is the option's).
OPTION_OF_ARGUMENT = {
    "model_name_or_path": "--model", "training_data_path": "--training_data_path",
    "synthetic_length_distribution": "--synthetic_length_distribution", "optim": "--optimizers",
    "r": "--lora_ranks", "lora_alpha": "--lora_ranks", "per_device_train_batch_size": "--micro_batches",
    "gradient_accumulation_steps": "--micro_batches", "gradient_checkpointing": "--gradient_checkpointing",
    "gradient_checkpointing_kwargs": "--gradient_checkpointing", "packing": "--packing",
    "padding_free": "--packing", "packing_strategy": "--packing", "torch_compile": "--torch_compile",
    "max_seq_len": "--max_seq_len", "torch_dtype": "--device", "bf16": "--device",
}
OPTION_OF_HARNESS_OPTION = {"--num_gpus_matrix": "--num_gpus", "--scenarios_config_path": "--model"}
_ARGUMENT_KEY = re.compile(r"(?:arguments|data_processing)\.(\w+)")
_SCENARIO = re.compile(r"scenario '([^']*)'")


def in_users_words(problems: list[InputProblem], generated: str) -> list[InputProblem]:
    """Problems of the pipeline that tune drove with a generated scenarios file (`generated`), each moved to the
    tune option that produced the value, and each reported once (not once per point of the space)."""
    out, seen = [], set()
    for p in problems:
        if p.source == generated:
            match = _ARGUMENT_KEY.search(p.key)
            option = OPTION_OF_ARGUMENT.get(match.group(1)) if match else None
            if option is None:
                point = _SCENARIO.search(p.key)
                option = f"the settings of point {point.group(1).split('-', 2)[-1]}" if point else "the options"
            p = InputProblem("command line", option, p.message, p.fix)
        elif p.source == "command line":
            p = InputProblem(p.source, OPTION_OF_HARNESS_OPTION.get(p.key, p.key), p.message, p.fix)
        message = _SCENARIO.sub("the scenario", p.message)
        if (p.source, p.key, message) not in seen:
            seen.add((p.source, p.key, message))
            out.append(p)
    return out
