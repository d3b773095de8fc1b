"""Acceptance E2: a fresh CPU run of the main job compared end to end with the committed CPU reference.

Only machine-independent metrics are compared with the committed reference: exact storage sizes, token
counts and the loss (fixed seeds, fixed shapes). Throughput, wall times and host RSS depend on the machine
CI happens to get (a 2-core runner against the machine the reference was made on), so they are not judged
here; the planted-regression test proves the comparison still fails when a judged metric moves.
"""

import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.fixtures.harness import REPO

pytestmark = pytest.mark.slow

DETERMINISTIC = ["scan_mem_params", "scan_mem_buffers", "scan_mem_grads", "scan_mem_optimizer",
                 "scan_mem_activations", "scan_mem_activations_max", "train_tokens", "train_nonpad_tokens",
                 "scan_tokens", "scan_nonpad_tokens", "trainable_parameters", "total_parameters", "train_loss"]
# Token counts and parameter counts are informational in compare's defaults; here they are the contract.
STRICT = ["--direction", "*tokens=two_sided", "--direction", "*_parameters=two_sided", "--threshold", "*tokens=0",
          "--threshold", "*_parameters=0"]


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu-run")
    env = {**os.environ, "TUNEBENCH_CACHE": str(out / "cache")}
    proc = subprocess.run([sys.executable, "benchmark.py", "--results_output_path", str(out / "results")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    return out, proc


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "benchmark.py", "compare", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_fresh_cpu_run_matches_reference(fresh_run, tmp_path):
    out, proc = fresh_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    frame = pd.read_csv(out / "results" / "raw_summary.csv")
    assert (frame["status"] == "ok").sum() == 4
    result = compare("--reference", str(REPO / "refs/cpu.csv"), "--results", str(out / "results"),
                     "--out", str(tmp_path / "c"), "--metrics", *DETERMINISTIC, *STRICT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    comparison = pd.read_csv(tmp_path / "c" / "comparison.csv")
    assert set(comparison["metric"]) == set(DETERMINISTIC) and len(comparison) == 4 * len(DETERMINISTIC)
    assert set(comparison["verdict"]) <= {"within_threshold"}


def test_planted_regression_against_reference_fails(fresh_run, tmp_path):
    out, _ = fresh_run
    reference = pd.read_csv(REPO / "refs/cpu.csv")
    reference["scan_mem_activations"] = reference["scan_mem_activations"] * 0.5  # new run now uses 2× memory
    planted = tmp_path / "planted.csv"
    reference.to_csv(planted, index=False)
    proc = compare("--reference", str(planted), "--results", str(out / "results"), "--out", str(tmp_path / "c"),
                   "--metrics", *DETERMINISTIC, *STRICT)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    outliers = pd.read_csv(tmp_path / "c" / "outliers.csv")
    assert set(outliers.loc[outliers["kind"] == "regression", "metric"]) == {"scan_mem_activations"}
