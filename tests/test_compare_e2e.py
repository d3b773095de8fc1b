"""Acceptance E2: a fresh CPU run of the main job compared end to end with the committed CPU reference."""

import os
import subprocess
import sys

import pandas as pd
import pytest
from harness_fixtures import REPO

pytestmark = pytest.mark.slow

# CPU throughput and wall times on shared CI machines swing several-fold between runs, so they get wide bands
# here; memory sizes, token counts and loss are deterministic and keep their default thresholds.
NOISY = ["--threshold", "throughput=95", "--threshold", "time=2000", "--threshold", "mem_peak_host_rss_bytes=50"]


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu-run")
    env = {**os.environ, "TUNEBENCH_CACHE": str(out / "cache")}
    proc = subprocess.run([sys.executable, "benchmark.py", "--results_output_path", str(out / "results"),
                           "--compare_with", str(REPO / "refs/cpu.csv"), "--compare_threshold", *NOISY[1::2]],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    return out, proc


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "benchmark.py", "compare", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_fresh_cpu_run_matches_reference(fresh_run):
    out, proc = fresh_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "results" / "compare" / "summary.md").read_text()
    assert "regression" in summary.lower()
    frame = pd.read_csv(out / "results" / "raw_summary.csv")
    assert (frame["status"] == "ok").sum() >= 4


def test_planted_regression_against_reference_fails(fresh_run, tmp_path):
    out, _ = fresh_run
    reference = pd.read_csv(REPO / "refs/cpu.csv")
    reference["scan_mem_activations"] = reference["scan_mem_activations"] * 0.5  # new run now uses 2× memory
    planted = tmp_path / "planted.csv"
    reference.to_csv(planted, index=False)
    proc = compare("--reference", str(planted), "--results", str(out / "results"), "--out", str(tmp_path / "c"), *NOISY)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    outliers = pd.read_csv(tmp_path / "c" / "outliers.csv")
    assert set(outliers.loc[outliers["kind"] == "regression", "metric"]) == {"scan_mem_activations"}
