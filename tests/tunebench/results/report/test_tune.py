"""The report of a tune folder: it names the winner and its confidence, and the Pareto labels stay in their axes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from tests.fixtures.report import run_row
from tunebench.results.charts.pareto import THROUGHPUT, front_key, pareto_figure
from tunebench.results.report import page as report
from tunebench.tuning import output, prune
from tunebench.tuning.options import TuneOptions
from tunebench.tuning.search import CONFIRM, Search
from tunebench.tuning.space import build_space

GIB = 1024**3
OPTIONS = TuneOptions(model="preset:llama-tiny", effective_batch=8, max_seq_len=128, optimizers=("adamw_torch_fused",),
                      peft="lora", gradient_checkpointing=(False,))


def _runs(confirm: dict):
    def run(stage, points):
        return [{"status": "ok", "experiment_wall_seconds": 10.0, "num_gpus": 1, "measurement_warning": "",
                 "steady_nonpad_tokens_per_second": 1000.0 * p.micro_batch, "steady_step_time_ci_pct": 0.5,
                 "steady_step_time_robust_cv": 0.01, "experiment_id": f"{stage}-{p.label}",
                 **(confirm if stage == CONFIRM else {})} for p in points]
    return run


def _tune_folder(tmp_path, confirm: dict):
    options = replace(OPTIONS, results_output_path=str(tmp_path))
    outcome = Search(build_space(options, cpu=True), {}, options, "cpu", prune.Margin(0.02, "test")).run(_runs(confirm))
    output.write(outcome, options, cpu=True)
    rows = [run_row(1, bs, steady_nonpad_tokens_per_second=1000.0 * bs, mem_peak_torch_max_allocated_bytes=bs * GIB)
            for bs in (1, 2, 4, 8)]
    return outcome, report.build_report(pd.DataFrame(rows), str(tmp_path / "raw_summary.csv"))


def test_the_report_of_a_tune_folder_names_the_winner_and_its_confidence(tmp_path):
    outcome, page = _tune_folder(tmp_path, {})
    label = outcome.winner.point.label
    assert (f"<b>Winner of the tune search</b>: <code>{label}</code> (confirmed): 8,000 tokens/s. "
            "the only leader within the tolerance after screening.") in page
    assert page.index("Winner of the tune search") < page.index("<h2>Experiments</h2>")


def test_a_noisy_winner_is_flagged_in_the_report(tmp_path):
    outcome, page = _tune_folder(tmp_path, {"steady_step_time_ci_pct": 29.7})
    assert outcome.winner.state == "noisy"
    assert '<p class="warn-summary"><span class="warn-mark"' in page
    assert ("(noisy): 8,000 tokens/s. unconfirmed: its confirming run was noisy (95 % interval ±29.7 % beyond the "
            "confirm target ±1 %); run tune again on a quiet machine.") in page


def test_no_tune_section_without_tune_csv(tmp_path):
    page = report.build_report(pd.DataFrame([run_row(1, 4)]), str(tmp_path / "raw_summary.csv"))
    assert "Winner of the tune search" not in page and "<h2>Tune</h2>" not in page


# ---------------------------------------------------------------- Pareto labels inside the axes
def _front_at_the_edges() -> tuple[pd.DataFrame, pd.Series]:
    """Every point on the front, two of them at the corners where a label to the upper right leaves the axes;
    labels as long as the chart allows."""
    cost = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    ok = pd.DataFrame({THROUGHPUT: 1000.0 * np.sqrt(cost), "mem_peak_torch_max_allocated_bytes": cost * GIB,
                       "steady_energy_joules_per_nonpad_token": 0.1 * cost})
    labels = pd.Series([f"tune-confirm-lora16-gc-mb{int(c)}x1-pack-adamwfused-compile" for c in cost], index=ok.index)
    return ok, labels


def labels_outside(fig) -> list[str]:
    """The point labels whose drawn box leaves their axes (at the figure's final layout)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for axis in fig.axes:
        box = axis.get_window_extent(renderer)
        for note in axis.texts:
            e = note.get_window_extent(renderer)
            if note.get_visible() and (e.x0 < box.x0 - 0.5 or e.x1 > box.x1 + 0.5 or e.y0 < box.y0 - 0.5
                                       or e.y1 > box.y1 + 0.5):
                out.append(note.get_text())
    return out


def test_pareto_labels_stay_inside_their_axes():
    """Issue AD: tune's labels (`tune-confirm-lora16-gc-mb32x1-...`) were cut to fit the axes. Each front point is
    numbered on the chart, whole, and the page lists every number's label in full."""
    ok, labels = _front_at_the_edges()
    fig = pareto_figure(ok, labels)
    notes = [n for axis in fig.axes for n in axis.texts]
    assert len(notes) == 12 and all(n.get_visible() for n in notes)  # both panels, every front point labelled
    assert sorted({n.get_text() for n in notes}) == ["1", "2", "3", "4", "5", "6"]  # numbers, never shortened
    assert labels_outside(fig) == []
    assert front_key(ok, labels) == [(k, labels[i]) for k, i in enumerate(reversed(ok.index), start=1)]
    ok["_label"], ok["_status"] = labels, "ok"
    page = report._pareto_section(ok)
    assert f"<b>1</b> {labels[ok.index[-1]]}; <b>2</b> {labels[ok.index[-2]]}" in page


def test_the_label_check_finds_a_label_past_the_axes():
    """The check above can fail: labelled in full to the upper right as before, the top-right point's label
    leaves."""
    ok, labels = _front_at_the_edges()
    fig = pareto_figure(ok, labels)
    full = dict((str(k), label) for k, label in front_key(ok, labels))
    for axis in fig.axes:
        for note in axis.texts:
            note.set_text(full[note.get_text()])
            note.set_position((4, 4))
            note.set_horizontalalignment("left")
            note.set_verticalalignment("bottom")
    assert labels[ok.index[-1]] in labels_outside(fig)  # the fastest, top right
