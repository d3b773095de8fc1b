"""The column registry (issue I): every produced column is declared, compare and the README follow it."""

from pathlib import Path

import pandas as pd
import pytest

from tunebench.experiment.arguments import StrictArgumentParser
from tunebench.results import columns
from tunebench.results import compare_rules as rules

REPO = Path(__file__).resolve().parents[1]
# CSVs the harness produced: the CPU reference (this code's CPU job) and GPU runs (sidecar, collectives, ranks).
PRODUCED = sorted((REPO / "refs").glob("*.csv"))


@pytest.fixture(scope="module")
def arguments() -> set[str]:
    return StrictArgumentParser().known_keys()


@pytest.mark.parametrize("csv", PRODUCED, ids=lambda p: p.name)
def test_every_produced_column_is_declared(csv, arguments):
    assert columns.undeclared(pd.read_csv(csv).columns, arguments) == []


def test_a_new_column_without_a_declaration_is_caught(arguments):
    produced = [*pd.read_csv(REPO / "refs" / "cpu.csv").columns, "steady_brand_new_metric"]
    assert columns.undeclared(produced, arguments) == ["steady_brand_new_metric"]


def test_the_readme_tables_are_generated_from_the_registry():
    assert columns.sync_readme(REPO / "README.md"), "run: python -m tunebench.results.columns"
    text = (REPO / "README.md").read_text()
    for column in ("steady_nonpad_tokens_per_second", "pred_mem_peak", "concurrent_experiments", "scan_time_backward"):
        assert f"`{column}`" in text


def test_compare_reads_kinds_families_and_directions_from_the_registry():
    for wall in ("entry_wall_seconds", "scan_init_time", "experiment_wall_seconds", "startup_seconds"):
        assert rules.metric_family(wall) == "time" and not rules.is_argument_column(wall)
    assert rules.rule_for("steady_nonpad_tokens_per_second").direction == rules.LOWER_IS_WORSE
    assert rules.rule_for("steady_step_time_median").direction == rules.HIGHER_IS_WORSE
    assert rules.rule_for("steady_step_time_cv").direction == rules.IGNORE  # informational
    assert rules.is_argument_column("learning_rate") and rules.is_argument_column("per_device_train_batch_size")
    assert rules.is_argument_column("scan_time_steps") and rules.is_argument_column("scan_steps")  # not metrics
    assert not rules.is_argument_column("measurement_warning") and not rules.is_argument_column("executor")
    assert columns.lookup("scan_mem_activations_min").meaning.startswith("min over ranks")
    assert columns.lookup("scan_comm_all_gather_bytes").unit == "bytes"
    assert rules.format_value("steady_mfu", 0.3616) == "36.16 %"
