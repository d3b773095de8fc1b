"""End to end through the real subprocess path: failures recorded, matrix continues, timeout, resume.

Reached through the modules it calls (the training child's trackers, start-up times and rank merge):
tunebench/experiment/trackers.py, tunebench/experiment/startup.py, tunebench/experiment/rank_merge.py."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs

pytestmark = pytest.mark.slow


def benchmark(args: list[str], env_extra: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "TUNEBENCH_CACHE": env_extra.pop("cache") if env_extra else os.environ.get("TUNEBENCH_CACHE", ""),
    }
    env.update(env_extra or {})
    return subprocess.run([sys.executable, str(REPO / "benchmark.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


SCENARIOS = [
    tiny_scenario("broken", peft_method="lora", target_modules=["no_such_module"]),
    tiny_scenario("fixed-len", synthetic_length_distribution="fixed"),
    tiny_scenario("lora", peft_method="lora", target_modules=["q_proj", "v_proj"]),
]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("e2e")
    options = write_inputs(folder, SCENARIOS)
    out = folder / "results"
    args = [*options, "--results_output_path", str(out), "--memory_logging", "scanner"]
    proc = benchmark(args, {"cache": str(folder / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder, args, out, proc


def test_failing_experiment_is_recorded_and_matrix_continues(first_run):
    _, _, out, proc = first_run
    frame = pd.read_csv(out / "raw_summary.csv").set_index("scenario")
    assert frame.loc["broken", "status"] == "error"
    assert "no_such_module" in frame.loc["broken", "error_messages"]
    assert frame.loc["fixed-len", "status"] == "ok" and frame.loc["lora", "status"] == "ok"
    assert "broken" in proc.stdout and "fixed-len" in proc.stdout  # the summary table lists every row


def test_the_preload_server_was_spawned_before_the_inputs_were_read(first_run):
    """Its imports ran beside the harness's reading of the inputs (issue AE): the run found it spawned, and the rows
    forked from it say so."""
    _, _, out, proc = first_run
    assert "the preload server was spawned" in proc.stderr and "starting the preload server" not in proc.stderr
    ok = pd.read_csv(out / "raw_summary.csv").query("status == 'ok'")
    assert len(ok) == 2 and ok["startup_preloaded"].all() and (ok["startup_preload_seconds"] >= 0).all()


def test_ok_rows_have_metrics_and_exact_token_counts(first_run):
    _, _, out, _ = first_run
    frame = pd.read_csv(out / "raw_summary.csv").set_index("scenario")
    fixed = frame.loc["fixed-len"]
    # Fixed-length synthetic rows: 10 steps × batch 2 × 64 tokens, no padding at all.
    assert fixed["train_tokens"] == fixed["train_nonpad_tokens"] == 10 * 2 * 64
    lora = frame.loc["lora"]
    assert lora["train_tokens"] > lora["train_nonpad_tokens"] > 0  # uniform lengths: padding exists
    for row in (fixed, lora):
        assert row["train_loss"] > 0 and row["train_runtime"] > 0
        assert row["train_nonpad_tokens_per_second"] == pytest.approx(row["train_nonpad_tokens"] / row["train_runtime"])
        assert row["mem_peak_host_rss_bytes"] > 0
    assert lora["trainable_parameters"] < fixed["trainable_parameters"]
    bench = pd.read_csv(out / "benchmarks.csv")
    assert {"scenario", "status", "train_nonpad_tokens_per_second", "peft_method"} <= set(bench.columns)
    assert "learning_rate" not in bench.columns  # does not vary across experiments


def test_steady_state_columns_agree_with_the_per_step_times(first_run):
    import json

    _, _, out, _ = first_run
    frame = pd.read_csv(out / "raw_summary.csv").set_index("scenario")
    for scenario in ("fixed-len", "lora"):
        row = frame.loc[scenario]
        steps = json.loads((next(out.glob(f"{scenario}_*")) / "steps.json").read_text())
        assert [s["step"] for s in steps] == list(range(1, 11)) and row["total_steps"] == 10
        steady = [s for s in steps if s["steady"]]
        # warm-up 3 (memory scan on step 2), steady 4..10, phases timed on 4..10
        assert [s["step"] for s in steady] == list(range(4, 11)) and row["steady_steps"] == 7
        median = sorted(s["seconds"] for s in steady)[3]
        assert row["steady_step_time_median"] == pytest.approx(median)
        tokens = sum(s["padded_tokens"] for s in steady) / len(steady)
        nonpad = sum(s["nonpad_tokens"] for s in steady) / len(steady)
        assert row["steady_tokens_per_second"] == pytest.approx(tokens / median)
        assert row["steady_nonpad_tokens_per_second"] == pytest.approx(nonpad / median)
        assert sum(s["padded_tokens"] for s in steps) == row["train_tokens"]
        assert row["first_step_seconds"] == pytest.approx(steps[0]["seconds"])
        # the scanner's timed step is one of the steady steps, and its time is that step's own time
        assert row["scan_time_source"] == "time_window" and row["scan_time_window"] == "4-10"
        chosen = steps[int(row["scan_time_step_chosen"]) - 1]
        assert row["scan_time_step_vs_median"] == pytest.approx(row["scan_time_step"] / median - 1)
        # two clocks, one step: their marks are taken by two callbacks back to back (preemption-prone under load)
        assert abs(row["scan_time_step"] - chosen["seconds"]) < 0.25 * chosen["seconds"] + 0.1
        assert row["scan_attention_backend"] == "flash" and row["attn_implementation_used"] == "sdpa"
        assert pd.isna(row["steady_mfu"])  # CPU: no peak FLOP/s to divide by
        stages = [row[c] for c in ("startup_imports_seconds", "startup_data_seconds", "startup_model_seconds",
                                   "startup_trainer_seconds", "startup_train_setup_seconds")]
        assert min(stages) >= 0 and sum(stages) == pytest.approx(row["startup_seconds"], abs=1e-6)
        assert 0 <= row["startup_launcher_seconds"] < row["experiment_wall_seconds"]
    assert frame.loc["fixed-len", "steady_padding_fraction"] == 0 and frame.loc["lora", "steady_padding_fraction"] > 0


def test_experiment_folder_has_logs_config_and_runnable_repro(first_run):
    _, _, out, _ = first_run
    folder = next(out.glob("fixed-len_*"))
    for name in ("stdout.log", "stderr.log", "command.sh", "spec.json", "results.json"):
        assert (folder / name).is_file(), name
    assert "tunebench.experiment.train" in (folder / "command.sh").read_text()


def test_resume_skips_completed_and_reruns_edited(first_run):
    folder, args, out, _ = first_run
    done = {p.name: (p / "stdout.log").stat().st_mtime_ns for p in out.iterdir() if p.is_dir()}
    edited = [dict(s) for s in SCENARIOS]
    edited[2] = tiny_scenario("lora", peft_method="lora", target_modules=["q_proj", "v_proj"], learning_rate=5e-4)
    write_inputs(folder, edited)
    proc = benchmark(args, {"cache": str(folder / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv").set_index("scenario")
    fixed_folder = next(n for n in done if n.startswith("fixed-len_"))
    assert (out / fixed_folder / "stdout.log").stat().st_mtime_ns == done[fixed_folder]  # skipped
    broken_folder = next(n for n in done if n.startswith("broken_"))
    assert (out / broken_folder / "stdout.log").stat().st_mtime_ns != done[broken_folder]  # failed → retried
    new_lora = [p.name for p in out.glob("lora_*")]
    assert len(new_lora) == 2  # the edited scenario has a new identity and ran
    # Both editions are on disk, so both are rows: this matrix's (edited) one first, the earlier one after it.
    lora = frame.loc[["lora"]]
    assert list(lora["learning_rate"]) == [5e-4, 1e-3] and (lora["status"] == "ok").all()
    assert "resume" in proc.stderr


def test_timeout_is_recorded_without_orphans(tmp_path):
    options = write_inputs(tmp_path, [tiny_scenario("slow", max_steps=100000)])
    out = tmp_path / "results"
    proc = benchmark([*options, "--results_output_path", str(out), "--timeout", "8", "--memory_logging", "none"],
                     {"cache": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = pd.read_csv(out / "raw_summary.csv").iloc[0]
    assert row["status"] == "timeout"
    leftovers = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert leftovers == []


def test_scan_columns_match_analytic_sizes(first_run):
    _, _, out, _ = first_run
    frame = pd.read_csv(out / "raw_summary.csv").set_index("scenario")
    # the resume test may have added an edited LoRA row (same sizes): either is right here
    full, lora = frame.loc["fixed-len"], frame.loc[["lora"]].iloc[0]
    # fp32 weights: parameters = 4 bytes × every parameter; AdamW = 2 fp32 states per trainable parameter plus
    # one fp32 `step` scalar per trainable tensor (llama-tiny: 21 tensors; LoRA on q,v of 2 layers: 8 tensors).
    assert full["scan_mem_params"] == 4 * full["total_parameters"]
    assert full["scan_mem_optimizer"] == 8 * full["trainable_parameters"] + 4 * 21
    assert lora["scan_mem_params"] == 4 * lora["total_parameters"]
    assert lora["scan_mem_optimizer"] == 8 * lora["trainable_parameters"] + 4 * 8
    for row in (full, lora):
        phases = sum(row[f"scan_time_{p}"] for p in ("forward", "backward", "clip", "optimizer", "other"))
        assert phases == pytest.approx(row["scan_time_step"], rel=1e-9)
        assert row["scan_mem_activations"] > 0 and row["scan_tokens_per_second"] > 0
    assert (next(out.glob("fixed-len_*")) / "scan.json").is_file()


def test_two_process_ddp_on_gloo_merges_ranks_and_counts_all_reduce(tmp_path):
    fcs = {"ddp": {"min_gpus": 2, "arguments": {"ddp_find_unused_parameters": False}}}
    scenario = {"name": "ddp", "framework_config": ["ddp"], "arguments": {"model_name_or_path": ["preset:llama-tiny"]}}
    options = write_inputs(tmp_path, [scenario], framework_configs=fcs)
    out = tmp_path / "results"
    proc = benchmark([*options, "--results_output_path", str(out), "--num_gpus_matrix", "2"],
                     {"cache": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = pd.read_csv(out / "raw_summary.csv").iloc[0]
    assert row["status"] == "ok" and row["num_processes"] == 2 and row["distributed_type"] == "MULTI_CPU"
    assert row["scan_ranks"] == 2
    # DDP all-reduces exactly the fp32 gradients once per step.
    assert row["scan_comm_all_reduce_bytes"] == 4 * row["trainable_parameters"]
    assert row["scan_tokens_per_second"] == pytest.approx(2 * row["scan_tokens_per_second_per_device"])
    assert row["scan_mem_params"] == row["scan_mem_params_min"] == 4 * row["total_parameters"]
    assert len(list(next(out.glob("ddp_*")).glob("scan.rank*.json"))) == 2


@pytest.mark.parametrize("fault,status,marker", [("oom", "oom", "injected by the test"), ("kill", "error", "SIGKILL")])
def test_failing_rank_gives_a_row_without_hang_or_orphans(tmp_path, fault, status, marker):
    scenario = {"name": "rankfail", "framework_config": [None],
                "arguments": {"model_name_or_path": ["preset:llama-tiny"], "max_steps": 100000}}
    options = write_inputs(tmp_path, [scenario])
    out = tmp_path / "results"
    env = {"cache": str(tmp_path / "cache"), "TUNEBENCH_TEST_FAULT": fault, "TUNEBENCH_TEST_FAULT_RANK": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "fault"), os.environ.get("PYTHONPATH", "")])}
    proc = benchmark([*options, "--results_output_path", str(out), "--num_gpus_matrix", "2", "--timeout", "240",
                      "--memory_logging", "none"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = pd.read_csv(out / "raw_summary.csv").iloc[0]
    assert row["status"] == status, row["error_messages"]
    assert marker in row["error_messages"]
    assert row["experiment_wall_seconds"] < 200  # the surviving rank did not hang until the timeout
    assert subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split() == []


def test_ctrl_c_stops_the_running_experiment_and_keeps_finished_rows(tmp_path):
    import signal
    import time

    scenarios = [tiny_scenario("quick"), tiny_scenario("endless", max_steps=100000)]
    options = write_inputs(tmp_path, scenarios)
    out = tmp_path / "results"
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out),
                             "--memory_logging", "none"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(out.glob("endless_*/stdout.log")) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # the endless experiment is now training
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    frame = pd.read_csv(out / "raw_summary.csv")
    assert list(frame["scenario"]) == ["quick", "endless"] and list(frame["status"]) == ["ok", "error"]
    assert frame.loc[1, "error_messages"].startswith("interrupted: tunebench was stopped by SIGINT (Ctrl-C)")
    assert subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split() == []


def test_steady_state_auto_stops_as_soon_as_its_rule_holds(tmp_path):
    """The real Trainer + scanner + step timer, default windows (phases timed on every steady step so far):
    training stops at the first step where the median is known to the target, which steps.json replays exactly."""
    import json

    from tunebench.experiment.steady import SteadyPolicy, median_is_known

    scenario = tiny_scenario("auto", steady_state="auto", max_steps=100, steady_target_ci_pct=50.0,
                             synthetic_length_distribution="fixed")
    options = write_inputs(tmp_path, [scenario])
    out = tmp_path / "results"
    proc = benchmark([*options, "--results_output_path", str(out)], {"cache": str(tmp_path / "cache"),
                                                                     "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = pd.read_csv(out / "raw_summary.csv").iloc[0]
    steps = json.loads(next(out.glob("auto_*/steps.json")).read_text())
    stop = len(steps)
    assert row["status"] == "ok" and row["total_steps"] == stop < 100
    policy = SteadyPolicy(warmup_steps=3, min_steps=5, target_ci_pct=50.0)  # tests/fixtures/harness.py's defaults

    def known(after: int) -> bool:  # the timer's rule on the steady steps run by then (steps 4 onwards)
        return median_is_known([s["seconds"] for s in steps[:after] if s["step"] > policy.warmup_steps], policy)

    first_check = policy.warmup_steps + policy.min_steps
    assert known(stop) and not any(known(s) for s in range(first_check, stop))
    assert row["scan_time_source"] == "time_window" and row["scan_time_window"] == f"4-{stop}"


def test_host_rss_peak_is_the_training_process_own_not_its_launchers():
    # A launcher holding 1 GiB starts a child that holds a few hundred MB (the interpreter, torch): the row's figure
    # must be the child's.
    child = ("import resource, sys; sys.path.insert(0, sys.argv[1]);"
             "from tunebench.experiment.train import own_peak_rss;"
             "print(own_peak_rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    parent = ("import subprocess, sys; held = bytearray(2**30); held[::4096] = b'x' * len(held[::4096]);"
              f"sys.stdout.write(subprocess.run([sys.executable, '-c', {child!r}, sys.argv[1]],"
              " capture_output=True, text=True, check=True).stdout)")
    out = subprocess.run([sys.executable, "-c", parent, str(REPO)], capture_output=True, text=True, check=True)
    own, inherited = map(int, out.stdout.split())
    assert inherited > 2**30  # what ru_maxrss says: the launcher's peak
    assert own < 2**29  # the child's own
