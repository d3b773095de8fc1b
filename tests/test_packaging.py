"""The wheel the repository builds holds every file the package reads at run time (planning's CSVs were once left
out: a wheel install then failed where a checkout worked), and installed into a fresh venv it plans the CPU scenario
set from a folder outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.harness import REPO

# What the build reads: the packages, and the default input files setup.py puts in the wheel (tunebench/inputs/).
SOURCES = ("tunebench", "scanner", "pyproject.toml", "setup.py", "defaults.yaml", "framework_configs.yaml",
           "accelerate.yaml", "scenarios.yaml", "scenarios-cpu.yaml")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built once from a copy of the sources (a build writes build/ and *.egg-info beside them)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(REPO / name, source)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(work), str(source)], capture_output=True, text=True, timeout=600)
    if done.returncode and "No module named 'setuptools'" in done.stderr:
        pytest.skip("setuptools is not installed in this environment")
    assert done.returncode == 0, done.stderr[-2000:]
    [built] = work.glob("tunebench-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_every_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = sorted(str(p.relative_to(REPO)) for folder in ("tunebench", "scanner") for p in (REPO / folder).rglob("*")
                  if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts)
    assert data and [name for name in data if name not in names] == []
    assert {f"tunebench/inputs/{name}" for name in SOURCES if name.endswith(".yaml")} <= names


def _fresh_venv(folder: Path) -> Path:
    """A venv of its own whose other packages (torch, transformers, ...) are this environment's, the checkout not
    among them: a .pth names this interpreter's site-packages folders (their own .pth files, an editable install's
    among them, are not read). Those may lie inside the checkout (tox's .tox/test in CI): the venv's own
    site-packages comes first on sys.path, so its tunebench is the one imported (asserted below)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=300)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    parents = [p for p in dict.fromkeys(sys.path) if p.rstrip("/").endswith(("site-packages", "dist-packages"))
               and Path(p).is_dir()]
    Path(purelib, "environment.pth").write_text("".join(f"{p}\n" for p in parents))
    return python


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_plans_the_cpu_scenario_set(wheel, tmp_path):
    """Issue AC's acceptance: `pip install .` into a fresh venv runs `plan` on the CPU scenario set, from a folder
    outside the checkout (every file the package reads ships: its CSVs, YAMLs and default inputs)."""
    python = _fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(python), "-c", "import tunebench; print(tunebench.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(tmp_path / "venv"), where.stdout + where.stderr
    done = subprocess.run([str(tmp_path / "venv" / "bin" / "tunebench"), "plan", "--device", "cpu",
                           "--results_output_path", "out"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "tunebench/inputs/scenarios-cpu.yaml" in done.stderr  # the shipped CPU set, not the checkout's
    plan = pd.read_csv(work / "out" / "plan.csv")
    cpu_set = (REPO / "scenarios-cpu.yaml").read_text()
    assert len(plan) > 0 and all(name in cpu_set for name in set(plan["scenario"]))
    assert plan["pred_mem_peak"].gt(0).all()
