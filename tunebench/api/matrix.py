"""The experiment matrix as a Python object: typed options in, validated experiments out (the CLI builds it too).

    import tunebench
    matrix = tunebench.Matrix.from_yaml("scenarios-cpu.yaml", effective_batch_size=[4, 8])
    matrix = tunebench.Matrix.from_scenarios([{"name": "lora", "arguments": {...}}], device="cpu")
    matrix.frame()  # one row per experiment

Bad input raises `tunebench.InputError`, whose `problems` each name the file and key (or the argument) and a fix,
before anything is built or run. The files every matrix of a session shares (defaults, framework configs, the
accelerate config) and the machine's GPUs are read once into `MatrixInputs`, so a caller that builds many
matrices (tune: one per batch of points) reads them once.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tunebench.api.checks import checked_field, field_problems, raise_problems
from tunebench.api.words import api_words
from tunebench.bounds import COUNT, Range
from tunebench.errors import InputError, InputProblem
from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
from tunebench.matrix.expansion import Matrices, expand
from tunebench.matrix.fms_configs import fms_framework_configs
from tunebench.matrix.inputs import (
    ScenarioFile,
    load_defaults,
    load_framework_configs,
    load_scenarios,
    load_yaml,
    parse_scenarios,
)
from tunebench.matrix.narrowing import missed_gpu_counts, say_once
from tunebench.matrix.validation import Sources, validate
from tunebench.telemetry.gpus import query_gpus, usable_gpus
from tunebench.vocabulary import Device

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
# The default input files (defaults.yaml, framework_configs.yaml, accelerate.yaml, the scenario sets): the checkout's
# own, or an installed wheel's copies (setup.py puts them in tunebench/inputs/)
INPUTS_ROOT = REPO_ROOT if (REPO_ROOT / "defaults.yaml").is_file() else REPO_ROOT / "tunebench" / "inputs"
CPU_SCENARIOS = "scenarios-cpu.yaml"
# Experiments of one command (matrix × repeats): each is validated, given a folder and a row before anything runs.
MAX_RUNS = 10_000
MEMORY_MODES = ("scanner", "huggingface", "nvidia")  # memory_logging's modes (the CLI's `all` is the three)
PYTHON_SOURCE = "Matrix.from_scenarios"  # what a problem of scenarios built in Python names as its file


@dataclass
class MatrixOptions:
    """What decides the experiments: the input files, the device, and the matrices crossed with each scenario.
    Each field's type, range and choices are checked by `problems` (the command line checks the same)."""

    scenarios: str | os.PathLike | None = checked_field(  # None: scenarios.yaml on a GPU host, else scenarios-cpu.yaml
        "--scenarios_config_path", default=None, example="'scenarios.yaml'")
    defaults: str | os.PathLike = checked_field("--defaults_config_path", default=str(INPUTS_ROOT / "defaults.yaml"))
    framework_configs: str | os.PathLike = checked_field("--framework_configs_path",
                                                         default=str(INPUTS_ROOT / "framework_configs.yaml"))
    accelerate_config: str | os.PathLike = checked_field("--accelerate_config",
                                                         default=str(INPUTS_ROOT / "accelerate.yaml"))
    device: Device = checked_field("--device", default=Device.AUTO, example="'cpu'")
    num_gpus: list[int] = checked_field("--num_gpus_matrix", COUNT, nonempty=True, default_factory=lambda: [1],
                                        example="[1, 2]")
    effective_batch_size: list[int] | None = checked_field("--effective_batch_size_matrix", COUNT, nonempty=True,
                                                           default=None, example="[8, 16]")
    max_seq_len: list[int] | None = checked_field("--max_seq_len_matrix", COUNT, nonempty=True, default=None,
                                                  example="[512, 1024]")
    packing: list[bool] | None = checked_field("--packing_matrix", nonempty=True, default=None,
                                               example="[True, False]")
    attn_implementation: list[str] | None = checked_field("--attn_implementation_matrix", nonempty=True,
                                                          default=None, example="['sdpa', 'eager']")
    run_only_scenarios: list[str] | None = checked_field("--run_only_scenarios", default=None, example="['lora']")
    include_slow: bool = checked_field("--include_slow", default=False)
    memory_logging: frozenset[str] = checked_field("--memory_logging", choices=MEMORY_MODES,
                                                   default=frozenset({"scanner"}), example="{'scanner', 'nvidia'}")
    repeats: int = checked_field("--repeats", Range(1, 100), default=1, example="3")
    # fms-acceleration sample configuration files under names scenarios use (fms's --acceleration_framework_config_
    # keypairs): each is a framework config running its `plugins:` through fms (tunebench.matrix.fms_configs)
    fms_configs: dict[str, str] | None = checked_field("--acceleration_framework_config_keypairs", default=None,
                                                       example="{'my-gptq': 'my-gptq-sample-configuration.yaml'}")

    def problems(self, source: str = "MatrixOptions") -> list[InputProblem]:
        """Every field of the wrong type or out of its range, named `source: field`."""
        return field_problems(self, source)

    @classmethod
    def checked(cls, caller: str, **options) -> MatrixOptions:
        """MatrixOptions from keyword arguments; an unknown name, or a value of the wrong type or range, is an
        InputError naming it (`caller: name`)."""
        known = [f.name for f in fields(cls)]
        problems = [InputProblem(caller, name, "no such option", "one of: " + ", ".join(known))
                    for name in sorted(set(options) - set(known))]
        if problems:
            raise InputError(problems)
        made = cls(**options)
        raise_problems(made.problems(caller))
        made.device = Device(made.device)
        return made


