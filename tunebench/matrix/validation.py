"""Check every experiment against the training entry's real argument classes, once, and type it (ExperimentSpec)."""

from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from tunebench.errors import InputProblem
from tunebench.experiment import acceleration
from tunebench.experiment.arguments import (
    ENTRY_GROUPS,
    TrainingFields,
    hand_over,
    parse_memory_logging,
    training_fields,
)
from tunebench.experiment.data import data_source_problem
from tunebench.experiment.entry_parser import build_entry, checkpointing_renames, entry_parser
from tunebench.experiment.model_config import config_problem
from tunebench.experiment.models import resolve_model_source
from tunebench.experiment.nested import nested_problems
from tunebench.experiment.ranges import range_problems
from tunebench.experiment.spec import ExperimentSpec
from tunebench.experiment.windows import plan_windows
from tunebench.matrix.aliases import suggestion
from tunebench.matrix.narrowing import say_once, typed_settings

logger = logging.getLogger(__name__)

# TrainingArguments.__post_init__ refuses bf16/fp16 and CUDA-only options on a machine without a GPU. Those
# checks are about this machine, not the experiment: a GPU matrix must still dry-run on a laptop.
_DEVICE_MESSAGES = ("bf16", "fp16", "gpu", "cuda", "fsdp", "torch_compile", "mixed precision")
# Keys the harness sets per experiment folder: a user's value would be overwritten, so it is not checked.
_HARNESS_KEYS = ("output_dir", "results_json", "use_cpu")


@dataclass
class Sources:
    """Where each layer of arguments came from, so a problem names the file that holds the bad key."""

    defaults: dict[str, Any]
    defaults_path: str
    scenario_arguments: dict[str, dict[str, Any]]
    scenarios_path: str
    data_processing: dict[str, Any]
    framework_configs_path: str
    matrix_options: dict[str, str] = field(default_factory=dict)  # key -> the CLI matrix that set it (it wins)

    def origin(self, experiment: ExperimentSpec, key: str) -> tuple[str, str]:
        if key in self.matrix_options:
            return "command line", self.matrix_options[key]
        if key in experiment.framework_config.arguments:
            return self.framework_configs_path, f"framework_configs.{experiment.framework_config.name}.arguments.{key}"
        if key in self.scenario_arguments.get(experiment.scenario, {}):
            return self.scenarios_path, f"scenario {experiment.scenario!r}: arguments.{key}"
        if key in self.data_processing:
            return self.scenarios_path, f"data_processing.{key}"
        if key in self.defaults:
            return self.defaults_path, key
        return "command line", key


def _unknown_keys(experiment: ExperimentSpec, known: set[str], sources: Sources) -> list[InputProblem]:
    problems = []
    for key in experiment.arguments:
        if key not in known:
            source, where = sources.origin(experiment, key)
            close = suggestion(key, known)
            fix = f"did you mean {close!r}?" if close else ("remove it, or check the spelling against "
                                                            "TrainingArguments/SFTConfig")
            problems.append(InputProblem(source, where, "unknown argument", fix))
    if "max_length" in experiment.arguments:
        source, where = sources.origin(experiment, "max_length")
        problems.append(InputProblem(source, where, "max_length is set by tunebench from max_seq_len",
                                     "use max_seq_len (it sets SFTConfig.max_length)"))
    return problems


def _located(sources: Sources, experiment: ExperimentSpec, key: str) -> tuple[str, str]:
    """(file, where) of a key, or of a key inside a nested argument (`fsdp_config.version`), as the user wrote it
    (a key the harness passes on under transformers' new name is found under the old one)."""
    base = key.split(".")[0]
    given = {new: old for old, new in checkpointing_renames().items()}.get(base, base)
    source, where = sources.origin(experiment, given if given in experiment.arguments else base)
    return source, where + key[len(base):]


