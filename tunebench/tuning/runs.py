"""Running the search's points as ordinary experiments through the Python API: one scenario each, built in Python,
expanded, validated, predicted once, run and written like any matrix.

The shared inputs (defaults, framework configs, the GPUs nvidia-smi lists) are read once per search, every batch
runs in one session (one preload server, one set of live processes to stop), and a problem of a generated scenario
is reported as the tune option that produced the value.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tunebench.api.matrix import Matrix, MatrixInputs, MatrixOptions, build
from tunebench.api.running import RunSettings, run_prepared
from tunebench.errors import InputError, InputProblem
from tunebench.execution.processes import RunSession
from tunebench.hardware.gpus import load_table, resolve
from tunebench.matrix.inputs import parse_scenarios
from tunebench.tuning.option_checks import in_users_words
from tunebench.tuning.options import TuneOptions
from tunebench.tuning.space import Point
from tunebench.tuning.stages import STAGE_ARGUMENTS
from tunebench.vocabulary import Device, Objective

logger = logging.getLogger(__name__)

GENERATED = "tune's generated scenarios"  # the `source` of a problem found in a scenario tune wrote


def scenario_name(stage: str, point: Point) -> str:
    return f"tune-{stage}-{point.label}"


def scenario_file(options: TuneOptions, stage: str, points: list[Point], cpu: bool, name=scenario_name) -> dict:
    """The scenarios (as a scenarios.yaml's content) that run these points at this stage."""
    return {
        "data_processing": {"max_seq_len": options.max_seq_len},
        "scenarios": [{"name": name(stage, p), "framework_config": [p.framework],
                       "arguments": {**p.arguments(options, cpu), **STAGE_ARGUMENTS[stage]}} for p in points],
    }


def matrix_options(options: TuneOptions) -> MatrixOptions:
    """The matrix settings every batch of the search shares."""
    defaults = MatrixOptions()
    memory_logging = {"scanner", "nvidia"} if options.objective == Objective.JOULES_PER_TOKEN else {"scanner"}
    return MatrixOptions(defaults=options.defaults_config_path or defaults.defaults,
                         framework_configs=options.framework_configs_path or defaults.framework_configs,
                         device=Device(options.device), num_gpus=[options.num_gpus],
                         memory_logging=frozenset(memory_logging))


class HarnessRuns:
    """Expands and runs points through the same code as `benchmark.py` (validation, predictions, executor, CSVs)."""

    def __init__(self, options: TuneOptions):
        self.options = options
        self.output_dir = Path(options.results_output_path)
        self.matrix_options = matrix_options(options)
        problems: list[InputProblem] = []
        self.inputs = MatrixInputs.load(self.matrix_options, problems)  # nvidia-smi and the files, once
        if problems:
            raise InputError(in_users_words(problems, GENERATED))
        self.settings = RunSettings(results_output_path=options.results_output_path, timeout=options.timeout,
                                    plan_device=options.plan_device, gpu_table=options.gpu_table)
        self.session = RunSession()  # one preload server and one set of live processes for every batch
        self.predictions: dict[Point, dict[str, Any]] = {}

    def device(self) -> str:
        """cuda or cpu, as benchmark.py decides it for --device."""
        return self.inputs.device_type

    def _matrix(self, stage: str, points: list[Point]) -> tuple[Matrix, list]:
        """The points' matrix at this stage, and its experiments in the points' order."""
        problems: list[InputProblem] = []
        scenarios = parse_scenarios(scenario_file(self.options, stage, points, self.device() == "cpu"), GENERATED,
                                    problems)
        try:
            matrix = build(self.matrix_options, problems, self.inputs, scenarios, GENERATED)
        except InputError as exc:  # a generated value is the user's option: name it, once
            raise InputError(in_users_words(exc.problems, GENERATED)) from None
        by_name = {e.scenario: e for e in matrix.experiments}
        return matrix, [by_name[scenario_name(stage, p)] for p in points]

    def predict(self, points: list[Point]) -> dict[Point, dict[str, Any]]:
        """`pred_*` columns of every point (one fake step per distinct shape; no GPU needed), made once."""
        from tunebench.api.planning import predictions

        matrix, experiments = self._matrix("space", points)
        by_id = predictions(matrix, self.options.plan_device, self.options.gpu_table)
        # --project_to: the same fake step against the other GPU's memory (a point must fit both to be worth a run),
        # that GPU resolved in the same table as the projection's
        target = predictions(matrix, self.options.project_to, self.options.gpu_table,
                             option="--project_to") if self.options.project_to else {}
        self.predictions = {p: {**by_id.get(e.experiment_id, {}),
                                **({"target": target.get(e.experiment_id, {})} if target else {})}
                            for p, e in zip(points, experiments, strict=True)}
        return self.predictions

    def __call__(self, stage: str, points: list[Point]) -> list[dict[str, Any]]:
        """Run these points at this stage; their rows (reused when the folder already holds them). The caller
        holds the results folder's lock for the whole search."""
        from tunebench.execution.preparation import preprocess_data

        matrix, experiments = self._matrix(stage, points)
        preprocess_data(experiments, build=True)
        predictions = {e.experiment_id: self.predictions.get(p, {}) for p, e in zip(points, experiments, strict=True)}
        logger.info("tune %s: %s", stage, ", ".join(p.label for p in points))
        predictions = {k: {c: v for c, v in p.items() if c != "target"} for k, p in predictions.items()}
        rows = run_prepared(matrix, self.settings, predictions, self.session, locked=True).rows
        return projected(rows, self.options) if self.options.project_to else rows


def projected(rows: list[dict[str, Any]], options: TuneOptions) -> list[dict[str, Any]]:
    """The rows with their `proj_*` columns on --project_to's GPU (from each run's kernel split; a row that cannot
    be projected gets the proj_note saying why, and no objective)."""
    import pandas as pd

    from tunebench.projection.project import project_rows
    from tunebench.results.folder import folders_by_id

    if not rows:
        return rows
    table = load_table(options.gpu_table)
    target = resolve(table, options.project_to, "--plan_device")
    frame = project_rows(pd.DataFrame(rows), table, target, folders_by_id(Path(options.results_output_path)),
                         options.gpu_hour_price)
    return [{**row, **{k: v for k, v in extra.items() if k.startswith("proj_")}}
            for row, extra in zip(rows, frame.to_dict("records"), strict=True)]
