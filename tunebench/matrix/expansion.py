"""Expand scenarios × framework configs × models × CLI matrices into resolved experiments (ExperimentSpec, untyped
until validation types them)."""

from __future__ import annotations

import copy
import difflib
import itertools
import logging
from dataclasses import dataclass
from typing import Any

from tunebench.errors import InputProblem
from tunebench.experiment.arguments import ModelArguments
from tunebench.experiment.spec import BASELINE, ExperimentSpec, FrameworkConfig
from tunebench.matrix.habits import Layer, resolve_precision, split_target_modules
from tunebench.matrix.inputs import Scenario
from tunebench.user_files import shown

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Matrices:
    """The CLI matrices; `None` means "not given: use the resolved arguments as they are"."""

    num_gpus: list[int]
    effective_batch_size: list[int] | None = None
    max_seq_len: list[int] | None = None
    packing: list[bool] | None = None
    attn_implementation: list[str] | None = None


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
            f"{f'per_device_train_batch_size {pdbs}' if pdbs is not None else f'gradient_accumulation_steps {ga}'}: "
            f"{effective_batch_size} is not a positive multiple of {denominator} (so {derived} would not be an integer)"
        )
    quotient = effective_batch_size // denominator
    return (pdbs, quotient) if derived == "gradient_accumulation_steps" else (quotient, ga)


def _batch_problem(args: dict[str, Any], scenario: str, source: str) -> InputProblem | None:
    """The batch keys as whole counts >= 1 (YAML text such as "4" included, made an int), else the problem."""
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        value = args.get(key)
        if value is None:
            continue
        if isinstance(value, str) and value.strip().isdigit():
            args[key] = value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return InputProblem(source, f"scenario {scenario!r}: arguments.{key}",
                                f"expected a whole number >= 1, got {shown(value)}", f"e.g. `{key}: 4`")
    return None


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
    defaults_source: str = "defaults.yaml",
) -> list[ExperimentSpec]:
    """Precedence, lowest to highest: defaults < data_processing < scenario < framework config < CLI matrix.
    A scenario that names no model (nor do the defaults) gets the entry's default model (`preset:llama-tiny`)."""
    experiments: list[ExperimentSpec] = []
    default_model = defaults.get("model_name_or_path", ModelArguments.model_name_or_path)
    for scenario in scenarios:
        models = scenario.arguments.get("model_name_or_path", default_model)
        models = models if isinstance(models, list) else [models]
        if not models or any(not isinstance(m, str) for m in models):
            problems.append(InputProblem(scenarios_source, f"{scenario.name}.arguments.model_name_or_path",
                                         f"expected a model name or a list of them, got {shown(models)}",
                                         "e.g. `model_name_or_path: [preset:llama-tiny]`"))
            continue
        names = list(scenario.framework_configs)
        for fc_name in scenario.framework_configs:
            if framework_configs.get(fc_name or BASELINE) is None:
                problems.append(InputProblem(
                    scenarios_source, f"{scenario.name}.framework_config",
                    f"unknown framework config {fc_name!r}", _config_fix(str(fc_name), framework_configs)))
                names.remove(fc_name)
        # a scenario none of whose configs is known still has its arguments checked, under the baseline's: every
        # problem in one go (the problem above means nothing runs)
        for fc_name in names or ([None] if scenario.framework_configs else []):
            fc = framework_configs.get(fc_name or BASELINE)
            if fc is None:
                continue
            layers = _Layers(defaults, data_processing, scenario, fc, device_type, accelerate_config, scenarios_source,
                             defaults_source)
            counts = [n for n in matrices.num_gpus if scenario.num_gpus is None or n in scenario.num_gpus]
            for combo in itertools.product(
                    models, counts, matrices.effective_batch_size or [None], matrices.max_seq_len or [None],
                    matrices.packing if matrices.packing is not None else [None],
                    matrices.attn_implementation or [None]):
                experiment = layers.experiment(*combo, problems)
                if experiment is not None:
                    experiments.append(experiment)
    return experiments