def _typed(experiment: ExperimentSpec, sources: Sources, cuda_here: bool,
           unknown: set[str]) -> tuple[dict, list[InputProblem]]:
    """The experiment's typed values (the one parse) of every key that parses, and what is wrong with the others;
    where nothing is, whether its objects can be built with them."""
    arguments = {k: v for k, v in experiment.arguments.items() if k not in _HARNESS_KEYS and k not in unknown}
    typed, refused = entry_parser().typed_values_by_key(arguments)
    problems = [InputProblem(*sources.origin(experiment, key), message, fix)
                for key, (message, fix) in refused.items()]
    here = cuda_here or experiment.device_type == "cpu"  # a GPU matrix planned on a laptop needs no GPU package
    # transformers would stop at the first with a bare int() error, or ignore the key
    problems += [InputProblem(*_located(sources, experiment, key), message, fix)
                 for key, message, fix in nested_problems(typed["training"], installed_here=here)]
    if problems or unknown:  # SFTConfig's checks of the arguments together wait for every argument to be right
        return typed, problems
    probe = {group: dict(values) for group, values in typed.items()}
    probe["training"].update(output_dir="/nonexistent/tunebench-validate", use_cpu=experiment.device_type == "cpu")
    try:
        build_entry(probe)
    except (ValueError, TypeError) as exc:  # SFTConfig's own checks, and the entry's
        message = str(exc)
        device_specific = any(m in message.lower() for m in _DEVICE_MESSAGES)
        if not (device_specific and experiment.device_type == "cuda" and not cuda_here):
            problems.append(InputProblem(sources.scenarios_path, f"scenario {experiment.scenario!r}", message,
                                         "adjust the arguments named in the message"))
    return typed, problems


def _value_problems(spec: ExperimentSpec, sources: Sources) -> list[InputProblem]:
    """What each typed value says on its own: ranges, the model, the data, memory logging."""
    problems = []
    for key, problem in range_problems(spec.entry, ENTRY_GROUPS).items():
        source, where = sources.origin(spec, key)
        problems.append(InputProblem(source, where, problem, f"set {key} within that range"))
    try:
        local = resolve_model_source(spec.model_name_or_path).kind == "local"
    except ValueError as exc:
        source, where = sources.origin(spec, "model_name_or_path")
        problems.append(InputProblem(source, where, str(exc), "use preset:<name>, a local dir or org/name"))
        local = False
    found = config_problem(spec.model_name_or_path) if local else None
    if found:
        source, where = sources.origin(spec, "model_name_or_path")
        problems.append(InputProblem(source, where, *found))
    data_problem = data_source_problem(str(spec.value("data", "training_data_path")))
    if data_problem:
        source, where = sources.origin(spec, "training_data_path")
        problems.append(InputProblem(source, where, data_problem,
                                     "use 'synthetic', an existing .json/.jsonl/.parquet file or a hub id org/name"))
    try:
        parse_memory_logging(spec.value("bench", "memory_logging"))
    except ValueError as exc:
        source, where = sources.origin(spec, "memory_logging")
        problems.append(InputProblem(source, where, str(exc),
                                     "use a comma list of scanner, huggingface, nvidia, all, none"))
    return problems


def _combination_problems(spec: ExperimentSpec, sources: Sources, cuda_here: bool) -> list[InputProblem]:
    """What the typed values say together: the accelerations and the step windows (asked only once every value
    is right: a misspelt `max_step` would otherwise also read as max_steps too small)."""
    problems = []
    for found in acceleration.problems(spec.entry, spec.device_type, installed_here=cuda_here):
        source, where = sources.origin(spec, found.key)
        problems.append(InputProblem(source, where, found.message, found.fix))
    scanning = "scanner" in parse_memory_logging(spec.value("bench", "memory_logging"))
    try:
        plan_windows(spec.value("bench", "steady_warmup_steps"), spec.value("training", "max_steps"),
                     spec.value("bench", "scan_steps"), spec.value("bench", "scan_time_steps"), scanning)
    except ValueError as exc:
        text = str(exc)
        key = next((k for k in ("scan_time_steps", "scan_steps", "steady_warmup_steps") if k in text), "max_steps")
        source, where = sources.origin(spec, key)
        problems.append(InputProblem(source, where, text, "raise max_steps, or adjust scan_steps / "
                                     "scan_time_steps / steady_warmup_steps"))
    return problems


