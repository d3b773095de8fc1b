"""Check every experiment against the training entry's real argument classes before anything runs."""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.errors import InputProblem
from tunebench.execution.launch import entry_arguments, to_argv
from tunebench.experiment.arguments import ArgumentError, StrictArgumentParser, range_problems
from tunebench.experiment.components import step_windows
from tunebench.experiment.data import data_source_problem
from tunebench.experiment.models import resolve_model_source
from tunebench.matrix.expansion import Experiment

logger = logging.getLogger(__name__)

# TrainingArguments.__post_init__ refuses bf16/fp16 and CUDA-only options on a machine without a GPU. Those
# checks are about this machine, not the experiment: a GPU matrix must still dry-run on a laptop.
_DEVICE_MESSAGES = ("bf16", "fp16", "gpu", "cuda", "fsdp", "torch_compile", "mixed precision")


@dataclass
class Sources:
    """Where each layer of arguments came from, so a problem names the file that holds the bad key."""

    defaults: dict[str, Any]
    defaults_path: str
    scenario_arguments: dict[str, dict[str, Any]]
    scenarios_path: str
    data_processing: dict[str, Any]
    framework_configs_path: str

    def origin(self, experiment: Experiment, key: str) -> tuple[str, str]:
        if key in experiment.framework_config.arguments:
            return self.framework_configs_path, f"framework_configs.{experiment.framework_config.name}.arguments.{key}"
        if key in self.scenario_arguments.get(experiment.scenario, {}):
            return self.scenarios_path, f"scenario {experiment.scenario!r}: arguments.{key}"
        if key in self.data_processing:
            return self.scenarios_path, f"data_processing.{key}"
        if key in self.defaults:
            return self.defaults_path, key
        return "command line", key


def _problems_for(experiment: Experiment, parser: StrictArgumentParser, known: set[str], sources: Sources,
                  cuda_here: bool) -> list[InputProblem]:
    problems = []
    args = entry_arguments(experiment, Path("/nonexistent/tunebench-validate"))
    for key in args:
        if key not in known:
            source, where = sources.origin(experiment, key)
            close = difflib.get_close_matches(key, known, n=1)
            fix = f"did you mean {close[0]!r}?" if close else "remove it, or check the spelling against TrainingArguments/SFTConfig"
            problems.append(InputProblem(source, where, "unknown argument", fix))
    if "max_length" in args:
        source, where = sources.origin(experiment, "max_length")
        problems.append(InputProblem(source, where, "max_length is set by tunebench from max_seq_len",
                                     "use max_seq_len (it sets SFTConfig.max_length)"))
    if problems:
        return problems
    try:
        parsed = parser.parse_argv(to_argv(args))
    except ArgumentError as exc:
        key = str(exc).split("/")[0].removeprefix("argument --").strip()
        source, where = sources.origin(experiment, key) if key in args else ("arguments", "-")
        return [InputProblem(source, where, str(exc), "give a value of the expected type")]
    except ValueError as exc:
        message = str(exc)
        device_specific = any(m in message.lower() for m in _DEVICE_MESSAGES)
        if not (device_specific and experiment.device_type == "cuda" and not cuda_here):
            return [InputProblem(sources.scenarios_path, f"scenario {experiment.scenario!r}", message,
                                 "adjust the arguments named in the message")]
        parsed = None
    try:
        resolve_model_source(experiment.model_name_or_path)
    except ValueError as exc:
        source, where = sources.origin(experiment, "model_name_or_path")
        problems.append(InputProblem(source, where, str(exc), "use preset:<name>, a local dir or org/name"))
    data_problem = data_source_problem(str(args.get("training_data_path", "synthetic")))
    if data_problem:
        source, where = sources.origin(experiment, "training_data_path")
        problems.append(InputProblem(source, where, data_problem,
                                     "use 'synthetic', an existing .json/.jsonl/.parquet file or a hub id org/name"))
    if parsed is not None:
        for key, problem in range_problems(parsed).items():
            source, where = sources.origin(experiment, key)
            problems.append(InputProblem(source, where, problem, f"set {key} within that range"))
        bench, training = parsed[3], parsed[4]
        try:
            step_windows(bench, training.max_steps)
        except ValueError as exc:
            text = str(exc)
            key = next((k for k in ("memory_logging", "scan_time_steps", "scan_steps", "steady_warmup_steps")
                        if k in text), "max_steps")
            source, where = sources.origin(experiment, key)
            fix = ("use a comma list of scanner, huggingface, nvidia, all, none" if key == "memory_logging" else
                   "raise max_steps, or adjust scan_steps / scan_time_steps / steady_warmup_steps")
            problems.append(InputProblem(source, where, text, fix))
    return problems


def validate(experiments: list[Experiment], sources: Sources, cuda_here: bool) -> list[InputProblem]:
    """All problems of all experiments, each reported once."""
    parser = StrictArgumentParser()
    known = parser.known_keys()
    seen, problems = set(), []
    for experiment in experiments:
        for problem in _problems_for(experiment, parser, known, sources, cuda_here):
            if (problem.source, problem.key, problem.message) not in seen:
                seen.add((problem.source, problem.key, problem.message))
                problems.append(problem)
    return problems