@dataclass(frozen=True)
class _Layers:
    """One scenario × framework config: its argument layers and where its problems point."""

    defaults: dict[str, Any]
    data_processing: dict[str, Any]
    scenario: Scenario
    framework_config: FrameworkConfig
    device_type: str
    accelerate_config: dict[str, Any]
    source: str
    defaults_source: str = "defaults.yaml"

    def habits(self, args: dict[str, Any], cli_layer: dict[str, Any]) -> InputProblem | None:
        """fms's habits read as fms reads them (tunebench.matrix.habits): mixed precision as one choice across the
        layers (the losing flag turned off where it was on), space-separated target modules split."""
        scenario, fc = self.scenario, self.framework_config
        precision, conflict = resolve_precision([
            Layer(self.defaults_source, self.defaults, weak=True),
            Layer(f"{self.source}: data_processing", self.data_processing),
            Layer(f"{self.source}: scenario {scenario.name!r}", scenario.arguments),
            Layer(f"{fc.source or 'framework configs'}: framework config {fc.name!r}", fc.arguments),
            Layer("command line", cli_layer)])
        if conflict:
            return InputProblem(self.source, f"scenario {scenario.name!r}: arguments.bf16/fp16", conflict,
                                "turn on one of bf16 and fp16 (the other follows), or drop it where the framework "
                                "config sets it")
        for flag, value in precision.items():
            if not value and args.get(flag) not in (None, False):
                args[flag] = False
        if "target_modules" in args:
            args["target_modules"] = split_target_modules(args["target_modules"])
        return None

    def experiment(self, model: str, num_gpus: int, ebs: int | None, seq_len: int | None, packing: bool | None,
                   attention: str | None, problems: list[InputProblem]) -> ExperimentSpec | None:
        """One point of the CLI matrices, resolved; None (and a problem, once) when its batch does not split."""
        cli_layer: dict[str, Any] = {"model_name_or_path": model}
        for key, value in (("attn_implementation", attention), ("max_seq_len", seq_len), ("packing", packing)):
            if value is not None:
                cli_layer[key] = value
        scenario = self.scenario
        args = resolve_arguments(self.defaults, self.data_processing, scenario.arguments,
                                 self.framework_config.arguments, cli_layer)
        bad = self.habits(args, cli_layer) or _batch_problem(args, scenario.name, self.source)
        if bad:  # the batch is arithmetic here: a non-count never reaches it
            if bad not in problems:
                problems.append(bad)
            return None
        if ebs is not None:
            split = split_batch(ebs, num_gpus, args)
            if isinstance(split, str):
                problem = InputProblem("command line", "--effective_batch_size_matrix",
                                       f"scenario {scenario.name!r}: {split}",
                                       "choose an effective batch divisible by that number")
                if problem not in problems:  # one message per scenario, not per framework config
                    problems.append(problem)
                return None
            args["per_device_train_batch_size"], args["gradient_accumulation_steps"] = split
        else:
            for key, default in (("per_device_train_batch_size", 8), ("gradient_accumulation_steps", 1)):
                if args.get(key) is None:  # absent or null: the harness's default
                    args[key] = default
            ebs = args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] * num_gpus
        return ExperimentSpec(scenario=scenario.name, framework_config=self.framework_config, num_gpus=num_gpus,
                              device_type=self.device_type, arguments=args, effective_batch_size=ebs,
                              slow=scenario.slow, exclusive=scenario.exclusive, timeout=scenario.timeout,
                              accelerate_config=self.accelerate_config)


def _config_fix(name: str, framework_configs: dict) -> str:
    """The closest framework config's name (a list of 50 would hide it), else the names."""
    names = sorted(n for n in framework_configs if n != BASELINE)
    close = difflib.get_close_matches(name, names, n=1)
    return f"did you mean {close[0]!r}?" if close else "use one of: null, " + ", ".join(names)
