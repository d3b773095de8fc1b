"""Plugins are real: another package, installed with pip, adds a tracker and a launcher through entry points; a run
that names them uses both (the tracker's columns in the CSV, declared; the launcher's mark in the folder) and the
tracker's own option appears on benchmark.py's command line. Registries that are read: the built-ins by name.

Reached through the modules it calls (the plugins' own command-line options): tunebench/cli/plugin_options.py."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench.errors import InputError
from tunebench.execution.executors import EXECUTORS, executor_class, make_executor
from tunebench.execution.launchers import LAUNCHERS
from tunebench.plugins import Registry, UnknownPlugin
from tunebench.telemetry.trackers import TRACKERS

PACKAGE = REPO / "tests" / "data" / "plugin_package"


def test_the_builtin_plugins_are_found_by_name():
    assert EXECUTORS.names()[:3] == ["local", "ray", "slurm"]
    assert LAUNCHERS.names()[:4] == ["python", "forkserver", "torchrun", "accelerate"]
    assert TRACKERS.names()[:2] == ["host_load", "nvidia"]
    assert executor_class("local").name == "local" and LAUNCHERS.load("torchrun").name == "torchrun"
    with pytest.raises(InputError) as raised:
        make_executor("lokal")
    assert raised.value.problems[0].key == "--executor" and "local, ray, slurm" in raised.value.problems[0].fix


def test_a_plugin_cannot_replace_a_builtin_and_an_unknown_name_lists_the_known(monkeypatch):
    registry = Registry("tracker", "tunebench.test-no-such-group", {"host_load": "tunebench.telemetry.host_load:X"})
    with pytest.raises(UnknownPlugin, match="the trackers are: host_load"):
        registry.load("nope")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The demo plugin package installed by pip into its own folder (put on PYTHONPATH by each test)."""
    target, source = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("source") / "package"
    shutil.copytree(PACKAGE, source)  # setuptools builds in the source tree: never in the repository's
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation, "--target",
                           str(target), str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert any(p.name.startswith("tunebench_demo_plugin") and p.suffix == ".dist-info" for p in target.iterdir())
    return target


def _env(site) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_an_installed_plugins_option_is_on_the_command_line(installed):
    done = subprocess.run([sys.executable, "benchmark.py", "--help"], capture_output=True, text=True, cwd=REPO,
                          env=_env(installed), timeout=120)
    assert done.returncode == 0 and "--wall_clock_scale" in done.stdout and "marked_python" in done.stdout


@pytest.mark.slow
def test_a_run_uses_the_installed_tracker_and_launcher(installed, tmp_path):
    options = write_inputs(tmp_path, [tiny_scenario("plugged")])
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "benchmark.py", *options, "--results_output_path", str(out),
                           "--trackers", "wall_clock", "--wall_clock_scale", "2", "--launcher", "marked_python"],
                          capture_output=True, text=True, cwd=REPO, env=_env(installed), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    row = pd.read_csv(out / "raw_summary.csv").iloc[0]
    assert row["status"] == "ok" and row["demo_tracker_name"] == "wall_clock"
    # The tracker wrapped the whole experiment: its seconds (× 2) are at least the launch-to-end wall time (which
    # the row rounds to the millisecond).
    assert (
        2 * (row["experiment_wall_seconds"] - 0.001)
        <= row["demo_wall_seconds"]
        < 2 * row["experiment_wall_seconds"] + 5
    )
    marks = list(out.glob("*/launched-by-marked-python"))
    assert len(marks) == 1 and "tunebench.experiment.train" in marks[0].read_text()
    # The tracker's columns are declared (its COLUMNS): a metric in the benchmarks view, not a configuration.
    check = subprocess.run([sys.executable, "-c", "from tunebench.results.columns import lookup as columns; "
                            "print(columns.kind_of('demo_wall_seconds'), columns.metric_family('demo_wall_seconds'))"],
                           capture_output=True, text=True, cwd=REPO, env=_env(installed), timeout=120)
    assert check.stdout.split() == ["metric", "startup"], check.stderr[-2000:]
