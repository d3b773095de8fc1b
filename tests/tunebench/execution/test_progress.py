"""The matrix progress view (issue Q): each experiment's GPUs or CPU slots, batch and framework; one finish per
experiment however often an executor reports its row; Ray tasks shown as submitted, never as running."""

from __future__ import annotations

import logging
import re
import sys
import types

import pytest
from rich.console import Console

from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.progress import MatrixProgress, Settings, settings_of
from tunebench.execution.runner import run_matrix
from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig

CPU_GC = Settings(2, True, "4×2", "gradient-checkpointing")
CPU_BASE = Settings(1, True, "8×1", "none")


def progress_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tunebench.execution.progress"]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split("[│┃]", line)[1:-1]]


def rendered(progress: MatrixProgress) -> list[str]:
    console = Console(record=True, width=200)
    console.print(progress._render())
    return console.export_text().splitlines()


def test_log_lines_name_each_experiments_slots_batch_and_framework(caplog):
    caplog.set_level(logging.INFO)
    progress = MatrixProgress(["full_a", "lora_b"], live=False, settings=[CPU_GC, CPU_BASE])
    progress.started(0, "slots 0,1")
    assert progress_lines(caplog) == [
        "started full_a (2 CPU slots, batch 4×2, gradient-checkpointing) slots 0,1 (0/2 done, 1 running, 1 queued)"]


def test_live_table_has_device_batch_and_framework_columns():
    progress = MatrixProgress(["full_a", "lora_b"], live=False, settings=[CPU_GC, CPU_BASE])
    progress.started(1, "slots 0")
    lines = rendered(progress)
    header = next(line for line in lines if "experiment" in line)
    assert cells(header) == ["experiment", "CPU slots", "batch", "framework", "state", "where"]
    row = next(line for line in lines if "lora_b" in line)
    assert cells(row) == ["lora_b", "1", "8×1", "none", "running", "slots 0"]
    gpus = MatrixProgress(["x"], live=False, settings=[Settings(4, False, "2×4", "fsdp")])
    assert "GPUs" in next(line for line in rendered(gpus) if "experiment" in line)


def test_an_experiment_finishes_once_and_a_later_report_only_updates_it(caplog):
    caplog.set_level(logging.INFO)
    progress = MatrixProgress(["a", "b"], live=False)
    progress.started(0)
    assert progress.finished(0, "ok", seconds=4.0) is True
    assert progress.finished(0, "ok") is False  # e.g. Ray's concurrent_experiments recount
    assert progress.finished(0, "error") is False
    assert [line for line in progress_lines(caplog) if line.startswith("finished")] == [
        "finished a: ok (1/2 done, 0 running, 1 queued, ETA 4 s)"]
    assert progress.state == ["error", "queued"] and progress.durations == [4.0]
    assert progress.summary() == "1/2 done, 0 running, 1 queued, ETA 4 s"


def test_submitted_is_neither_running_nor_queued_and_is_timed_by_the_row(caplog):
    caplog.set_level(logging.INFO)
    progress = MatrixProgress(["a", "b", "c", "d"], live=False)
    for i in range(4):
        progress.submitted(i, "Ray")
    assert progress_lines(caplog)[-1] == "submitted d Ray (0/4 done, 0 running, 4 submitted, 0 queued)"
    progress.finished(2, "ok", seconds=6.0)  # its own run time, not the wait in Ray's queue
    assert progress.summary() == "1/4 done, 0 running, 3 submitted, 0 queued, ETA 18 s"
    assert cells(next(line for line in rendered(progress) if "│ a " in line)) == ["a", "submitted", "Ray"]


def test_settings_come_from_the_spec_with_sftconfig_defaults_for_unset_batch_values():
    batch = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
    given = ExperimentSpec(
        "s",
        FrameworkConfig("gradient-checkpointing"),
        2,
        "cpu",
        {"model_name_or_path": "m", **batch},
        entry={"training": batch},
    )  # typed, as the matrix's validation leaves it
    assert (
        settings_of(given) == CPU_GC
        and settings_of(given).describe() == "2 CPU slots, batch 4×2, gradient-checkpointing"
    )
    unset = ExperimentSpec("s", FrameworkConfig("none"), 1, "cuda", {"model_name_or_path": "m"}, entry={"training": {}})
    assert settings_of(unset) == Settings(1, False, "8×1", "none")  # SFTConfig's defaults, as the child runs
    assert settings_of(unset).describe() == "1 GPU, batch 8×1, none"


