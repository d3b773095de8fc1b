"""Executors end to end on CPU process slots (issue G): concurrent == sequential rows, no oversubscription,
failures and timeouts recorded, Ctrl-C/SIGTERM/SIGHUP without orphans, resume of an interrupted run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.harness import REPO, TINY_DEFAULTS, tiny_scenario, write_inputs
from tunebench.execution.executors.local import LocalSettings
from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.runner import run_matrix
from tunebench.experiment.spec import BASELINE, FrameworkConfig
from tunebench.matrix.expansion import Matrices, expand
from tunebench.matrix.inputs import Scenario
from tunebench.matrix.validation import typed

pytestmark = pytest.mark.slow

FCS = {BASELINE: FrameworkConfig(BASELINE), "ddp": FrameworkConfig("ddp", {"ddp_find_unused_parameters": False},
                                                                    min_gpus=2)}


def scenario(name, fc=None, timeout=None, **arguments):
    return Scenario(name, [fc], {"model_name_or_path": ["preset:llama-tiny"], **arguments}, timeout=timeout)


def matrix():
    """1-process ok / LoRA / broken / endless, and a 2-process DDP run: 5 experiments on 2 CPU slots."""
    one = [scenario("ok"), scenario("lora", peft_method="lora", target_modules=["q_proj", "v_proj"]),
           scenario("broken", peft_method="lora", target_modules=["no_such_module"]),
           scenario("endless", timeout=10, max_steps=100000, memory_logging="none")]
    problems = []
    experiments = expand(one, FCS, dict(TINY_DEFAULTS), {}, Matrices([1]), "cpu", {}, problems)
    experiments += expand([scenario("ddp", "ddp")], FCS, dict(TINY_DEFAULTS), {}, Matrices([2]), "cpu", {}, problems)
    assert not problems
    return typed(experiments)


def run(out: Path, **options):
    os.environ["TUNEBENCH_CACHE"] = str(out.parent / "cache")
    # Only `endless` has a short limit (its scenario's `timeout: 10`): the verdicts of the others must not depend
    # on how fast a busy machine runs them (a 2-process DDP run took 31 s under a second CI on the same cores).
    return run_matrix(matrix(), RunOptions(output_dir=out, timeout_seconds=600, cpu_slots=2, **options))


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    base = tmp_path_factory.mktemp("executors")
    return run(base / "sequential"), run(base / "concurrent", settings=(LocalSettings(max_concurrent=2),)), base


def test_concurrent_rows_equal_sequential_rows(both):
    sequential, concurrent, _ = both
    key = lambda rows: sorted((r["experiment_id"], r["scenario"], r["status"]) for r in rows)  # noqa: E731
    assert key(sequential) == key(concurrent)
    statuses = {r["scenario"]: r["status"] for r in concurrent}
    assert statuses == {"ok": "ok", "lora": "ok", "broken": "error", "endless": "timeout", "ddp": "ok"}
    assert "no_such_module" in next(r for r in concurrent if r["scenario"] == "broken")["error_messages"]
    ok_columns = lambda rows: set().union(*(r for r in rows if r["status"] == "ok"))  # noqa: E731
    assert ok_columns(sequential) == ok_columns(concurrent)
    assert all(r["concurrent_experiments"] == 0 for r in sequential)
    assert any(r["concurrent_experiments"] > 0 for r in concurrent)


def test_concurrent_run_never_oversubscribes_its_slots(both):
    _, concurrent, _ = both
    spans = [(r["experiment_start_unix"], r["experiment_end_unix"], r["num_gpus"]) for r in concurrent]
    for start, _, _ in spans:
        in_use = sum(size for s, e, size in spans if s <= start < e)
        assert in_use <= 2, spans
    # the 2-process experiment ran alone: it needs both slots
    ddp = next(r for r in concurrent if r["scenario"] == "ddp")
    assert ddp["status"] == "ok" and ddp["concurrent_experiments"] == 0
    assert ddp["scan_comm_all_reduce_bytes"] == 4 * ddp["trainable_parameters"]


# No "the concurrent run is faster" assertion: on 2 cores the gain depends on which experiment the queue
# leaves for last (the one that times out may run alone) and on start-up contention, so it failed 1 CI run in 2
# with a 0.3 % difference. The packing order is tested exactly on fake jobs (test_scheduling.py); wall ÷ ideal
# is a benchmark figure (docs/evidence/matrix-packing.md, measured by matrix_packing.py in the folder beside it),
# not a timed test.


def harness(out: Path, scenarios: list, tmp: Path, *extra: str) -> subprocess.Popen:
    options = write_inputs(tmp, scenarios)
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp / "cache")}
    return subprocess.Popen([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out),
                             "--memory_logging", "none", *extra], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_until_running(out: Path, prefixes: list[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(list(out.glob(f"{p}_*/stdout.log")) for p in prefixes):
            time.sleep(3)  # training, not starting
            return
        time.sleep(0.3)
    raise AssertionError(f"{prefixes} never started")


def no_orphans(out: Path) -> bool:
    return subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split() == []


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_stopping_a_concurrent_run_kills_every_experiment_and_resume_reruns_only_the_rest(tmp_path, sig, code):
    scenarios = [tiny_scenario("quick"), tiny_scenario("long-a", max_steps=100000),
                 tiny_scenario("long-b", max_steps=100000)]
    out = tmp_path / "results"
    proc = harness(out, scenarios, tmp_path, "--max_concurrent", "2", "--cpu_slots", "2")
    wait_until_running(out, ["long-a", "long-b"])  # 'quick' finished, both long ones running side by side
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr[-2000:]
    assert no_orphans(out)
    # Every experiment on disk is in the CSV: the interrupted ones as error rows naming the signal.
    frame = pd.read_csv(out / "raw_summary.csv").set_index("scenario")
    assert sorted(frame.index) == ["long-a", "long-b", "quick"] and frame.loc["quick", "status"] == "ok"
    name = "SIGINT (Ctrl-C)" if sig == signal.SIGINT else signal.Signals(sig).name
    for long in ("long-a", "long-b"):
        assert frame.loc[long, "status"] == "error"
        assert frame.loc[long, "error_messages"].startswith(f"interrupted: tunebench was stopped by {name}")
    if sig != signal.SIGINT:
        return
    quick_log = next(out.glob("quick_*/stdout.log"))
    before = quick_log.stat().st_mtime_ns
    finite = [tiny_scenario("quick"), tiny_scenario("long-a", max_steps=12), tiny_scenario("long-b", max_steps=12)]
    proc = harness(out, finite, tmp_path, "--max_concurrent", "2", "--cpu_slots", "2")
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert quick_log.stat().st_mtime_ns == before and "resume" in stderr  # only the missing ones ran
    frame = pd.read_csv(out / "raw_summary.csv")
    # This matrix's three rows lead, all ok; the interrupted runs of the earlier (endless) edition stay on disk
    # and so in the CSV, as their error rows.
    assert list(frame["status"][:3]) == ["ok", "ok", "ok"] and list(frame["scenario"][:3]) == [
        "quick",
        "long-a",
        "long-b",
    ]
    assert list(frame["status"][3:]) == ["error", "error"] and (frame["max_steps"][3:] == 100000).all()
