"""Expand scenarios × framework configs × models × CLI matrices into fully resolved experiments."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from tunebench.errors import InputProblem
from tunebench.experiment.data import dataset_fingerprint
from tunebench.fileio import safe_name
from tunebench.matrix.inputs import BASELINE, FrameworkConfig, Scenario

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Matrices:
    """The CLI matrices; `None` means "not given: use the resolved arguments as they are"."""

    num_gpus: list[int]
    effective_batch_size: list[int] | None = None
    max_seq_len: list[int] | None = None
    packing: list[bool] | None = None


@dataclass
class Experiment:
    """One fully resolved run: everything that decides its numbers is in here (and so in its identity)."""

    scenario: str
    framework_config: FrameworkConfig
    num_gpus: int
    device_type: str  # "cuda" | "cpu"; on cpu, num_gpus counts processes
    arguments: dict[str, Any]
    effective_batch_size: int | None = None
    slow: bool = False
    exclusive: bool = False  # scheduling only (runs alone): not part of the identity
    accelerate_config: dict[str, Any] = field(default_factory=dict)  # content of accelerate.yaml (N > 1)

    @property
    def model_name_or_path(self) -> str:
        return self.arguments["model_name_or_path"]

    @property
    def experiment_id(self) -> str:
        """A stable hash of the resolved experiment: editing anything that changes the run changes the id."""
        payload = {
            "scenario": self.scenario,
            "framework_config": {
                "name": self.framework_config.name,
                "arguments": self.framework_config.arguments,
                "accelerate_args": self.framework_config.accelerate_args,
            },
            "num_gpus": self.num_gpus,
            "device_type": self.device_type,
            "arguments": self.arguments,
            "accelerate_config": self.accelerate_config if self.num_gpus > 1 else {},
            # A local data file is identified by its size and mtime too: new data means a new experiment.
            "data": dataset_fingerprint(str(self.arguments.get("training_data_path", "synthetic"))),
        }
        blob = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def folder_name(self) -> str:
        """`<scenario>_<id>`: the scenario name made safe (no separators, no `..`, at most 64 characters); the
        id keeps two scenarios whose names sanitise alike apart."""
        return f"{safe_name(self.scenario, fallback='scenario')}_{self.experiment_id}"

    def describe(self) -> dict[str, Any]:
        """Identity columns, as they appear in the CSVs."""
        args = self.arguments
        return {
            "experiment_id": self.experiment_id,
            "scenario": self.scenario,
            "framework_config": self.framework_config.name,
            "model_name_or_path": args["model_name_or_path"],
            "num_gpus": self.num_gpus,
            "device_type": self.device_type,
            "effective_batch_size": self.effective_batch_size,
            "per_device_train_batch_size": args.get("per_device_train_batch_size"),
            "gradient_accumulation_steps": args.get("gradient_accumulation_steps"),
            "max_seq_len": args.get("max_seq_len"),
            "packing": args.get("packing", False),
            "peft_method": args.get("peft_method", "none"),
            "torch_dtype": args.get("torch_dtype"),
        }


def split_batch(
    effective_batch_size: int, num_processes: int, arguments: dict[str, Any]
) -> tuple[int, int] | str:
    """Effective batch = per-device batch × grad accumulation × processes; returns (pdbs, ga) or why not.

    An explicit per_device_train_batch_size wins (ga derived), else an explicit gradient_accumulation_steps
    (pdbs derived), else ga = 1. A split that does not divide is an error, never a rounded-down batch.
    """
    pdbs = arguments.get("per_device_train_batch_size")
    ga = arguments.get("gradient_accumulation_steps")
    if pdbs is not None:
        denominator, derived = pdbs * num_processes, "gradient_accumulation_steps"
    elif ga is not None:
        denominator, derived = ga * num_processes, "per_device_train_batch_size"
    else:
        ga, denominator, derived = 1, num_processes, "per_device_train_batch_size"
    if effective_batch_size % denominator or effective_batch_size < denominator:
        return (
            f"effective_batch_size {effective_batch_size} cannot be split over {num_processes} GPU(s) with "
            f"{'per_device_train_batch_size ' + str(pdbs) if pdbs is not None else 'gradient_accumulation_steps ' + str(ga)}: "
            f"{effective_batch_size} is not a positive multiple of {denominator} (so {derived} would not be an integer)"
        )
    quotient = effective_batch_size // denominator
    return (pdbs, quotient) if derived == "gradient_accumulation_steps" else (quotient, ga)


def resolve_arguments(*layers: dict[str, Any]) -> dict[str, Any]:
    """Merge argument layers, later wins; deep copies so no experiment shares (and leaks) a mutable value."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(copy.deepcopy(layer))
    return merged


def expand(
    scenarios: list[Scenario],
    framework_configs: dict[str, FrameworkConfig],
    defaults: dict[str, Any],
    data_processing: dict[str, Any],
    matrices: Matrices,
    device_type: str,
    accelerate_config: dict[str, Any],
    problems: list[InputProblem],
    scenarios_source: str = "scenarios.yaml",
) -> list[Experiment]:
    """Precedence, lowest to highest: defaults < data_processing < scenario < framework config < CLI matrix."""
    experiments: list[Experiment] = []
    for scenario in scenarios:
        models = scenario.arguments.get("model_name_or_path", defaults.get("model_name_or_path"))
        models = models if isinstance(models, list) else [models]
        if not models or any(not isinstance(m, str) for m in models):
            problems.append(InputProblem(scenarios_source, f"{scenario.name}.arguments.model_name_or_path",
                                         f"expected a model name or a list of them, got {models!r}",
                                         "e.g. `model_name_or_path: [preset:llama-tiny]`"))
            continue
        for fc_name in scenario.framework_configs:
            fc = framework_configs.get(fc_name or BASELINE)
            if fc is None:
                problems.append(InputProblem(
                    scenarios_source, f"{scenario.name}.framework_config",
                    f"unknown framework config {fc_name!r}",
                    "use one of: null, " + ", ".join(sorted(n for n in framework_configs if n != BASELINE)),
                ))
                continue
            combos = itertools.product(
                models, matrices.num_gpus, matrices.effective_batch_size or [None],
                matrices.max_seq_len or [None], matrices.packing if matrices.packing is not None else [None],
            )
            for model, num_gpus, ebs, seq_len, packing in combos:
                cli_layer: dict[str, Any] = {"model_name_or_path": model}
                if seq_len is not None:
                    cli_layer["max_seq_len"] = seq_len
                if packing is not None:
                    cli_layer["packing"] = packing
                args = resolve_arguments(defaults, data_processing, scenario.arguments, fc.arguments, cli_layer)
                if ebs is not None:
                    split = split_batch(ebs, num_gpus, args)
                    if isinstance(split, str):
                        problem = InputProblem("command line", "--effective_batch_size_matrix",
                                               f"scenario {scenario.name!r}: {split}",
                                               "choose an effective batch divisible by that number")
                        if problem not in problems:  # one message per scenario, not per framework config
                            problems.append(problem)
                        continue
                    args["per_device_train_batch_size"], args["gradient_accumulation_steps"] = split
                else:
                    args.setdefault("per_device_train_batch_size", 8)
                    args.setdefault("gradient_accumulation_steps", 1)
                    ebs = args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] * num_gpus
                experiments.append(Experiment(
                    scenario=scenario.name, framework_config=fc, num_gpus=num_gpus, device_type=device_type,
                    arguments=args, effective_batch_size=ebs, slow=scenario.slow, exclusive=scenario.exclusive,
                    accelerate_config=accelerate_config,
                ))
    return experiments
