"""The column registry (issue I): every produced column is declared, compare and the column reference page follow it.

Reached through the modules it calls (the declared and environment columns):
tunebench/results/columns/declared.py, tunebench/results/columns/environment.py."""


import pandas as pd
import pytest

from tests.fixtures.harness import REPO
from tunebench.experiment.entry_parser import entry_parser
from tunebench.results.columns import docs as column_docs
from tunebench.results.columns import lookup as columns
from tunebench.results.compare import rules

# CSVs the harness produced: the references (this code's CPU job, the default GPU set on H100 and H200) and the
# GPU evidence runs (sidecar, collectives, ranks, multi-GPU).
REFERENCES = sorted((REPO / "refs").glob("*.csv"))
PRODUCED = REFERENCES + [
    *(REPO / "docs/evidence/gpu-runs" / name for name in ("h200-issue-a-runs.csv", "h200x2-8b-fsdp2.csv",
                                                           "h200x4-multigpu.csv")),
    REPO / "docs/evidence/default-set-h100/raw_summary.csv",
    REPO / "docs/evidence/default-set-h200/raw_summary.csv",
    REPO / "docs/evidence/throughput-h100/final/throughput_runs.csv",
]


@pytest.fixture(scope="module")
def arguments() -> set[str]:
    return entry_parser().known_keys()


@pytest.mark.parametrize("csv", PRODUCED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_produced_column_is_declared(csv, arguments):
    produced = [c for c in pd.read_csv(csv).columns if c != "pass"]  # `pass`: the evidence script's run label
    assert columns.undeclared(produced, arguments) == []


@pytest.mark.parametrize("csv", REFERENCES, ids=lambda p: p.name)
def test_references_hold_ok_rows_with_the_steady_state_columns(csv):
    """What `compare --reference` reads: only successful rows (failures live under docs/evidence/), and the
    headline columns filled in every row."""
    frame = pd.read_csv(csv)
    assert len(frame) > 0 and set(frame["status"]) == {"ok"}
    for column in ("steady_step_time_median", "steady_tokens_per_second", "steady_step_time_cv", "steady_steps"):
        assert frame[column].notna().all(), column


def test_a_new_column_without_a_declaration_is_caught(arguments):
    produced = [*pd.read_csv(REPO / "refs" / "cpu.csv").columns, "steady_brand_new_metric"]
    assert columns.undeclared(produced, arguments) == ["steady_brand_new_metric"]


def test_the_column_reference_is_generated_from_the_registry():
    assert column_docs.sync_page(), "run: python -m tunebench.results.columns.docs"
    text = (REPO / "docs" / "reference" / "columns.md").read_text()
    for column in ("steady_nonpad_tokens_per_second", "pred_mem_peak", "concurrent_experiments", "scan_time_backward"):
        assert f"`{column}`" in text


def test_compare_reads_kinds_families_and_directions_from_the_registry():
    for wall in ("entry_wall_seconds", "scan_init_time", "experiment_wall_seconds", "startup_seconds"):
        assert rules.metric_family(wall) == "startup" and not rules.is_argument_column(wall)
        assert rules.rule_for(wall).direction == rules.IGNORE  # informational unless asked for
    assert rules.rule_for("steady_nonpad_tokens_per_second").direction == rules.LOWER_IS_WORSE
    assert rules.rule_for("steady_step_time_median").direction == rules.HIGHER_IS_WORSE
    assert rules.rule_for("steady_step_time_cv").direction == rules.IGNORE  # informational
    assert rules.is_argument_column("learning_rate") and rules.is_argument_column("per_device_train_batch_size")
    assert rules.is_argument_column("scan_time_steps") and rules.is_argument_column("scan_steps")  # not metrics
    assert not rules.is_argument_column("measurement_warning") and not rules.is_argument_column("executor")
    assert columns.lookup("scan_mem_activations_min").meaning.startswith("min over ranks")
    assert columns.lookup("scan_comm_all_gather_bytes").unit == "bytes"
    assert rules.format_value("steady_mfu", 0.3616) == "36.16 %"


def test_a_csv_is_read_back_through_the_registrys_types(tmp_path):
    """Words stay words whatever they look like: an all-digit id or git hash keeps its leading zeros, a driver
    version and a scenario named 2024 stay text; metrics are numbers."""
    from tunebench.results.compare.reading import load_csv

    path = tmp_path / "raw_summary.csv"
    path.write_text("experiment_id,scenario,tunebench_git_sha,driver_version,steady_tokens_per_second,status\n"
                    "000123456789,2024,0012345,535,10.5,ok\n")
    row = load_csv(path, "results").iloc[0]
    assert (row["experiment_id"], row["scenario"], row["tunebench_git_sha"], row["driver_version"]) == \
        ("000123456789", "2024", "0012345", "535")
    assert row["steady_tokens_per_second"] == 10.5 and row["status"] == "ok"
    assert {"experiment_id", "status", "gpu_name", "driver_version"} <= set(columns.text_columns())
    assert "packing" not in columns.text_columns() and "steady_tokens_per_second" not in columns.text_columns()


def test_the_device_peak_a_cpu_run_leaves_empty_points_to_the_host_memory_column():
    """Issue AD: on CPU `scan_mem_peak_allocated` is empty and nothing pointed to the host's memory; its doc (the
    column reference page, compare's and the report's wording) names the column that holds it."""
    doc = columns.lookup("scan_mem_peak_allocated").meaning
    assert "empty on CPU" in doc and "`mem_peak_host_rss_bytes`" in doc
    assert columns.lookup("mem_peak_host_rss_bytes").unit == "bytes"
