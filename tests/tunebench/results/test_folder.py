"""The results folder's rules (issue J): what tunebench adopts, writes and removes; safe experiment folder names;
the CSVs rebuilt from what is on disk; bad input refused at the edge with exit 2 and one line.

Reached through the modules it calls (the files read back from a results folder): tunebench/readback.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench import cli
from tunebench.fileio import ensure_inside, safe_name
from tunebench.results import folder as results_folder
from tunebench.results import summaries


def run_cli(tmp_path, capsys, *extra, scenarios=None, defaults=None):
    options = write_inputs(tmp_path, scenarios or [tiny_scenario()], defaults=defaults)
    code = cli.main([*options, *extra])
    return code, capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ names
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.text(max_size=400))
def test_safe_names_have_no_separator_no_dotdot_and_a_bound(text):
    name = safe_name(text)
    assert name and len(name) <= 64 and "/" not in name and "\\" not in name and ".." not in name
    assert not name.startswith((".", "-")) and name == safe_name(name)  # stable


def test_a_scenario_named_to_escape_stays_inside(tmp_path, capsys):
    out = tmp_path / "out"
    code, err = run_cli(tmp_path, capsys, "--results_output_path", str(out), "--dry_run",
                        scenarios=[tiny_scenario("../../escaped"), tiny_scenario("/etc/cron.d/x")])
    assert code == 0, err
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert [f.rsplit("_", 1)[0] for f in folders] == ["escaped", "etc-cron.d-x"]
    assert not (tmp_path.parent / "escaped").exists() and not list(tmp_path.glob("escaped*"))


def test_writes_through_a_planted_link_are_refused(tmp_path, capsys):
    from tunebench.execution.experiment_run import RunOptions, run_one
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    from tunebench.matrix.validation import typed

    experiment = typed([ExperimentSpec("s", FrameworkConfig("none"), 1, "cpu",
                                       {"model_name_or_path": "preset:llama-tiny"})])[0]
    (out / experiment.folder_name).symlink_to(elsewhere, target_is_directory=True)
    row = run_one(experiment, [], RunOptions(output_dir=out, dry_run=True))
    assert row["status"] == "error" and "outside" in row["error_messages"] and not list(elsewhere.iterdir())
    with pytest.raises(ValueError, match="outside"):
        ensure_inside(out, out / experiment.folder_name / "results.json")


# ------------------------------------------------------------------------------------------------ ownership
@pytest.mark.parametrize("extra", [["--dry_run"], []])
def test_a_foreign_folder_is_refused_and_untouched(tmp_path, capsys, extra):
    foreign = tmp_path / "mine"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "keep.txt").write_text("keep")
    code, err = run_cli(tmp_path, capsys, "--results_output_path", str(foreign), *extra)
    assert code == 2 and "holds files tunebench did not write (keep.txt, sub)" in err
    assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt", "sub"]


@pytest.mark.parametrize("path", ["", "HOME", "HOME_PARENT", "REPO", "/"])
def test_paths_that_are_never_results_folders(tmp_path, capsys, monkeypatch, path):
    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    target = {"HOME": str(home), "HOME_PARENT": str(home.parent), "REPO": str(REPO)}.get(path, path)
    code, err = run_cli(tmp_path, capsys, "--results_output_path", target, "--dry_run")
    assert code == 2 and "--results_output_path" in err and "Traceback" not in err
    assert not (tmp_path / results_folder.LOCK_FILE).exists() and not (home / results_folder.MARKER).exists()


def test_marker_only_in_folders_it_creates_or_finds_empty(tmp_path, capsys):
    empty, legacy = tmp_path / "empty", tmp_path / "legacy"
    empty.mkdir()
    legacy.mkdir()
    (legacy / "raw_summary.csv").write_text("scenario\n")  # an earlier run's folder, from before the marker
    for folder in (empty, legacy, tmp_path / "new" / "deep"):
        code, err = run_cli(tmp_path, capsys, "--results_output_path", str(folder), "--dry_run")
        assert code == 0, err
    assert (empty / results_folder.MARKER).is_file() and (tmp_path / "new" / "deep" / results_folder.MARKER).is_file()
    assert not (legacy / results_folder.MARKER).exists()


def test_overwrite_removes_only_recognised_experiment_folders(tmp_path):
    root = tmp_path / "results"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("x")
    ours = root / "full_0123456789ab"
    (ours / "trainer_output").mkdir(parents=True)
    (ours / "spec.json").write_text(json.dumps({"experiment_id": "0123456789ab", "scenario": "full"}))
    (ours / "results.json").write_text("{}")
    (ours / "trainer_output" / "ckpt.bin").write_text("x")
    annotated = root / "lora_aaaaaaaaaaaa"
    annotated.mkdir()
    (annotated / "config.json").write_text(json.dumps({"experiment_id": "aaaaaaaaaaaa"}))  # an earlier version's
    (annotated / "my-notes.md").write_text("mine")
    lookalike = root / "lora_bbbbbbbbbbbb"  # named like one, but its spec.json says otherwise
    lookalike.mkdir()
    (lookalike / "spec.json").write_text(json.dumps({"experiment_id": "cccccccccccc"}))
    (root / "link_0123456789ab").symlink_to(outside, target_is_directory=True)
    (root / "raw_summary.csv").write_text("a\n")
    (root / "user.txt").write_text("mine")
    assert results_folder.remove_previous_results(root) == 1
    assert sorted(p.name for p in root.iterdir()) == ["link_0123456789ab", "lora_aaaaaaaaaaaa", "lora_bbbbbbbbbbbb",
                                                      "user.txt"]
    assert sorted(p.name for p in annotated.iterdir()) == ["my-notes.md"]
    assert (outside / "precious.txt").is_file() and (lookalike / "spec.json").is_file()


# ------------------------------------------------------------------------------------------------ rows on disk
def _experiment(root, name, eid, **row):
    folder = root / f"{name}_{eid}"
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps({"experiment_id": eid, "scenario": name,
                                                    "arguments": {"max_steps": 3}}))
    if row:
        (folder / "results.json").write_text(json.dumps({"experiment_id": eid, "scenario": name, **row}))
    return folder


def test_csvs_are_the_union_of_the_folders_on_disk(tmp_path):
    root = tmp_path / "results"
    _experiment(root, "b", "bbbbbbbbbbbb", status="ok", experiment_start_unix=2.0)
    _experiment(root, "a", "aaaaaaaaaaaa", status="ok", experiment_start_unix=1.0)
    killed = _experiment(root, "k", "kkkkkkkkkkkk")
    (killed / "stdout.log").write_text("")  # launched, never finished: its harness was SIGKILLed
    _experiment(root, "d", "dddddddddddd")  # planned by a dry run only: not a row
    corrupt = _experiment(root, "c", "cccccccccccc")
    (corrupt / "results.json").write_text("[1, 2]")  # valid JSON, not a row
    (root / "notes").mkdir()
    frame = summaries.write_summaries(root, order=["b_bbbbbbbbbbbb"])
    assert list(frame["scenario"]) == ["b", "a", "k"]  # this matrix first, then by start time
    assert list(frame["status"]) == ["ok", "ok", "error"] and "no results.json" in frame["error_messages"][2]
    assert frame["max_steps"][2] == 3  # from the experiment's own spec.json
    assert list(pd.read_csv(root / "raw_summary.csv")["scenario"]) == ["b", "a", "k"]
    assert summaries.write_summaries(root, incomplete=False)["scenario"].tolist() == ["a", "b"]


def test_a_corrupt_results_json_is_not_done_and_runs_again(tmp_path, caplog):
    from tunebench.execution.experiment_run import reusable_row

    folder = _experiment(tmp_path, "c", "cccccccccccc")
    for text in ("[1, 2]", '"ok"', "{not json", "null"):
        (folder / "results.json").write_text(text)
        assert reusable_row(folder, "cccccccccccc") is None
    assert "treated as not done" in caplog.text


# ------------------------------------------------------------------------------------------------ ranges at the edge
@pytest.mark.parametrize("extra,arguments,expected", [
    (["--timeout", "0"], {}, "--timeout: out of range: 0.0"),
    (["--timeout", "-5"], {}, "--timeout: out of range: -5.0"),
    (["--timeout", "nan"], {}, "--timeout: out of range: nan"),
    (["--max_concurrent", "0"], {}, "--max_concurrent: out of range: 0"),
    (["--nvidia_smi_loop_ms", "0"], {}, "--nvidia_smi_loop_ms: out of range: 0"),
    (["--ray_connect_timeout", "-1"], {}, "--ray_connect_timeout: out of range"),
    (["--memory_logging", "scaner"], {}, "--memory_logging (or MEMORY_LOGGING): memory_logging: unknown mode(s) "
                                         "['scaner']"),
    (["--accelerate_config", "/nonexistent/accelerate.yaml"], {}, "/nonexistent/accelerate.yaml: -: file not found"),
    ([], {"steady_target_ci_pct": -1}, "arguments.steady_target_ci_pct: -1.0 is out of range: expected > 0"),
    ([], {"steady_max_cv": 0}, "arguments.steady_max_cv: 0.0 is out of range: expected > 0"),
    ([], {"steady_min_steps": 0}, "arguments.steady_min_steps: 0 is out of range: expected >= 1"),
    ([], {"max_steps": 0}, "arguments.max_steps: 0 is out of range: expected >= 1 and <= 1,000,000,000 (or -1)"),
    ([], {"r": 10**6}, "arguments.r: 1000000 is out of range: expected >= 1 and <= 65,536"),
    (["--timeout", "1e12"], {}, "--timeout: out of range: 1000000000000.0 (fix: give a value > 0 and <= 2,592,000)"),
    (["--repeats", "1000000000"], {}, "--repeats: out of range: 1000000000 (fix: give a value >= 1 and <= 100)"),
    (["--slurm_time_limit", "1e9"], {}, "--slurm_time_limit/--slurm-time-limit: invalid int value: '1e9'"),
    (["--slurm_time_limit", "100000"], {}, "--slurm_time_limit: out of range: 100000"),
    (["--cpu_slots", "100000"], {}, "--cpu_slots: out of range: 100000"),
    ([], {"per_device_train_batch_size": 0}, "arguments.per_device_train_batch_size: expected a whole number >= 1, got "
                                             "0"),
    ([], {"lora_dropout": 1.0}, "arguments.lora_dropout: 1.0 is out of range: expected >= 0 and < 1"),
    ([], {"training_data_path": "data/missing.jsonl"}, "local file 'data/missing.jsonl' does not exist"),
    ([], {"training_data_path": "missing.parquet"}, "local file 'missing.parquet' does not exist"),
    ([], {"training_data_path": "./somewhere"}, "local file './somewhere' does not exist"),
    ([], {"memory_logging": "scaner"}, "arguments.memory_logging: memory_logging: unknown mode(s) ['scaner']"),
])
def test_out_of_range_values_are_exit_2_naming_the_key(tmp_path, capsys, extra, arguments, expected):
    out = tmp_path / "out"
    try:
        code, err = run_cli(tmp_path, capsys, "--results_output_path", str(out), "--dry_run", *extra,
                            scenarios=[tiny_scenario(**arguments)])
    except SystemExit as exc:  # argparse: a value that is no number at all
        code, err = exc.code, capsys.readouterr().err
    assert code == 2 and expected in err, err
    assert "Traceback" not in err and not out.exists()


def test_a_local_looking_model_folder_is_never_a_hub_id(tmp_path, capsys, monkeypatch):
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(tmp_path, capsys, "--results_output_path", str(tmp_path / "out"), "--dry_run",
                        scenarios=[tiny_scenario(model_name_or_path=["models/mine"])])
    assert code == 2 and "local model directory 'models/mine' does not exist" in err


def test_memory_logging_all_starts_the_sidecar(tmp_path, capsys, monkeypatch):
    captured = {}
    monkeypatch.setattr("tunebench.api.running.run_matrix",
                        lambda experiments, options: captured.setdefault("o", options) and [])
    monkeypatch.setattr("tunebench.execution.preparation.preprocess_data", lambda *a, **k: None)
    code, err = run_cli(tmp_path, capsys, "--results_output_path", str(tmp_path / "out"), "--memory_logging", "all")
    assert code == 0, err
    assert "nvidia" in captured["o"].trackers and captured["o"].timeout_seconds == 3600.0


@pytest.mark.parametrize("argv,expected", [
    (["--tolerance", "-1"], "--tolerance -1.0: out of range (fix: give a value > 0 and <= 1)"),
    (["--model", "preset:no-such-model"], "--model: unknown preset 'preset:no-such-model'"),
    (["--batch", "0"], "--batch 0: out of range (fix: give a value >= 1 and <= 4,096)"),
    (["--model", "org/hub-model"], "verify builds models offline"),
])
def test_verify_refuses_bad_options_at_once(capsys, argv, expected):
    from tunebench.cli.verify import main

    started = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and time.monotonic() - started < 5


def test_compare_with_no_shared_metric_is_an_input_error(tmp_path):
    reference, results = tmp_path / "ref.csv", tmp_path / "new.csv"
    reference.write_text("scenario,status,steady_tokens_per_second\na,ok,10\n")
    results.write_text("scenario,status,scan_mem_params\na,ok,10\n")
    from tunebench.cli.compare import main

    assert main(["--reference", str(reference), "--results", str(results), "--out", str(tmp_path / "c")]) == 2


def test_an_unreachable_ray_cluster_is_exit_2_at_once(tmp_path, capsys):
    pytest.importorskip("ray")
    started = time.monotonic()
    code, err = run_cli(tmp_path, capsys, "--results_output_path", str(tmp_path / "out"), "--executor", "ray",
                        "--ray_address", "127.0.0.1:1")
    assert code == 2 and "cannot reach 127.0.0.1:1" in err and time.monotonic() - started < 30
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_ray_address_that_never_answers_is_exit_2_within_the_bound(tmp_path):
    """A port that accepts connections but is no Ray cluster: ray.init would retry forever (issue J: > 120 s).
    In a subprocess: the abandoned connection thread must not outlive the harness either."""
    pytest.importorskip("ray")
    options = write_inputs(tmp_path, [tiny_scenario()])
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path",
                               str(tmp_path / "out"), "--executor", "ray", "--ray_address",
                               f"127.0.0.1:{silent.getsockname()[1]}", "--ray_connect_timeout", "5"],
                              capture_output=True, text=True, timeout=120, cwd=REPO,
                              env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    assert proc.returncode == 2 and "no answer from the Ray cluster" in proc.stderr
    assert time.monotonic() - started < 60


# ------------------------------------------------------------------------------------------------ hostile files
@pytest.mark.parametrize("raw,expected", [
    ("a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in
                                               zip("abcdefgh", "bcdefghi", strict=True)) + "scenarios: [{name: x}]\n",
     "expands to more than 200,000 values"),
    ("[" * 100_000, "nested too deeply to read"),
    (b"scenarios:\n  - name: \xff\xfe\n", "not UTF-8 text"),
    # issue W2: the size is checked before PyYAML parses (1.2 MB took it 7 s; 50 MB did not finish in 580 s)
    ("scenarios: [{name: x}]\n" + "# a comment\n" * 30_000, "bytes, more than the 262,144 a tunebench input file "
                                                             "may hold"),
])
def test_hostile_yaml_files_are_problems_not_tracebacks(tmp_path, capsys, raw, expected):
    options = write_inputs(tmp_path, [tiny_scenario()])
    path = tmp_path / "scenarios.yaml"
    path.write_bytes(raw if isinstance(raw, bytes) else raw.encode())
    started = time.monotonic()
    code = cli.main([*options, "--results_output_path", str(tmp_path / "out"), "--dry_run"])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and "Traceback" not in err and time.monotonic() - started < 20


def test_a_link_planted_as_the_lock_is_never_written_through(tmp_path, capsys):
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    (out / results_folder.MARKER).write_text("{}")
    victim.write_text("precious")
    (out / results_folder.LOCK_FILE).symlink_to(victim)
    code, err = run_cli(tmp_path, capsys, "--results_output_path", str(out), "--dry_run")
    assert code == 2 and ".tunebench.lock" in err and victim.read_text() == "precious"


def test_logs_planted_as_links_are_replaced_not_written_through(tmp_path):
    from tunebench.execution.experiment_run import _clear_previous_attempt

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "exp"
    folder.mkdir()
    for name in ("stdout.log", "stderr.log"):
        (folder / name).symlink_to(victim)
    _clear_previous_attempt(folder)
    assert not list(folder.iterdir()) and victim.read_text() == "precious"


def test_more_processes_than_cpu_slots_is_skipped_not_a_crash(tmp_path):
    from tunebench.execution.experiment_run import RunOptions
    from tunebench.execution.runner import run_matrix
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed

    experiment = ExperimentSpec("wide", FrameworkConfig("none"), 64, "cpu", {"model_name_or_path": "preset:llama-tiny"})
    rows = run_matrix(typed([experiment]), RunOptions(output_dir=tmp_path, cpu_slots=2))
    assert rows[0]["status"] == "skipped" and "needs 64 processes" in rows[0]["error_messages"]


def test_synthetic_data_beyond_the_bound_is_refused_before_it_is_built(tmp_path, capsys):
    code, err = run_cli(tmp_path, capsys, "--results_output_path", str(tmp_path / "out"), "--dry_run",
                        scenarios=[tiny_scenario(synthetic_num_samples=10**6, max_seq_len=2**20)])
    assert code == 2 and "synthetic_num_samples" in err and "synthetic tokens" in err


def test_the_entrys_own_row_needs_no_identity_but_a_row_on_disk_does(tmp_path):
    """The training entry writes results.json without the identity (the harness adds it): reading it back must not
    call it damaged; a finished row on disk without experiment_id is (issue W: readback in one place)."""
    from tunebench.results.summaries import read_row

    (tmp_path / "results.json").write_text('{"status": "ok", "train_loss": 1.5}')
    assert read_row(tmp_path, required=()) == {"status": "ok", "train_loss": 1.5}
    assert read_row(tmp_path) is None
