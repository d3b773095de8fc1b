"""--repeats N (issue P): every experiment N times, interleaved, each run a row and a folder; the olympic mean and
spread over the runs; compare takes the runs as samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench.results.repeats import olympic_mean, repeat_columns


def test_the_olympic_mean_drops_the_fastest_and_the_slowest_run():
    assert olympic_mean([10.0, 1.0, 2.0, 3.0]) == 2.5 and olympic_mean([1.0, 3.0]) == 2.0
    frame = pd.DataFrame({"experiment_id": ["a"] * 3 + ["b"], "repeat": [1, 2, 3, 1], "status": ["ok"] * 4,
                          "steady_nonpad_tokens_per_second": [100.0, 90.0, 130.0, 50.0]})
    out = repeat_columns(frame)
    a = out[out.experiment_id == "a"]
    assert (a["repeats"] == 3).all() and (a["steady_nonpad_tokens_per_second_olympic"] == 100.0).all()
    assert a["steady_nonpad_tokens_per_second_spread_pct"].iloc[0] == pytest.approx(40.0)
    assert pd.isna(out.loc[out.experiment_id == "b", "steady_nonpad_tokens_per_second_olympic"]).all()


@pytest.mark.slow
def test_repeats_run_interleaved_and_compare_uses_every_run(tmp_path):
    scenarios = [tiny_scenario(name, max_steps=8, steady_warmup_steps=2, steady_min_steps=2,
                               synthetic_length_distribution="fixed") for name in ("one", "two")]
    options = write_inputs(tmp_path, scenarios)
    out = tmp_path / "results"
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out),
                           "--memory_logging", "none", "--repeats", "3"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv")
    assert len(frame) == 6 and (frame["status"] == "ok").all()
    by_start = frame.sort_values("experiment_start_unix")
    assert list(zip(by_start["scenario"], by_start["repeat"], strict=True)) == [
        ("one", 1), ("two", 1), ("one", 2), ("two", 2), ("one", 3), ("two", 3)]  # interleaved
    assert sorted(p.name.rsplit("_", 1)[1][12:] for p in out.glob("one_*")) == ["", "-r2", "-r3"]
    assert (frame["repeats"] == 3).all() and frame["steady_nonpad_tokens_per_second_olympic"].notna().all()
    # A results folder of repeats is a reference whose experiments carry three runs each.
    ref = tmp_path / "ref.csv"
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), "compare", "--write_reference", str(ref),
                           "--results", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sidecar = json.loads(ref.with_name("ref.samples.json").read_text())
    assert sorted(len(entry["runs"]) for entry in sidecar["experiments"].values()) == [3, 3]
    # the same folder against itself: nothing to flag
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), "compare", "--reference", str(ref),
                           "--results", str(out), "--no_charts"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
