"""The report fits its page (issue Q): no chart text outside its PNG, and in real headless Chromium no element
wider than the viewport (scripts/report_screenshot.py measures it; skipped where Chromium is not installed).

Reached through the modules it calls (the charts' text layout): tunebench/results/charts/layout.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.text import Text
from PIL import Image

from tests.fixtures.harness import REPO
from tests.fixtures.report import failed_row, run_row
from tunebench.results.charts import figures as charts
from tunebench.results.report import page as report

SCRIPT = REPO / "scripts" / "report_screenshot.py"
LONG_ERROR = "RuntimeError: " + "/".join(["a-very-long-path-segment-without-spaces"] * 12)


def _script():
    spec = importlib.util.spec_from_file_location("report_screenshot", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def crowded_rows() -> list[dict]:
    """A 16-row matrix like the newcomer's: long scenario and framework names, CPU rows, every row warned, a
    failure with an error line that has no space to break at."""
    rows = []
    for scenario in ("full-finetuning-with-a-long-scenario-name", "standard-peft-with-a-long-scenario-name"):
        for framework in ("none", "gradient-checkpointing-and-more"):
            for gpus in (1, 2):
                for bs in (4, 8):
                    rows.append(run_row(gpus, bs, scenario=scenario, framework_config=framework, device_type="cpu",
                                        measurement_warning=f"step time CV {10 + gpus * bs:.1f} % exceeds 5 %: the "
                                                            "steady window is not steady",
                                        pred_error_grads=-1.0, pred_mem_grads=0.0))
    rows.append(failed_row(64, "error", LONG_ERROR))
    return rows


def clipped_texts(fig) -> list[str]:
    """Where what the figure draws reaches outside it (so outside the PNG): its tight box (every drawn artist:
    titles, tick labels in view, legends, colorbar labels) against the figure. Drawn again at the figure's own
    dpi first, so positions and figure size agree. Empty when everything is inside."""
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    width, height = fig.get_size_inches()
    tolerance = 0.01  # inches: a pixel of antialiasing
    out = [f"{side} at {value:.2f} in" for side, value, bad in (
        ("left edge", box.x0, box.x0 < -tolerance), ("bottom edge", box.y0, box.y0 < -tolerance),
        ("right edge", box.x1, box.x1 > width + tolerance), ("top edge", box.y1, box.y1 > height + tolerance)) if bad]
    if out:
        texts = [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
        out.append(f"of a {width:.2f} x {height:.2f} in figure with texts {texts}")
    return out


@pytest.fixture
def figures(monkeypatch) -> list:
    """Every figure the charts module turns into a PNG, kept after its final (constrained) layout."""
    drawn = []
    real = charts.to_png

    def keep(fig):
        png = real(fig)
        drawn.append(fig)
        return png

    monkeypatch.setattr(charts, "to_png", keep)
    return drawn


def test_no_chart_text_leaves_its_png_in_a_crowded_report(figures):
    report.build_report(pd.DataFrame(crowded_rows()), "crowded.csv")
    assert len(figures) == 6  # memory, step time, start-up, scaling, memory vs batch, predicted vs measured
    for fig in figures:
        assert clipped_texts(fig) == []


def test_the_clipping_check_finds_a_legend_too_wide_for_its_figure(figures):
    """The check above can fail: the three-column legend the scaling chart used to draw runs past the edges."""
    report.build_report(pd.DataFrame(crowded_rows()), "crowded.csv")
    scaling = next(f for f in figures if any(ax.get_xlabel() == "num_gpus" for ax in f.axes))
    legend = scaling.legends[0]
    handles, names = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
    legend.remove()
    scaling.legend(handles, names, loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    charts.FigureCanvasAgg(scaling).draw()
    assert any("gradient-checkpointing-and-more" in problem for problem in clipped_texts(scaling))


def test_long_titles_are_wrapped_inside_the_figure(figures):
    comparison = pd.DataFrame({"label": ["a", "a", "b", "b"], "metric": ["train_loss", "mfu"] * 2,
                               "delta_pct": [1.0, -2.0, 0.0, 30.0], "direction": ["higher_is_worse"] * 4,
                               "verdict": ["ok", "ok", "ok", "regression"]})
    charts.delta_heatmap(comparison)  # two metrics: a narrow figure under a long title
    charts.stacked_barh(["x"], {"part": [1.0]}, "GiB", "A title far longer than this narrow chart could ever " * 3)
    assert len(figures) == 2
    for fig in figures:
        assert clipped_texts(fig) == []


def test_the_screenshot_script_fails_clearly_without_chromium(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TUNEBENCH_CHROMIUM"} | {"PATH": str(empty)}
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--out", str(tmp_path / "x.png")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2
    assert "no Chromium found on PATH" in done.stderr and "apt-get install -y chromium" in done.stderr
    assert not (tmp_path / "x.png").exists()


# ------------------------------------------------------------------------------------------ real Chromium
def _chromium_or_skip() -> str:
    try:
        return _script().find_chromium()
    except RuntimeError as exc:
        pytest.skip(f"chromium is not installed, the report's layout in a real browser is not checked: {exc}")


@pytest.mark.slow
def test_crowded_report_fits_the_viewport_in_chromium_and_the_screenshot_is_full_page(tmp_path):
    """Measured in Chromium, not guessed: the page's scrollWidth and every element's right edge against the
    viewport, at the screenshot's width and at a narrow laptop width."""
    _chromium_or_skip()
    script = _script()
    csv = tmp_path / "crowded.csv"
    pd.DataFrame(crowded_rows()).to_csv(csv, index=False)
    png, page = tmp_path / "shot.png", tmp_path / "page.html"
    done = subprocess.run([sys.executable, str(SCRIPT), str(csv), "--out", str(png), "--html", str(page)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    layout = script.measure(page, 1400)
    assert layout["scrollWidth"] <= layout["clientWidth"] == 1400 and layout["overflowing"] == []
    with Image.open(png) as shot:
        assert shot.size == (1400, layout["height"]) and shot.height > 3000  # the whole page, not one screen
    narrow = script.measure(page, 1000)
    assert script.overflow_problems(narrow) == [], narrow


@pytest.mark.slow
def test_the_chromium_check_reports_an_element_wider_than_the_page(tmp_path):
    _chromium_or_skip()
    script = _script()
    page = tmp_path / "wide.html"
    report.write_report(_csv(tmp_path), page)
    text = page.read_text()
    page.write_text(text.replace("<h2>Failures</h2>", '<h2>Failures</h2><table class="too-wide"><tr><td '
                                 f'style="white-space:nowrap">{"x" * 600}</td></tr></table>'))
    layout = script.measure(page, 1400)
    problems = script.overflow_problems(layout)
    assert layout["scrollWidth"] > 1400
    assert any(p.startswith("table.too-wide ") for p in problems), problems


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    pd.DataFrame([run_row(1, 4), run_row(2, 4, measurement_warning="x"), run_row(1, 8, mfu=np.nan)]).to_csv(
        path, index=False)
    return path
