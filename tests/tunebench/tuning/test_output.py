"""What tune says about its runs: a noisy confirming run never makes a confirmed winner, ranks are integers, a
failed point's reason is its error in one line, and the winner's "Run it" line works from where tune ran."""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.harness import REPO
from tunebench.tuning import output, prune
from tunebench.tuning.options import TuneOptions
from tunebench.tuning.search import CONFIRM, Search
from tunebench.tuning.space import build_space

OPTIONS = TuneOptions(model="preset:llama-tiny", effective_batch=8, max_seq_len=128, optimizers=("adamw_torch_fused",),
                      peft="lora", gradient_checkpointing=(False,))
# The busy-host run of issue W: 75 % step-time spread, ±29.7 % interval, and the experiment's own warning.
BUSY_WARNING = "step time spread 75.0 % (robust CV, 1.4826·MAD/median) exceeds 5.0 %: the host was not quiet"


class Runs:
    """Screening runs steady; each confirming run measured as `confirm` says; micro-batch 8 clearly fastest."""

    def __init__(self, confirm: dict, failure: str | None = None):
        self.confirm, self.failure = confirm, failure

    def __call__(self, stage, points):
        rows = []
        for p in points:
            row = {"status": "ok", "experiment_wall_seconds": 10.0, "num_gpus": 1, "measurement_warning": "",
                   "steady_nonpad_tokens_per_second": 1000.0 * p.micro_batch, "steady_step_time_ci_pct": 0.5,
                   "steady_step_time_robust_cv": 0.01, "experiment_id": f"{stage}-{p.label}"}
            if stage == CONFIRM:
                row.update(self.confirm)
            if self.failure is not None and p.micro_batch == 4:
                row.update(status="error", error_messages=self.failure, steady_nonpad_tokens_per_second=None)
            rows.append(row)
        return rows


def _outcome(confirm: dict, failure: str | None = None, options: TuneOptions = OPTIONS):
    points = build_space(options, cpu=True)  # LoRA, no checkpointing: micro-batches 1, 2, 4, 8
    return Search(points, {}, options, "cpu", prune.Margin(0.02, "test")).run(Runs(confirm, failure))


def _expected_noise(ci: float, spread: float, warning: str) -> str:
    reasons = [f"measurement warning: {warning}"] if warning else []
    if spread > 0.05 and not warning:
        reasons.append(f"step-time spread {spread:.1%} beyond 5%")
    if ci > 1.0:
        reasons.append(f"95 % interval ±{ci:.1f} % beyond the confirm target ±1 %")
    return "; ".join(reasons)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.floats(0, 60), st.sampled_from([1.0, 1.0000001])),
       st.one_of(st.floats(0, 1.5), st.sampled_from([0.05, 0.0500001])),
       st.sampled_from(["", BUSY_WARNING, "only 4 steady step(s) (< 10): raise max_steps"]))
def test_a_noisy_confirming_run_never_makes_a_confirmed_winner(ci, spread, warning):
    outcome = _outcome({"steady_step_time_ci_pct": ci, "steady_step_time_robust_cv": spread,
                        "measurement_warning": warning})
    noise = _expected_noise(ci, spread, warning)
    winner = outcome.winner
    assert winner.point.micro_batch == 8 and winner.noise == noise
    assert winner.state == ("noisy" if noise else "confirmed")
    assert winner.reason == (
        "its confirming run was not steady (see noise): it confirms nothing" if noise else "confirmed"
    )
    if noise:
        assert outcome.confidence == (f"unconfirmed: its confirming run was noisy ({noise}); run tune again on a "
                                      "quiet machine")
    else:
        assert outcome.confidence == "the only leader within the tolerance after screening"
    table = output.ranked_table(outcome, OPTIONS)
    first = table.iloc[0]
    assert (first["rank"], first["point"], first["state"]) == (1, winner.point.label, winner.state)
    assert (first["noise"], first["measurement_warning"], first["winner_confidence"]) == (
        noise, warning, outcome.confidence)
    assert set(table["winner_confidence"].iloc[1:]) == {""}


