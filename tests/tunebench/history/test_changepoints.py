"""Change points on generated series (issue V's synthetic acceptance): a step of ±3-20 % is found at its run, flat
series (with noise, an isolated outlier, a slow drift) give none, at the false-alarm rate stated in
docs/evidence/changepoint-libraries.md; and bisect's search and package installs."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("ruptures")

from tunebench.errors import InputError  # noqa: E402
from tunebench.history.bisect.candidates import install_version  # noqa: E402
from tunebench.history.bisect.search import first_bad  # noqa: E402
from tunebench.history.changepoints import change_points, regimes  # noqa: E402


@st.composite
def series(draw, with_step: bool):
    """(values, the first run of the new level or None) where the answer is certain: 12-40 runs, Gaussian run-to-run
    noise of 0.2-0.5 % (at most an eighth of the step), a step of ±3-20 % with at least 4 runs on each side, maybe
    one outlier run of ±5-12 % (3 runs or more from the step and the ends), maybe a drift of up to ±0.5 %. Closer
    to the edge the rates are measured instead (below, and docs/evidence/changepoint-libraries.md)."""
    n = draw(st.integers(12, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    level = np.ones(n)
    at, noise = None, draw(st.floats(0.002, 0.005))
    if with_step:
        at = draw(st.integers(4, n - 4))
        size = draw(st.floats(0.03, 0.20))
        noise = min(noise, size / 8)
        level[at:] *= 1 + size * draw(st.sampled_from([-1, 1]))
    if draw(st.booleans()):
        level *= 1 + draw(st.floats(-0.005, 0.005)) * np.linspace(0, 1, n)
    values = level * (1 + noise * rng.standard_normal(n))
    if draw(st.booleans()):
        spot = draw(st.integers(3, n - 4))
        if at is None or abs(spot - at) > 2:
            values[spot] *= 1 + draw(st.floats(0.05, 0.12)) * draw(st.sampled_from([-1, 1]))
    return values, at


@settings(max_examples=300, deadline=None, derandomize=True)
@given(series(with_step=True))
def test_a_step_is_found_at_its_run_and_nowhere_else(case):
    values, at = case
    assert change_points(values) == [at]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(series(with_step=False))
def test_flat_series_with_noise_outliers_and_drift_have_no_change_point(case):
    values, _ = case
    assert change_points(values) == []


def _broad(rng: np.random.Generator, with_step: bool) -> tuple[np.ndarray, int | None]:
    """The evidence's wider draw: noise 0.2-0.75 %, steps of ±3-20 % with 3 runs or more a side, drifts of ±1 %."""
    n = int(rng.choice([12, 20, 30, 40]))
    level, at = np.ones(n), None
    if with_step:
        at = int(rng.integers(3, n - 2))
        level[at:] *= 1 + rng.choice([-1, 1]) * rng.uniform(0.03, 0.20)
    level *= 1 + rng.uniform(-0.01, 0.01) * np.linspace(0, 1, n)
    return level * (1 + rng.uniform(0.002, 0.0075) * rng.standard_normal(n)), at


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_the_stated_rates_hold_on_1000_seeded_series_of_the_wider_draw():
    """docs/evidence/changepoint-libraries.md: 99.5 % of steps found at their run, 0 of 400 flat series alarmed (a
    drift in 30 % of them). Here every series drifts by up to ±1 %: 497 of 500 steps found, 4 of 500 flat series
    alarmed (0.8 %, each a drift the 1 % merge did not absorb). Held at 98 % and 1 %."""
    rng = np.random.default_rng(7)
    found = sum(change_points(v) == [at] for v, at in (_broad(rng, True) for _ in range(500)))
    alarms = sum(bool(change_points(v)) for v, _ in (_broad(rng, False) for _ in range(500)))
    assert found >= 490 and alarms <= 5, (found, alarms)


def test_short_and_broken_series():
    assert change_points([1.0, 1.1, 1.2]) == []  # fewer than two regimes of two runs
    assert change_points([1.0, 1.0, float("nan"), 1.3, 1.3]) == []
    assert change_points([1, 1, 1, 1.2, 1.2, 1.2]) == [3]
    assert regimes(6, [3]) == [(0, 3), (3, 6)]


def test_first_bad_probes_log2_of_the_candidates():
    candidates = [f"c{i}" for i in range(17)]
    for first in range(1, 17):
        found, probed = first_bad(candidates, lambda i, first=first: i >= first)
        assert found == first and len(probed) <= 4


def _wheel(folder: Path, version: str) -> Path:
    """A minimal pure-Python wheel of `slowlib` whose module says its version."""
    path = folder / f"slowlib-{version}-py3-none-any.whl"
    info = f"slowlib-{version}.dist-info"
    files = {"slowlib.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: slowlib\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def test_a_package_version_is_installed_alone_in_a_folder_of_its_own(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "1.1"):
        _wheel(wheels, version)
    target = install_version("slowlib", "1.1", tmp_path / "v11", ["--no-index", "--find-links", str(wheels)])
    out = subprocess.run([sys.executable, "-c", "import slowlib; print(slowlib.VERSION)"], capture_output=True,
                         text=True, env={"PYTHONPATH": str(target)}).stdout
    assert out.strip() == "1.1"
    with pytest.raises(InputError, match="pip could not install slowlib==2.0"):
        install_version("slowlib", "2.0", tmp_path / "v20", ["--no-index", "--find-links", str(wheels)])


def test_bisect_input_errors_are_exit_2(tmp_path, capsys):
    from tunebench.cli.bisect import main

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert main(["--repo", str(repo), "--good", "nope", "--bad", "HEAD", "--store", str(tmp_path / "h.duckdb"),
                 "--", "--device", "cpu"]) == 2
    assert "--good: 'nope' is not a commit of" in capsys.readouterr().err
    assert main(["--package", "x", "--good", "1", "--bad", "3", "--versions", "1", "2", "--", "--device", "cpu"]) == 2
    assert "--versions: must list the versions in order" in capsys.readouterr().err
    assert main(["--package", "x", "--good", "1", "--bad", "2", "--versions", "1", "2"]) == 2
    assert "no benchmark.py arguments after `--`" in capsys.readouterr().err
    assert not (tmp_path / "h.duckdb").exists()