@dataclass(frozen=True)
class MatrixInputs:
    """What every matrix of a session shares, read once: the machine (device, GPUs) and the input files."""

    device_type: str
    gpus: list  # those this harness may use: every GPU nvidia-smi lists, or those CUDA_VISIBLE_DEVICES names
    defaults: dict[str, Any]
    framework_configs: dict[str, FrameworkConfig]
    accelerate_config: dict[str, Any]
    defaults_path: str
    framework_configs_path: str
    gpu_slots: list = field(default_factory=list)  # the CUDA_VISIBLE_DEVICES entry a child gets for each of gpus

    @classmethod
    def load(cls, options: MatrixOptions, problems: list[InputProblem], runs_here: bool = True) -> MatrixInputs:
        """Ask nvidia-smi (unless the device is the CPU) and read the shared files; problems are appended. A matrix
        that only plans (`runs_here` False) may hide every GPU: nothing will use them."""
        gpus, slots = _usable_gpus(problems, runs_here) if options.device in (Device.AUTO, Device.CUDA) else ([], [])
        configs = load_framework_configs(options.framework_configs, problems)
        configs.update(fms_framework_configs(options.fms_configs or {}, configs, problems))
        return cls(resolve_device(options.device, gpus), gpus, load_defaults(options.defaults, problems), configs,
                   load_yaml(options.accelerate_config, problems) or {}, options.defaults, options.framework_configs,
                   slots)