def test_the_busy_host_winner_of_issue_w_is_reported_unconfirmed_in_the_console_and_tune_csv(tmp_path):
    outcome = _outcome({"steady_step_time_ci_pct": 29.7, "steady_step_time_robust_cv": 0.75,
                        "measurement_warning": BUSY_WARNING})
    noise = f"measurement warning: {BUSY_WARNING}; 95 % interval ±29.7 % beyond the confirm target ±1 %"
    options = replace(OPTIONS, results_output_path=str(tmp_path / "out"))
    table = output.write(outcome, options, cpu=True)
    text = output.summary(outcome, table, options, cpu=True)
    label = outcome.winner.point.label
    assert f"winner: {label}: 8,000 tokens/s (unconfirmed: its confirming run was noisy ({noise}); run tune " \
        "again on a quiet machine)" in text
    assert f"! {label}: not steady: {noise}" in text
    header, first = text.splitlines()[:2]
    assert header.split()[:3] == ["rank", "point", "state"] and first.split()[:3] == ["1", label, "noisy"]
    csv = (tmp_path / "out" / output.TABLE).read_text().splitlines()
    columns = csv[0].split(",")
    assert {"noise", "measurement_warning", "winner_confidence"} <= set(columns)
    ranks = [line.split(",")[0] for line in csv[1:]]
    assert ranks == ["1", "2", "", ""]  # integers, not 1.0; points not run are unranked
    yaml_text = (tmp_path / "out" / output.WINNER).read_text()
    assert "unconfirmed: its confirming run was noisy" in yaml_text.splitlines()[0]


def test_ranks_are_integers_with_unranked_points_empty(tmp_path):
    outcome = _outcome({}, failure="RuntimeError: boom")  # micro-batch 4 fails its screening run
    table = output.ranked_table(outcome, OPTIONS)
    assert str(table["rank"].dtype) == "Int64"
    assert list(table["state"]) == ["confirmed", "failed", "not run", "not run"]
    assert table["rank"].iloc[0] == 1 and table["rank"].iloc[1:].isna().all()
    output.write(outcome, replace(OPTIONS, results_output_path=str(tmp_path)), cpu=True)
    assert [line.split(",")[0] for line in (tmp_path / output.TABLE).read_text().splitlines()[1:]] == ["1", "", "", ""]


# ---------------------------------------------------------------- a failed point's reason
_CRASH = """
import sys, time
from tqdm import tqdm
for step in tqdm(range(10), desc="Map", file=sys.stderr, mininterval=0, ascii=False):
    time.sleep(0.001)
    if step == 3:
        {end}
"""


def _real_error_messages(tmp_path: Path, end: str) -> str:
    """error_messages as the harness writes them for a process that printed tqdm bars, then ended thus."""
    from tunebench.execution.failures import classify

    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        proc = subprocess.run([sys.executable, "-c", _CRASH.format(end=end)], stderr=stderr, timeout=60)
    assert b"\r" in log.read_bytes() and "%|" in log.read_text()  # real tqdm output: bars redrawn in place
    # Read back as the harness reads an experiment's stderr.log (execution/experiment_run.py).
    status, messages = classify(proc.returncode, False, log.read_text(errors="replace"), tmp_path)
    assert status == "error"
    return messages


