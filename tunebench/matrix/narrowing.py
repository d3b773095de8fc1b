"""What a matrix would drop, narrow or change without a word, said before anything runs: a line each (a warning)
where the run still does what the files say, one input problem where the files contradict themselves.

A scenario whose `num_gpus` meets none of the matrix's GPU counts expands to nothing; `loss_band_kind` without a
`loss_band_seed` perturbs nothing (only a band run reads it); transformers turns `torch_compile` on for any
`torch_compile_mode`, so a mode without the switch compiles while the plan and the row's identity said eager.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tunebench.errors import InputProblem
from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)


def missed_gpu_counts(scenarios: list, num_gpus: list[int], source: str) -> list[str]:
    """A line for every scenario whose own `num_gpus` holds none of the matrix's counts: it runs nothing."""
    lines = []
    for scenario in scenarios:
        wanted = scenario.num_gpus
        if wanted and not set(wanted) & set(num_gpus):
            lines.append(f"{source}: scenario {scenario.name!r}: num_gpus {sorted(wanted)} holds none of the matrix's "
                         f"GPU counts {sorted(num_gpus)}: it runs no experiment (add the counts to --num_gpus_matrix, "
                         "or widen its num_gpus)")
    return lines


def typed_settings(spec: ExperimentSpec,
                   origin: Callable[[ExperimentSpec, str], tuple[str, str]]) -> tuple[list[str], list[InputProblem]]:
    """(lines, problems) of one experiment's typed values: settings that do nothing or something other than they
    say. `origin(spec, key)` is (file, where) of a key. The typed values are made to say what the run does (a
    mode compiles)."""
    training, bench = spec.entry.get("training", {}), spec.entry.get("bench", {})
    lines, problems = [], []
    if "loss_band_kind" in bench and not bench.get("loss_band_seed"):
        source, where = origin(spec, "loss_band_kind")
        lines.append(f"{source}: {where}: loss_band_kind {bench['loss_band_kind']!r} has no effect without "
                     "loss_band_seed > 0 (only a band run perturbs anything): this experiment is no band run (set "
                     "loss_band_seed, e.g. 1, or drop loss_band_kind)")
    mode = training.get("torch_compile_mode")
    if mode is not None and not training.get("torch_compile"):
        source, where = origin(spec, "torch_compile_mode")
        if training.get("torch_compile") is False:
            problems.append(InputProblem(source, where, f"torch_compile_mode {mode!r} with torch_compile: false: "
                                         "transformers compiles whenever a mode is given",
                                         "drop torch_compile_mode, or set torch_compile: true"))
        else:
            lines.append(f"{source}: {where}: torch_compile_mode {mode!r} turns torch.compile on (transformers does "
                         "for any mode): the experiment is compiled, and planned so (say torch_compile: true)")
            training["torch_compile"] = True
    return lines, problems


def say_once(lines: list[str], said: set[str] | None = None) -> None:
    """Each line once (one per scenario and key, not per experiment of it), as a warning."""
    said = set() if said is None else said
    for line in lines:
        if line not in said:
            said.add(line)
            logger.warning("%s", line)