def _experiment_problems(experiment: ExperimentSpec, known: set[str], sources: Sources,
                         cuda_here: bool) -> tuple[ExperimentSpec, list[InputProblem], list[str]]:
    """The typed experiment, every problem of it at once, and the lines saying what the run would change."""
    found = _unknown_keys(experiment, known, sources)
    unknown = {key for key in experiment.arguments if key not in known}
    typed, parse_found = _typed(experiment, sources, cuda_here, unknown)
    spec = dataclasses.replace(experiment, entry=typed)
    found += parse_found + _value_problems(spec, sources)
    if found:
        return spec, found, []
    said, contradictions = typed_settings(spec, sources.origin)
    return spec, _combination_problems(spec, sources, cuda_here) + contradictions, said


def validate(experiments: list[ExperimentSpec], sources: Sources,
             cuda_here: bool) -> tuple[list[ExperimentSpec], list[InputProblem]]:
    """The experiments typed (each parsed once), and every problem of every experiment, each reported once.

    Typing them needs TRL's SFTConfig, whose import (transformers' trainer stack, PEFT, torch) is 6-10 s of CPU. A
    run that spawned the preload server (which imports that stack anyway) types them in a fork of it, and this
    process never imports the stack: the same code on the same installation, so the same answer."""
    from tunebench.execution import server_call

    checked = server_call.run_in_server("trl", "checking the inputs", _checked, experiments, sources, cuda_here)
    hand_over(checked.training_fields)  # what a fork read, this process then knows without importing TRL
    if checked.fms_facts:  # the run's skip reasons read them: not probed again here
        from tunebench.experiment.fms import checks

        checks.remember(checked.fms_facts)
    say_once(checked.lines)  # what the run would drop or change, a line per scenario and key
    return checked.specs, checked.problems


@dataclass
class Checked:
    """`validate`'s answer, as a fork of the preload server hands it over: the typed experiments, every problem, the
    lines to say, and what the harness reads afterwards without TRL (the training group's fields, fms's facts)."""

    specs: list[ExperimentSpec]
    problems: list[InputProblem]
    lines: list[str]
    training_fields: TrainingFields
    fms_facts: dict[str, dict[str, Any]]


def _checked(experiments: list[ExperimentSpec], sources: Sources, cuda_here: bool) -> Checked:
    """`validate`'s work, wherever it runs."""
    known = entry_parser().known_keys()
    seen, problems, typed_specs, lines = set(), [], [], []
    _probe_fms(experiments)
    for experiment in experiments:
        spec, found, said = _experiment_problems(experiment, known, sources, cuda_here)
        lines += said
        for problem in found:
            if (problem.source, problem.key, problem.message) not in seen:
                seen.add((problem.source, problem.key, problem.message))
                problems.append(problem)
        if not found:
            typed_specs.append(spec)
    fms_checks = sys.modules.get("tunebench.experiment.fms.checks")  # imported only where the matrix asked fms
    return Checked(typed_specs, problems, lines, training_fields(), fms_checks.known() if fms_checks else {})


def _probe_fms(experiments: list[ExperimentSpec]) -> None:
    """Ask fms about every plugin body of the matrix at once (one child interpreter; tunebench.experiment.fms.checks)
    where fms is installed: each experiment's checks then read the answer."""
    from tunebench.experiment.fms.compat import missing_packages
    from tunebench.experiment.fms.settings import fms_plugins_of

    bodies = set()
    for experiment in experiments:
        try:
            plugins = fms_plugins_of(experiment.arguments.get("fms_plugins"))
        except ValueError:
            continue  # the experiment's problems say so
        if plugins.enabled and not missing_packages(plugins.packages):
            bodies.add(plugins.text())
    if bodies:
        from tunebench.experiment.fms.checks import prefetch

        prefetch(sorted(bodies))


def typed(experiments: list[ExperimentSpec], cuda_here: bool = False) -> list[ExperimentSpec]:
    """Validate and type experiments made outside the command line (scripts, tests); InputError on a problem."""
    from tunebench.errors import InputError

    specs, problems = validate(experiments, Sources({}, "defaults", {}, "scenarios", {}, "framework_configs"),
                               cuda_here)
    if problems:
        raise InputError(problems)
    return specs