def test_a_failed_points_reason_is_the_error_class_and_message_without_progress_bars(tmp_path):
    raised = _real_error_messages(tmp_path, 'raise RuntimeError("\\x1b[31mdata loader broke\\x1b[0m at step 3")')
    outcome = _outcome({}, failure=raised)
    failed = next(s for s in outcome.states if s.state == "failed")
    assert failed.reason == "screen run: error (RuntimeError: data loader broke at step 3)"

    killed = _real_error_messages(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert "%|" in killed  # the harness keeps the log's tail: the bars
    failed = next(s for s in _outcome({}, failure=killed).states if s.state == "failed")
    assert failed.reason == "screen run: error (killed by signal SIGKILL (a host OOM kill shows as SIGKILL))"


def test_one_line_of_an_error_text():
    from tunebench.tuning.failure_text import one_line

    bars = "Map:  40%|████      | 4/10 [00:01<00:02, 3.1it/s]\rMap:  50%|█████     | 5/10 [00:01<00:01"
    assert one_line(f"{bars}\nTraceback (most recent call last):\n  File x\nValueError: bad\n") == "ValueError: bad"
    assert one_line(f"{bars}\r\x1b[1mtorch.OutOfMemoryError: CUDA out of memory\x1b[0m") == \
        "torch.OutOfMemoryError: CUDA out of memory"
    assert one_line(bars) == "" and one_line(None) == "" and one_line("") == ""
    assert one_line("x" * 500) == "x" * 199 + "…"


# ---------------------------------------------------------------- the winner's "Run it" line
def _run_line(outcome, options, cwd: Path, monkeypatch) -> list[str]:
    monkeypatch.chdir(cwd)
    text = output.winner_scenarios(outcome, options, cpu=True)
    prefix = "# Run it (from the folder tune ran in): "
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return shlex.split(line.removeprefix(prefix))


def test_the_run_it_line_resolves_from_where_tune_ran(tmp_path, monkeypatch):
    outcome = _outcome({})
    here = tmp_path / "work"
    (here / "runs").mkdir(parents=True)
    options = replace(OPTIONS, results_output_path="runs/tuned", device="cpu")
    output.write(outcome, replace(options, results_output_path=str(here / "runs/tuned")), cpu=True)
    argv = _run_line(outcome, options, here, monkeypatch)
    # Resolved from `here`, as the user's shell would: benchmark.py and the winner's file both exist.
    assert (here / argv[1]).resolve() == REPO / "benchmark.py"
    scenarios = argv[argv.index("--scenarios_config_path") + 1]
    assert scenarios == "runs/tuned/tune-scenarios.yaml" and (here / scenarios).is_file()
    assert argv[argv.index("--device") + 1] == "cpu"
    # Elsewhere: a folder outside the current directory is given absolute.
    outside = replace(options, results_output_path=str(tmp_path / "elsewhere"))
    argv = _run_line(outcome, outside, here, monkeypatch)
    assert argv[argv.index("--scenarios_config_path") + 1] == str(tmp_path / "elsewhere" / "tune-scenarios.yaml")


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_the_run_it_line_runs_from_where_tune_ran(tmp_path, monkeypatch):
    """The printed command itself (python → this interpreter), as a dry run, from the directory tune ran in."""
    outcome = _outcome({})
    here = tmp_path / "work"
    here.mkdir()
    options = replace(OPTIONS, results_output_path="tuned", device="cpu")
    output.write(outcome, replace(options, results_output_path=str(here / "tuned")), cpu=True)
    argv = _run_line(outcome, options, here, monkeypatch)
    proc = subprocess.run([sys.executable, *argv[1:], "--dry_run", "--results_output_path", "again"], cwd=here,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list((here / "again").glob("tuned-*/command.sh"))) == 1


def test_a_cpu_points_memory_reads_as_itself_and_the_empty_measured_peak_says_why(tmp_path):
    """Issue W2: tune printed "peak 0.00 GiB" for every CPU point and `mem_peak_gib` showed None unexplained."""
    from tunebench.planning.predict import memory_text

    assert [memory_text(b) for b in (1_636_068, 3 * 2**30 + 2**29, 2048)] == ["1.6 MiB", "3.50 GiB", "2.0 KiB"]
    assert output._gib(1_636_068) == 0.001524 and output._gib(None) is None
    fits, why = prune.verdict({"pred_mem_peak": 1_636_068, "pred_mem_reserved": 1_636_068,
                               "pred_fit_margin_bytes": 2**30}, prune.Margin(0.02, "test"))
    assert fits and why.startswith("fits: 1.6 MiB predicted (+2.0%) of 1.00 GiB usable")
    outcome = _outcome({})
    options = replace(OPTIONS, results_output_path=str(tmp_path / "out"))
    text = output.summary(outcome, output.write(outcome, options, cpu=True), options, cpu=True)
    assert "mem_peak_gib: the CUDA allocator's measured peak, which a CPU run has none of" in text
    assert "mem_peak_gib: the CUDA" not in output.summary(outcome, output.ranked_table(outcome, options), options)