# --------------------------------------------------------------------------------- Ray, through run_matrix
class _FakeRay(types.ModuleType):
    """The few Ray calls RayExecutor makes, answered from `outcomes` (row, where) in submission order: enough to
    drive the executor and the runner without a cluster."""

    class exceptions:  # noqa: N801 (ray.exceptions)
        class RayError(Exception):
            pass

    def __init__(self, outcomes):
        super().__init__("ray")
        self.outcomes, self.submitted = outcomes, []

    def is_initialized(self):
        return True

    def nodes(self):
        return [{"Alive": True, "Resources": {"CPU": 2.0}}]

    def remote(self, **_):
        fake = self

        class Remote:
            def options(self, **_):
                return self

            def remote(self, experiment, options):
                fake.submitted.append(experiment.folder_name)
                return len(fake.submitted) - 1

        return lambda function: Remote()

    def wait(self, refs, num_returns=1, timeout=None):
        return sorted(refs)[:num_returns], sorted(refs)[num_returns:]

    def get(self, ref):
        row, where = self.outcomes[ref]
        return dict(row), None, {"node": "10.0.0.1", "gpus": [], **where}


def test_ray_run_logs_each_experiment_once_and_never_claims_queued_tasks_run(tmp_path, caplog, monkeypatch):
    args = {"model_name_or_path": "m", "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}
    entry = {"bench": {}, "training": {k: v for k, v in args.items() if k != "model_name_or_path"}}
    experiments = [ExperimentSpec(f"s{i}", FrameworkConfig("none"), 1, "cpu", args, entry=entry)
                   for i in range(3)]
    for e in experiments:
        (tmp_path / e.folder_name).mkdir()
    # 0 and 1 overlap (known only once 1 has returned: 0's row is reported again), 2 ran alone
    row = {"status": "ok", "experiment_start_unix": 100.0, "experiment_end_unix": 105.0}
    fake = _FakeRay([(row, {"start": 0.0, "end": 10.0}), (row, {"start": 1.0, "end": 11.0}),
                     (row, {"start": 20.0, "end": 30.0})])
    monkeypatch.setitem(sys.modules, "ray", fake)
    caplog.set_level(logging.INFO)
    rows = run_matrix(experiments, RunOptions(output_dir=tmp_path, executor="ray", cpu_slots=2))
    lines = progress_lines(caplog)
    for e in experiments:
        assert sum(line.startswith(f"finished {e.folder_name}:") for line in lines) == 1, lines
        assert sum(line.startswith(f"submitted {e.folder_name} (1 CPU slot, batch 4×1, none) Ray")
                   for line in lines) == 1, lines
    runner = [r.getMessage() for r in caplog.records if r.name == "tunebench.execution.runner"]
    assert sorted(runner) == sorted(f"{e.folder_name}: ok" for e in experiments)
    assert all(" 0 running" in line for line in lines)  # submitted tasks are never counted as running
    assert lines[2].endswith("(0/3 done, 0 running, 3 submitted, 0 queued)")
    # the recount still reaches the row (and its results.json): updated, not finished again
    assert [r["concurrent_experiments"] for r in rows] == [1, 1, 0]
    assert '"concurrent_experiments": 1' in (tmp_path / experiments[0].folder_name / "results.json").read_text()
    assert lines[-1] == f"finished {experiments[2].folder_name}: ok (3/3 done, 0 running, 0 queued, ETA 0 s)"


@pytest.fixture(autouse=True)
def _no_live_view(monkeypatch):
    """run_matrix draws the rich view on a terminal; the log lines are what these tests read."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)


def test_a_python_caller_without_logging_hears_the_progress(monkeypatch, capsys):
    """Issue AD: tunebench.run from a script that configured no logging printed nothing for a minute (Python shows
    warnings only); within the run its progress goes to stderr, and a caller's own logging is left as it is."""
    import logging

    from tunebench.execution.progress import shown_to_stderr

    root, package = logging.getLogger(), logging.getLogger("tunebench")
    monkeypatch.setattr(root, "handlers", [])  # pytest's capture handler stands for a caller's logging set-up
    monkeypatch.setattr(root, "level", logging.WARNING)
    with shown_to_stderr():
        logging.getLogger("tunebench.execution.progress").info("started one (0/1 done)")
    logging.getLogger("tunebench.execution.progress").info("after the run")
    assert capsys.readouterr().err == "tunebench: started one (0/1 done)\n"
    assert package.handlers == [] and package.level == logging.NOTSET
    monkeypatch.setattr(root, "handlers", [logging.NullHandler()])  # a caller who set up logging: nothing added
    with shown_to_stderr():
        assert package.handlers == []
