"""Running the search's points as ordinary experiments: one scenario each, expanded, validated, run, written."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tunebench import cli
from tunebench.api.matrix import resolve_device
from tunebench.cli.options import build_parser
from tunebench.errors import InputError
from tunebench.execution.runner import run_matrix
from tunebench.results import summaries
from tunebench.tune.option_checks import in_users_words
from tunebench.tune.options import TuneOptions
from tunebench.tune.space import Point
from tunebench.tune.stages import STAGE_ARGUMENTS

logger = logging.getLogger(__name__)

def scenario_name(stage: str, point: Point) -> str:
    return f"tune-{stage}-{point.label}"


def scenario_file(options: TuneOptions, stage: str, points: list[Point], cpu: bool, name=scenario_name) -> dict:
    """The scenarios.yaml content that runs these points at this stage."""
    return {
        "data_processing": {"max_seq_len": options.max_seq_len},
        "scenarios": [{"name": name(stage, p), "framework_config": [p.framework],
                       "arguments": {**p.arguments(options, cpu), **STAGE_ARGUMENTS[stage]}} for p in points],
    }


class HarnessRuns:
    """Expands and runs points through the same code as `benchmark.py` (validation, predictions, executor, CSVs)."""

    def __init__(self, options: TuneOptions):
        self.options = options
        self.output_dir = Path(options.results_output_path)
        self.device_type: str | None = None
        self.predictions: dict[Point, dict[str, Any]] = {}

    def _namespace(self, scenarios_path: Path):
        o = self.options
        argv = ["--scenarios_config_path", str(scenarios_path), "--results_output_path", o.results_output_path,
                "--num_gpus_matrix", str(o.num_gpus), "--device", o.device, "--timeout", str(o.timeout),
                "--log_level", o.log_level]
        argv += ["--plan_device", o.plan_device] if o.plan_device else []
        argv += ["--log_nvidia_smi"] if o.objective == "joules_per_token" else []
        argv += ["--defaults_config_path", o.defaults_config_path] if o.defaults_config_path else []
        argv += ["--framework_configs_path", o.framework_configs_path] if o.framework_configs_path else []
        return build_parser().parse_args(argv)

    def _expand(self, stage: str, points: list[Point], cpu: bool):
        with tempfile.TemporaryDirectory(prefix="tunebench-tune-") as tmp:
            path = Path(tmp) / f"tune-{stage}.yaml"
            path.write_text(yaml.safe_dump(scenario_file(self.options, stage, points, cpu), sort_keys=False))
            ns = self._namespace(path)
            try:
                experiments, device_type, gpus, memory_logging = cli.plan(ns)
            except InputError as exc:  # the generated file is gone when the user reads this: name their option
                raise InputError(in_users_words(exc.problems, str(path))) from None
        by_name = {e.scenario: e for e in experiments}
        return ns, [by_name[scenario_name(stage, p)] for p in points], device_type, gpus, memory_logging

    def device(self) -> str:
        """cuda or cpu, as benchmark.py decides it for --device."""
        if self.device_type is None:
            from tunebench.telemetry.gpus import query_gpus

            gpus = query_gpus() if self.options.device in ("auto", "cuda") else []
            self.device_type = resolve_device(self.options.device, gpus)
        return self.device_type

    def predict(self, points: list[Point]) -> dict[Point, dict[str, Any]]:
        """`pred_*` columns of every point (one fake step per distinct shape; no GPU needed)."""
        ns, experiments, device_type, gpus, _ = self._expand("space", points, self.device() == "cpu")
        by_id = cli.predictions_for(ns, experiments, gpus)
        self.predictions = {p: by_id.get(e.experiment_id, {}) for p, e in zip(points, experiments, strict=True)}
        return self.predictions

    def __call__(self, stage: str, points: list[Point]) -> list[dict[str, Any]]:
        """Run these points at this stage; their rows (reused when the folder already holds them)."""
        from tunebench.execution.preparation import preprocess_data

        ns, experiments, device_type, gpus, memory_logging = self._expand(stage, points, self.device() == "cpu")
        preprocess_data(experiments, build=True)
        predictions = {e.experiment_id: self.predictions.get(p, {}) for p, e in zip(points, experiments, strict=True)}
        logger.info("tune %s: %s", stage, ", ".join(p.label for p in points))
        try:
            rows = run_matrix(experiments, cli.run_options(ns, gpus, memory_logging, predictions))
        except BaseException:
            # However the batch ends (a signal, Ctrl-C, an executor error), the CSVs hold every experiment on
            # disk, an interrupted one as its error row; a failure to write them must not hide the cause.
            try:
                summaries.write_summaries(self.output_dir)
            except OSError as exc:
                logger.error("could not rebuild the CSVs in %s: %s", self.output_dir, exc)
            raise
        summaries.write_summaries(self.output_dir)
        return rows