def _usable_gpus(problems: list[InputProblem], runs_here: bool = True) -> tuple[list, list]:
    """nvidia-smi's GPUs as far as the CUDA_VISIBLE_DEVICES this harness was started with allows."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    listed = query_gpus()
    try:
        gpus, slots = usable_gpus(listed, visible, os.environ.get("CUDA_DEVICE_ORDER"))
    except ValueError as exc:
        problems.append(InputProblem("environment", "CUDA_VISIBLE_DEVICES", str(exc),
                                     "name the GPUs to use as `nvidia-smi -L` lists them, or unset it to use all"))
        return [], []
    # `CUDA_VISIBLE_DEVICES=` (or -1) hides every GPU: said, not "this machine has 0" (a plan uses none)
    if listed and not gpus and runs_here:
        problems.append(InputProblem("environment", "CUDA_VISIBLE_DEVICES", f"{visible!r} names no GPU, so none of "
                                     f"the {len(listed)} nvidia-smi lists may be used",
                                     "unset it to use every GPU, name those to use (e.g. CUDA_VISIBLE_DEVICES=0,1), "
                                     "or run on the CPU with --device cpu"))
    return gpus, slots


@dataclass
class Matrix:
    """Validated experiments, the device they run on and the GPUs found."""

    experiments: list[ExperimentSpec]
    device_type: str
    gpus: list  # the GPUs this matrix may use (CUDA_VISIBLE_DEVICES respected)
    options: MatrixOptions
    # Scenarios given in Python (not a file the options name), kept so the matrix can be built again for a device
    scenario_file: ScenarioFile | None = field(default=None, repr=False, compare=False)
    scenarios_source: str | None = field(default=None, repr=False, compare=False)
    gpu_slots: list = field(default_factory=list, repr=False, compare=False)  # each GPU's CUDA_VISIBLE_DEVICES entry

    @classmethod
    def from_yaml(cls, scenarios: str | None = None, **options) -> Matrix:
        """The matrix of a scenarios file (and the other inputs' defaults), `options` as in MatrixOptions."""
        with api_words((MatrixOptions, "Matrix.from_yaml")):
            return build(MatrixOptions.checked("Matrix.from_yaml", scenarios=scenarios, **options))

    @classmethod
    def from_scenarios(cls, scenarios: list[dict[str, Any]], data_processing: dict[str, Any] | None = None,
                       **options) -> Matrix:
        """The matrix of scenarios written in Python, each as a scenarios.yaml entry (`name`, `framework_config`,
        `arguments`, ...); their problems name `Matrix.from_scenarios` and the key."""
        problems: list[InputProblem] = []
        scenario_file = parse_scenarios({"scenarios": scenarios, "data_processing": data_processing or {}},
                                        PYTHON_SOURCE, problems)
        try:
            checked = MatrixOptions.checked(PYTHON_SOURCE, **options)
        except InputError as exc:  # the scenarios are still checked, under the options that are right
            problems = exc.problems + problems
            wrong = {problem.key for problem in exc.problems}
            try:
                checked = MatrixOptions.checked(PYTHON_SOURCE, **{k: v for k, v in options.items() if k not in wrong})
            except InputError:
                raise InputError(problems) from None
        with api_words((MatrixOptions, PYTHON_SOURCE)):
            return build(checked, problems, scenario_file=scenario_file, scenarios_source=PYTHON_SOURCE)

    def on_device(self, device: Device) -> Matrix:
        """The same scenarios and options built for `device` (a GPU named to `plan` plans for CUDA)."""
        from dataclasses import replace

        return build(replace(self.options, device=Device(device)), scenario_file=self.scenario_file,
                     scenarios_source=self.scenarios_source)

    def frame(self):
        """One row per experiment: its identity and settings, as the CSVs hold them."""
        from tunebench.results import summaries

        return summaries.collect([e.describe() for e in self.experiments])


def resolve_device(device: str, gpus: list) -> str:
    """`device` as run: cuda when asked, or on `auto` when nvidia-smi lists GPUs; else cpu."""
    return "cuda" if device == Device.CUDA or (device == Device.AUTO and gpus) else "cpu"


def build(options: MatrixOptions, problems: list[InputProblem] | None = None, inputs: MatrixInputs | None = None,
          scenario_file: ScenarioFile | None = None, scenarios_source: str | None = None,
          runs_here: bool = True) -> Matrix:
    """Load (what `inputs` and `scenario_file` do not already hold), expand and validate; raises InputError with
    every problem found (`problems`: a caller's own, such as the command line's, reported together with these).
    `runs_here` False: a matrix only planned (`benchmark.py plan`), which needs no usable GPU."""
    problems = list(problems or [])
    before = len(problems)
    inputs = inputs or MatrixInputs.load(options, problems, runs_here)
    shared_broken = len(problems) > before  # defaults, framework configs, GPUs: every experiment depends on them
    given = (scenario_file, scenarios_source) if scenario_file is not None else (None, None)
    if scenario_file is None:
        scenarios_source = options.scenarios or str(INPUTS_ROOT / ("scenarios.yaml" if inputs.device_type == "cuda"
                                                                 else CPU_SCENARIOS))
        if not options.scenarios and inputs.device_type == "cpu":
            logger.info("no GPU found: using the CPU scenario set %s", scenarios_source)
        scenario_file = load_scenarios(scenarios_source, problems)
    # The caller's problems (the command line's) and a scenario file's own do not stop the experiments' checks:
    # every problem is reported in one go, not one round trip per layer.
    if problems and (shared_broken or not scenario_file.scenarios):
        raise InputError(problems)
    experiments = _experiments(options, inputs, scenario_file, scenarios_source, problems)
    if not experiments and not problems:
        slow = (
            not options.include_slow and not options.run_only_scenarios and any(s.slow for s in scenario_file.scenarios)
        )
        problems.append(InputProblem(scenarios_source, "scenarios", "the matrix has no experiment to run",
                                     "pass --include_slow (every scenario is `slow: true`)" if slow else
                                     "add a scenario, or check the matrix options"))
    if problems:
        raise InputError(problems)
    return Matrix(experiments, inputs.device_type, inputs.gpus, options, *given, gpu_slots=inputs.gpu_slots)


def _experiments(options: MatrixOptions, inputs: MatrixInputs, scenario_file: ScenarioFile, source: str,
                 problems: list[InputProblem]) -> list[ExperimentSpec]:
    """The selected scenarios × framework configs × matrices, expanded and validated (problems appended)."""
    selected = _selected(scenario_file.scenarios, options, source, problems)
    defaults = {**inputs.defaults, "memory_logging": ",".join(sorted(options.memory_logging)) or "none"}
    matrices = Matrices(num_gpus=options.num_gpus or [1], effective_batch_size=options.effective_batch_size,
                        max_seq_len=options.max_seq_len, packing=options.packing,
                        attn_implementation=options.attn_implementation)
    experiments = expand(selected, inputs.framework_configs, defaults, scenario_file.data_processing, matrices,
                         inputs.device_type, inputs.accelerate_config, problems, scenarios_source=source,
                         defaults_source=inputs.defaults_path)
    say_once(missed_gpu_counts(selected, matrices.num_gpus, source))  # a scenario left out is said
    said = any(problem.key in ("--repeats", "repeats") for problem in problems)  # one problem per option
    if len(experiments) * options.repeats > MAX_RUNS and not said:  # before validating each: not an hour of checks
        raise InputError(
            problems + [
                InputProblem(
                    "command line",
                    "--repeats" if options.repeats > 1 else "matrix",
                    f"{len(experiments):,} experiment(s) × {options.repeats} repeat(s) are more "
                    f"than the {MAX_RUNS:,} runs one command takes",
                    "split the matrix (--run_only_scenarios, fewer matrix values) or fewer --repeats",
                )
            ]
        )
    # a matrix's value wins over every file's: its problems name the option
    matrix_options = {key: option for key, option, values in (
        ("attn_implementation", "--attn_implementation_matrix", options.attn_implementation),
        ("max_seq_len", "--max_seq_len_matrix", options.max_seq_len),
        ("packing", "--packing_matrix", options.packing)) if values}
    sources = Sources(defaults, inputs.defaults_path, {s.name: s.arguments for s in selected}, source,
                      scenario_file.data_processing, inputs.framework_configs_path, matrix_options)
    experiments, found = validate(experiments, sources, cuda_here=bool(inputs.gpus))
    problems += found
    return experiments


def _selected(scenarios: list, options: MatrixOptions, scenarios_path: str, problems: list[InputProblem]) -> list:
    """The scenarios asked for by name, else every one that is not `slow` (unless include_slow)."""
    if not options.run_only_scenarios:
        return scenarios if options.include_slow else [s for s in scenarios if not s.slow]
    names = {s.name for s in scenarios}
    for name in options.run_only_scenarios:
        if name not in names:
            problems.append(InputProblem("command line", "--run_only_scenarios", f"no scenario {name!r} in "
                                         f"{scenarios_path}", "choose from: " + ", ".join(sorted(names))))
    return [s for s in scenarios if s.name in options.run_only_scenarios]
