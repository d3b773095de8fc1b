"""The experiment matrix as a Python object: typed options in, validated experiments out (the CLI builds it too).

    import tunebench
    matrix = tunebench.Matrix.from_yaml("scenarios-cpu.yaml", effective_batch_size=[4, 8])
    matrix.frame()  # one row per experiment

Bad input raises `tunebench.InputError`, whose `problems` each name the file and key (or the argument) and a fix,
before anything is built or run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tunebench.errors import InputError, InputProblem
from tunebench.experiment.spec import ExperimentSpec
from tunebench.matrix.expansion import Matrices, expand
from tunebench.matrix.inputs import load_defaults, load_framework_configs, load_scenarios, load_yaml
from tunebench.matrix.validation import Sources, validate
from tunebench.telemetry.gpus import query_gpus

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
CPU_SCENARIOS = "scenarios-cpu.yaml"
# Experiments of one command (matrix × repeats): each is validated, given a folder and a row before anything runs.
MAX_RUNS = 10_000


@dataclass
class MatrixOptions:
    """What decides the experiments: the input files, the device, and the matrices crossed with each scenario."""

    scenarios: str | None = None  # None: scenarios.yaml on a GPU host, scenarios-cpu.yaml elsewhere
    defaults: str = str(REPO_ROOT / "defaults.yaml")
    framework_configs: str = str(REPO_ROOT / "framework_configs.yaml")
    accelerate_config: str = str(REPO_ROOT / "accelerate.yaml")
    device: Literal["auto", "cuda", "cpu"] = "auto"
    num_gpus: list[int] = field(default_factory=lambda: [1])
    effective_batch_size: list[int] | None = None
    max_seq_len: list[int] | None = None
    packing: list[bool] | None = None
    attn_implementation: list[str] | None = None
    run_only_scenarios: list[str] | None = None
    include_slow: bool = False
    memory_logging: frozenset[str] = frozenset({"scanner"})
    repeats: int = 1


@dataclass
class Matrix:
    """Validated experiments, the device they run on and the GPUs found."""

    experiments: list[ExperimentSpec]
    device_type: str
    gpus: list
    options: MatrixOptions

    @classmethod
    def from_yaml(cls, scenarios: str | None = None, **options) -> Matrix:
        """The matrix of a scenarios file (and the other inputs' defaults), `options` as in MatrixOptions."""
        unknown = sorted(set(options) - set(MatrixOptions.__dataclass_fields__))
        if unknown:
            raise InputError([InputProblem("Matrix.from_yaml", ", ".join(unknown), "no such option",
                                           "one of: " + ", ".join(MatrixOptions.__dataclass_fields__))])
        return build(MatrixOptions(scenarios=scenarios, **options))

    def frame(self):
        """One row per experiment: its identity and settings, as the CSVs hold them."""
        from tunebench.results import summaries

        return summaries.collect([e.describe() for e in self.experiments])


def resolve_device(device: str, gpus: list) -> str:
    """`device` as run: cuda when asked, or on `auto` when nvidia-smi lists GPUs; else cpu."""
    return "cuda" if device == "cuda" or (device == "auto" and gpus) else "cpu"


def build(options: MatrixOptions, problems: list[InputProblem] | None = None) -> Matrix:
    """Load, expand and validate; raises InputError with every problem found (`problems`: a caller's own, such as
    the command line's, reported together with these)."""
    problems = list(problems or [])
    gpus = query_gpus() if options.device in ("auto", "cuda") else []
    device_type = resolve_device(options.device, gpus)
    scenarios_path = options.scenarios or str(REPO_ROOT / ("scenarios.yaml" if device_type == "cuda" else CPU_SCENARIOS))
    if not options.scenarios and device_type == "cpu":
        logger.info("no GPU found: using the CPU scenario set %s", scenarios_path)
    scenario_file = load_scenarios(scenarios_path, problems)
    defaults = load_defaults(options.defaults, problems)
    framework_configs = load_framework_configs(options.framework_configs, problems)
    accelerate_config = load_yaml(options.accelerate_config, problems) or {}
    if problems:
        raise InputError(problems)
    selected = _selected(scenario_file.scenarios, options, scenarios_path, problems)
    defaults = {**defaults, "memory_logging": ",".join(sorted(options.memory_logging)) or "none"}
    matrices = Matrices(num_gpus=options.num_gpus or [1], effective_batch_size=options.effective_batch_size,
                        max_seq_len=options.max_seq_len, packing=options.packing,
                        attn_implementation=options.attn_implementation)
    experiments = expand(selected, framework_configs, defaults, scenario_file.data_processing, matrices,
                         device_type, accelerate_config, problems, scenarios_source=scenarios_path)
    if len(experiments) * options.repeats > MAX_RUNS:  # before validating each: a bound, not an hour of checks
        raise InputError([InputProblem("command line", "--repeats" if options.repeats > 1 else "matrix",
                                       f"{len(experiments):,} experiment(s) × {options.repeats} repeat(s) are more "
                                       f"than the {MAX_RUNS:,} runs one command takes",
                                       "split the matrix (--run_only_scenarios, fewer matrix values) or fewer --repeats")])
    sources = Sources(defaults, options.defaults, {s.name: s.arguments for s in selected},
                      scenarios_path, scenario_file.data_processing, options.framework_configs)
    experiments, found = validate(experiments, sources, cuda_here=bool(gpus))
    problems += found
    if not experiments and not problems:
        slow = not options.include_slow and not options.run_only_scenarios and any(s.slow for s in scenario_file.scenarios)
        problems.append(InputProblem(scenarios_path, "scenarios", "the matrix has no experiment to run",
                                     "pass --include_slow (every scenario is `slow: true`)" if slow else
                                     "add a scenario, or check the matrix options"))
    if problems:
        raise InputError(problems)
    return Matrix(experiments, device_type, gpus, options)


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
