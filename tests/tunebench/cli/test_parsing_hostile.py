"""Generated hostile inputs (hypothesis): scenario YAML and option values the harness has never seen must end in
exit 0 or 2, with no traceback, and nothing written outside the results folder (issue J).

Each example runs the real command line in this process (`tunebench.cli.main`) as a dry run: validation, the
results-folder rules and the per-experiment files are the real ones; nothing is trained. Derandomised, so CI
sees the same 500 examples every time.

Issue W extends it to every subcommand's numeric options (benchmark.py, plan, verify, compare, and tune as far as
its own checks go) and to every file the harness reads back (spec.json, results.json, steps.json, error_rank*.json,
samples sidecars, the lock file, a local model's config.json): exit 2 with one line naming the option or the file,
or a row that says why, never a traceback, a hang or an experiment missing from raw_summary.csv.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.fixtures.harness import TracebackRecorder
from tunebench import cli

HOSTILE_NAMES = ["a", "../../escaped", "x/y", "..", ".hidden", "-rf", "精调", "a" * 300, "con", "with space",
                 "tab\tname", "/etc/passwd", "C:\\evil", "~root", "$HOME", "`id`", "a;rm -rf b"]
KEYS = ["max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "max_seq_len",
        "steady_target_ci_pct", "steady_max_cv", "steady_min_steps", "steady_warmup_steps", "scan_steps",
        "scan_time_steps", "peft_method", "r", "lora_dropout", "training_data_path", "synthetic_num_samples",
        "model_name_or_path", "memory_logging", "output_dir", "results_json", "torch_dtype", "target_modules",
        "seed", "bogus_key", "max_length", "steady_state", "synthetic_length_distribution"]
SPECIAL_VALUES = ["preset:llama-tiny", "preset:nope", "../x", "/etc", "data/missing.jsonl", "synthetic", "4-6",
                  "auto", "lora", "none", "fixed", "all", "scaner", "-1", "0", "1e309", "nan", "", "org/name"]

values = st.one_of(
    st.integers(-5, 10**7), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.booleans(),
    st.none(), st.lists(st.sampled_from(["q_proj", "v_proj", "x", ""]), max_size=3), st.sampled_from(SPECIAL_VALUES),
    st.dictionaries(st.sampled_from(["a", "use_reentrant"]), st.booleans(), max_size=2),
)
arguments = st.one_of(st.just({}), st.dictionaries(st.sampled_from(KEYS), values, max_size=1),
                      st.dictionaries(st.sampled_from(KEYS), values, max_size=6)).map(
    lambda args: {"model_name_or_path": ["preset:llama-tiny"], "max_steps": 8, "max_seq_len": 16,
                  "synthetic_num_samples": 8, "steady_warmup_steps": 2, "steady_min_steps": 2, **args})
plain_scenario = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(max_size=30)), "arguments": arguments},
    optional={"framework_config": st.sampled_from([[None], [None, "gradient-checkpointing"], None])})
hostile_scenario = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(max_size=30))},
    optional={"framework_config": st.one_of(st.none(), st.lists(st.sampled_from([None, "gradient-checkpointing",
                                                                                  "nope", 3]), max_size=2)),
              "arguments": st.one_of(arguments, values), "slow": st.one_of(st.booleans(), values),
              "exclusive": st.booleans(), "timeout": values, "surprise": values},
)
as_yaml = lambda scenarios: yaml.safe_dump({"scenarios": scenarios}, allow_unicode=True)  # noqa: E731
scenario_files = st.one_of(
    st.lists(plain_scenario, min_size=1, max_size=3).map(as_yaml),  # mostly valid: names and one odd value
    st.lists(plain_scenario, min_size=1, max_size=3).map(as_yaml),
    st.lists(st.one_of(plain_scenario, hostile_scenario), min_size=1, max_size=3).map(as_yaml),
    st.text(max_size=80),  # anything at all, malformed YAML included
    st.sampled_from(["", "scenarios: []", "scenarios: 3", "- a\n- b", "scenarios:\n  - name: x\n   bad: [\n"]),
)
numbers = st.one_of(st.integers(-3, 9).map(str), st.sampled_from(["", "1 2", "1,2", "x", "0", "nan", "1e3", "-1"]))
folders = st.sampled_from(["out", "", ".", "out/nested/deeper", "foreign", "afile", "owned", "out/../out2", "/",
                           "HOME", "SANDBOX_PARENT"])
usual = st.fixed_dictionaries({"--results_output_path": st.sampled_from(["out", "out/nested", "owned", "out2"])},
                              optional={"--num_gpus_matrix": st.sampled_from(["1", "1 2", "2"]),
                                        "--max_concurrent": st.sampled_from(["1", "2"]),
                                        "--run_only_scenarios": st.sampled_from(HOSTILE_NAMES)})
hostile = st.fixed_dictionaries({}, optional={
    "--timeout": st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.sampled_from(["0", "-5", "x"])),
    "--num_gpus_matrix": numbers, "--effective_batch_size_matrix": numbers, "--max_seq_len_matrix": numbers,
    "--packing_matrix": st.sampled_from(["true", "false", "maybe", "true false"]),
    "--max_concurrent": numbers, "--cpu_slots": numbers, "--nvidia_smi_loop_ms": numbers,
    "--memory_logging": st.sampled_from(["scanner", "all", "none", "scaner", "nvidia,huggingface", "", ",,"]),
    "--run_only_scenarios": st.sampled_from(HOSTILE_NAMES),
    "--results_output_path": folders,
})
options = st.one_of(usual, hostile)


def _snapshot(root: Path, skip: set[Path]) -> dict[str, tuple[int, int]]:
    """Every file under `root` (outside `skip`), with its size and modification time."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if (here / d).resolve() not in skip]
        for name in filenames:
            path = here / name
            stat = path.lstat()
            found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    for name in ("inputs", "work", "home", "work/foreign", "work/owned"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "work" / "foreign" / "thesis.tex").write_text("precious")
    (root / "work" / "owned" / ".tunebench-results").write_text("{}")
    (root / "work" / "afile").write_text("not a folder")
    (root / "inputs" / "defaults.yaml").write_text(yaml.safe_dump({"report_to": "none", "bf16": False,
                                                                   "torch_dtype": "float32"}))
    (root / "inputs" / "framework_configs.yaml").write_text(yaml.safe_dump({"framework_configs": {
        "gradient-checkpointing": {"arguments": {"gradient_checkpointing": True}}}}))
    return root


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(text=scenario_files, chosen=options)
def test_generated_inputs_exit_0_or_2_and_write_only_inside_the_results_folder(sandbox, monkeypatch, text, chosen):
    work = sandbox / "work"
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(sandbox / "home"))
    monkeypatch.setenv("TUNEBENCH_CACHE", str(sandbox / "home" / "cache"))
    (sandbox / "inputs" / "scenarios.yaml").write_text(text)
    chosen = dict(chosen)
    target = chosen.pop("--results_output_path", "out")
    target = {"HOME": str(sandbox / "home"), "SANDBOX_PARENT": str(sandbox.parent)}.get(target, target)
    results = (work / target).resolve() if target else work.resolve()
    existed = results.exists()
    argv = ["--scenarios_config_path", str(sandbox / "inputs" / "scenarios.yaml"), "--defaults_config_path",
            str(sandbox / "inputs" / "defaults.yaml"), "--framework_configs_path",
            str(sandbox / "inputs" / "framework_configs.yaml"), "--device", "cpu", "--dry_run", "--log_level",
            "ERROR", "--results_output_path", target]
    for option, value in chosen.items():
        argv += [option, *value.split()] if option.endswith("matrix") and value.strip() else [option, value]
    before = _snapshot(sandbox, skip={results})
    recorder = TracebackRecorder()
    logging.getLogger().addHandler(recorder)
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    finally:
        logging.getLogger().removeHandler(recorder)
    event(f"exit {code}")
    assert code in (0, 2), argv
    assert not recorder.records, recorder.records[0].getMessage()
    after = _snapshot(sandbox, skip={results})
    changed = {path for path in set(before) | set(after) if before.get(path) != after.get(path)}
    assert changed <= {str(sandbox / "inputs" / "scenarios.yaml")}, (argv, sorted(changed)[:5])
    if code == 2 and not existed:
        assert not results.exists()  # bad input: nothing created
    if code == 0:
        for folder in results.iterdir():
            assert folder.resolve().parent == results  # every experiment folder directly inside it


# ================================================================================================================
# Issue W: every subcommand's numeric options, and every file the harness reads back. A hostile value or file is
# exit 2 with one line naming the option or the file (or, for a file the harness can do without, a row that says
# why), never a traceback, a hang or a silently missing experiment.
# ================================================================================================================
import json  # noqa: E402
import shutil  # noqa: E402

from filelock import lock_descriptor  # noqa: E402

from tests.fixtures.harness import tiny_scenario, write_inputs  # noqa: E402
from tunebench.cli import compare as compare_cli  # noqa: E402
from tunebench.cli.options import OPTION_RANGES, build_parser  # noqa: E402
from tunebench.cli.parsing import unranged  # noqa: E402
from tunebench.cli.verify import VERIFY_RANGES  # noqa: E402
from tunebench.cli.verify import build_parser as verify_parser  # noqa: E402
from tunebench.results.compare.rules import PERCENT_RANGE  # noqa: E402

ISSUE_W = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                          HealthCheck.data_too_large, HealthCheck.filter_too_much])
# Text a user could type where a number is expected: every float (NaN, ±inf, subnormals, 1e308), integers far past
# any bound, and the spellings that are numbers to Python but not to a person.
number_text = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-10**40, 10**40).map(str),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-0", "0", "1e-320", "", " ", "x", "0x1f",
                     "1_000", "٣", "1e3", "4.5", "-1", "2147483648", "9" * 400]),
)


def _typed(value: str, kind):
    """The value argparse would hand over (None: argparse refuses it itself)."""
    try:
        return kind(value)
    except (ValueError, OverflowError):
        return None


def _one_line_naming(err: str, name: str) -> None:
    """The problem is one line naming `name` (a header line above it is the only other line allowed)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    problems = [line for line in lines if line.startswith("  - ")] or lines
    assert len(problems) == 1 and name in problems[0], err


def test_every_numeric_option_of_every_subcommand_has_a_range():
    """One range mechanism (tunebench.cli.parsing): an int/float option without a range fails here."""
    assert unranged(build_parser(), OPTION_RANGES) == []
    assert unranged(build_parser("benchmark.py plan"), OPTION_RANGES) == []
    assert unranged(verify_parser(), VERIFY_RANGES) == []
    assert unranged(compare_cli.build_parser(), {}) == []  # its numbers are METRIC=PCT texts: PERCENT_RANGE


def test_every_numeric_option_of_tune_has_a_range():
    from tunebench.cli.tune import build_parser as tune_parser
    from tunebench.tuning.option_checks import RANGES as TUNE_RANGES

    assert unranged(tune_parser(), {f"--{name}": allowed for name, allowed in TUNE_RANGES.items()}) == []


@pytest.fixture(scope="module")
def tiny_inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-inputs")
    return folder, write_inputs(folder, [tiny_scenario(max_steps=8, max_seq_len=16, synthetic_num_samples=8)])


@ISSUE_W
@given(command=st.sampled_from(["run", "plan"]), option=st.sampled_from(sorted(OPTION_RANGES)), value=number_text)
def test_benchmark_and_plan_refuse_a_number_out_of_range_in_one_line(tiny_inputs, tmp_path, capsys, command, option,
                                                                     value):
    kind = {action.option_strings[0]: action.type for prog in ("benchmark.py", "benchmark.py plan")
            for action in build_parser(prog)._actions}[option]
    typed = _typed(value, kind)
    if typed is not None and not OPTION_RANGES[option].problem(typed):
        event("in range: not run")
        return
    out = tmp_path / "out"
    # plan runs nothing: it takes no --dry_run (and refuses a run's own option, naming it: one line still)
    argv = ([] if command == "run" else ["plan"]) + [*tiny_inputs[1], *(["--dry_run"] if command == "run" else []),
                                                    "--results_output_path", str(out), f"{option}={value}"]
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse: not a number at all
        code = exc.code
    assert code == 2
    _one_line_naming(capsys.readouterr().err, option)
    assert not out.exists()


@ISSUE_W
@given(option=st.sampled_from(sorted(VERIFY_RANGES)), value=number_text)
def test_verify_refuses_a_number_out_of_range_in_one_line(capsys, option, value):
    kind = {action.option_strings[0]: action.type for action in verify_parser()._actions}[option]
    typed = _typed(value, kind)
    if typed is not None and not VERIFY_RANGES[option].problem(typed):
        event("in range: not run (verify would train)")
        return
    assert cli.main(["verify", "--device", "cpu", f"{option}={value}"]) == 2
    _one_line_naming(capsys.readouterr().err, option)


@ISSUE_W
@given(option=st.sampled_from(["--threshold", "--min_effect"]), value=number_text)
def test_compare_refuses_a_percentage_out_of_range_in_one_line(tmp_path, capsys, option, value):
    typed = _typed(value.rstrip("%"), float)
    if typed is not None and not PERCENT_RANGE.problem(typed):
        event("in range: not run")
        return
    code = cli.main(["compare", "--reference", str(tmp_path / "ref.csv"), "--results", str(tmp_path),
                     f"{option}=steady_mfu={value}"])
    assert code == 2
    _one_line_naming(capsys.readouterr().err, option)


TUNE_INTS = ["--num_gpus", "--effective_batch", "--max_seq_len", "--confirm", "--lora_ranks", "--micro_batches"]


@ISSUE_W
@given(option=st.sampled_from(TUNE_INTS), value=number_text)
def test_tune_refuses_what_its_checks_cover(option, value):
    """tune's whole-number options: a value that is no whole number, or below 1, never starts a search (the
    upper bounds, NaN and inf: tests/tunebench/tuning/test_option_checks.py and the test below)."""
    from tunebench.cli.tune import parse
    from tunebench.errors import InputError

    typed = _typed(value, int)
    if typed is not None and typed >= 1:
        event("accepted by tune today: not run")
        return
    try:
        parse(["--model", "preset:llama-tiny", "--device", "cpu", f"{option}={value}"])
    except SystemExit as exc:
        assert exc.code == 2
    except InputError as exc:
        assert option in {p.key for p in exc.problems}
    else:
        raise AssertionError(f"tune accepted {option}={value!r}")


@pytest.mark.parametrize("option", ["--budget_minutes", "--gpu_hour_price", "--timeout"])
def test_tune_refuses_nan_and_inf(option):
    from tunebench.cli.tune import parse
    from tunebench.errors import InputError

    for value in ("nan", "inf", "1e300"):
        with pytest.raises(InputError):
            parse(["--model", "preset:llama-tiny", "--device", "cpu", f"{option}={value}"])


# ------------------------------------------------------------------------------------------ files read back
json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers(-10**20, 10**20) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)


def file_texts(real: dict | list):
    """Hostile contents for a file whose real contents are `real`: one key of it given another type, dropped or
    added, anything JSON at all, bytes, deep nesting, and the classics."""
    keys = sorted(real) if isinstance(real, dict) else []
    mutated = st.nothing() if not keys else st.tuples(st.sampled_from(keys), json_values, st.booleans()).map(
        lambda change: json.dumps({k: v for k, v in real.items() if not (change[2] and k == change[0])}
                                  | ({} if change[2] else {change[0]: change[1]})))
    deep = st.integers(33, 200_000).map(lambda n: "[" * n + "]" * n)
    return st.one_of(
        mutated,
        mutated,
        json_values.map(json.dumps),
        st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
        deep,
        st.sampled_from(["", "{", "null", "NaN", '{"a": Infinity}', "\x00", "[]"]),
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A results folder with one finished experiment (spec.json, results.json, steps.json, stdout.log), its CSVs,
    and a reference written from it (ref.csv + ref.samples.json): every file the harness reads back, for real."""
    from tunebench.results import summaries

    root = tmp_path_factory.mktemp("finished")
    options = write_inputs(root, [tiny_scenario(max_steps=8, max_seq_len=16, synthetic_num_samples=8)])
    out = root / "out"
    assert cli.main([*options, "--dry_run", "--results_output_path", str(out), "--log_level", "ERROR"]) == 0
    (folder,) = out.glob("full_*")
    spec = json.loads((folder / "spec.json").read_text())
    identity = {k: v for k, v in spec.items() if not isinstance(v, (dict, list)) and k != "spec_version"}
    steps = [{"step": i, "seconds": 0.1 + 0.001 * i, "steady": i > 2, "end_unix": 1000 + 0.1 * i, "nonpad_tokens": 10}
             for i in range(1, 9)]
    (folder / "results.json").write_text(json.dumps({**identity, "status": "ok", "steady_step_time_median": 0.1,
                                                     "steady_nonpad_tokens_per_second": 100.0}))
    (folder / "steps.json").write_text(json.dumps(steps))
    (folder / "stdout.log").write_text("")
    summaries.write_summaries(out, None)
    assert compare_cli.main(["--write_reference", str(root / "ref.csv"), "--results", str(out)]) == 0
    return (
        root,
        out,
        folder.name,
        {"spec.json": spec, "results.json": json.loads((folder / "results.json").read_text()), "steps.json": steps},
    )


def _copy(finished, tmp_path) -> Path:
    root, out, _, _ = finished
    target = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(out, target)
    return target


def _compare(reference, results, capsys) -> tuple[int, str]:
    code = compare_cli.main(["--reference", str(reference), "--results", str(results), "--no_charts",
                             "--out", str(results / "compare")])
    return code, capsys.readouterr().err


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@settings(ISSUE_W, max_examples=100)  # each example rebuilds the CSVs and runs compare: ~6 s in all
@given(data=st.data(), case=st.sampled_from(["spec.json", "spec.json alone", "results.json", "steps.json"]))
def test_a_damaged_experiment_file_keeps_its_row_and_compare_answers(finished, tmp_path, capsys, data, case):
    """spec.json, results.json or steps.json of a finished experiment, damaged (`spec.json alone`: an experiment
    that never wrote its results.json): raw_summary.csv still holds the experiment (ok, or an error row naming the
    file), and compare answers with 0, 1 or 2, never a traceback."""
    from tunebench.results import summaries
    from tunebench.telemetry.steady_energy import read_steps, steady_window

    out = _copy(finished, tmp_path)
    folder = out / finished[2]
    name = case.removesuffix(" alone")
    if case.endswith("alone"):
        (folder / "results.json").unlink()
    text = data.draw(file_texts(finished[3][name]))
    (folder / name).write_text(text, encoding="utf-8", errors="surrogateescape")
    frame = summaries.write_summaries(out, None)
    assert len(frame) == 1, text[:200]  # never silently dropped
    row = frame.iloc[0]
    event(f"{case}: row {row['status']}")
    message = str(row.get("error_messages", ""))
    if case == "spec.json alone":  # never finished: an error row, saying why (the damage, or the missing row)
        assert row["status"] == "error" and ("spec.json" in message or message.startswith("no results.json")), message
    elif row["status"] != "ok":
        assert name in message, message
    steady_window(read_steps(folder))  # the energy window reads steps.json too: never a traceback
    code, err = _compare(finished[0] / "ref.csv", out, capsys)
    assert code in (0, 1, 2) and "Traceback" not in err, err
    if code == 2:
        _one_line_naming(err, "error:")


@ISSUE_W
@given(data=st.data())
def test_a_damaged_samples_sidecar_is_exit_2_in_one_line_naming_it(finished, tmp_path, capsys, data):
    root = finished[0]
    case = tmp_path / f"ref-{len(list(tmp_path.iterdir()))}"
    case.mkdir()
    shutil.copy(root / "ref.csv", case / "ref.csv")
    real = json.loads((root / "ref.samples.json").read_text())
    text = data.draw(file_texts(real))
    (case / "ref.samples.json").write_text(text, encoding="utf-8", errors="surrogateescape")
    code, err = _compare(case / "ref.csv", finished[1], capsys)
    event(f"exit {code}")
    assert code in (0, 1, 2) and "Traceback" not in err, err
    if code == 2:
        _one_line_naming(err, "ref.samples.json")


def test_a_deeply_nested_sidecar_is_exit_2_not_a_recursion_error(finished, tmp_path, capsys):
    shutil.copy(finished[0] / "ref.csv", tmp_path / "ref.csv")
    (tmp_path / "ref.samples.json").write_text("[" * 100_000 + "]" * 100_000)
    code, err = _compare(tmp_path / "ref.csv", finished[1], capsys)
    assert code == 2
    assert err.splitlines() == [f"error: step samples {tmp_path / 'ref.samples.json'}: unreadable (nested more than "
                                "32 levels deep); regenerate it with `benchmark.py compare --write_reference <csv> "
                                "--results <dir>`, or delete it"]


def test_a_damaged_spec_json_is_an_error_row_naming_it(finished, tmp_path):
    from tunebench.results import summaries

    out = _copy(finished, tmp_path)
    folder = out / finished[2]
    (folder / "results.json").unlink()
    (folder / "spec.json").write_text(json.dumps({**finished[3]["spec.json"], "experiment_id": 123}))
    frame = summaries.write_summaries(out, None)
    assert list(frame["status"]) == ["error"]
    assert frame["error_messages"][0] == (f"{folder / 'spec.json'}: experiment_id: expected a non-empty string, got "
                                          "123 (fix: remove that folder to run the experiment again)")


@ISSUE_W
@given(data=st.data())
def test_a_damaged_error_rank_file_never_breaks_the_failure_cause(finished, tmp_path, data):
    from tunebench.execution.failures import classify

    folder = tmp_path / f"f-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    text = data.draw(file_texts({"rank": 0, "status": "oom", "error_messages": "CUDA out of memory"}))
    (folder / "error_rank0.json").write_text(text, encoding="utf-8", errors="surrogateescape")
    status, message = classify(1, False, "Traceback (most recent call last):\nRuntimeError: boom\n", folder)
    assert status in ("ok", "oom", "error", "timeout") and isinstance(message, str)


@ISSUE_W
@given(text=st.one_of(st.binary(max_size=5000).map(lambda b: b.decode("latin-1")), json_values.map(json.dumps),
                      st.just("x" * 100_000)))
def test_a_strange_lock_note_is_one_short_line(tiny_inputs, tmp_path, capsys, text):
    from tunebench.results.folder import LOCK_FILE, MARKER

    out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    (out / MARKER).write_text("{}")
    (out / LOCK_FILE).write_text(text, encoding="utf-8", errors="surrogateescape")
    with open(out / LOCK_FILE) as held:
        assert lock_descriptor(held.fileno(), blocking=False)  # another harness holds the folder, as it would
        code = cli.main([*tiny_inputs[1], "--dry_run", "--results_output_path", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    _one_line_naming(err, LOCK_FILE)
    assert len(err.splitlines()[-1]) < 400


@ISSUE_W
@given(data=st.data())
def test_a_damaged_local_model_config_is_exit_2_naming_it(tmp_path, capsys, data):
    real = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}
    case = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
    (case / "model").mkdir(parents=True)
    text = data.draw(st.one_of(file_texts(real), st.integers(513, 10**7).map(
        lambda n: json.dumps({**real, "num_hidden_layers": n}))))
    (case / "model" / "config.json").write_text(text, encoding="utf-8", errors="surrogateescape")
    options = write_inputs(case, [tiny_scenario(model_name_or_path=[str(case / "model")], max_steps=8,
                                                max_seq_len=16, synthetic_num_samples=8)])
    code = cli.main([*options, "--dry_run", "--results_output_path", str(case / "out"), "--log_level", "ERROR"])
    err = capsys.readouterr().err
    event(f"exit {code}")
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 2:
        _one_line_naming(err, "config.json")
        assert not (case / "out").exists()


def test_a_scenarios_file_that_is_a_list_is_one_problem(tmp_path, capsys):
    options = write_inputs(tmp_path, [], raw_scenarios="- name: a\n- name: b\n")
    assert cli.main([*options, "--dry_run", "--results_output_path", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[1:] == [f"  - {tmp_path / 'scenarios.yaml'}: <top level>: expected a mapping, got list "
                                    "(fix: write `scenarios:` with `- name: ...` entries (and `data_processing:`))"]


def test_compare_takes_a_results_directory_as_reference(finished, tmp_path, capsys):
    """Issue W: `compare --reference <results dir>` was refused ("expects a CSV"); it reads the folder as --results
    does, its step samples included."""
    out = _copy(finished, tmp_path)
    code, err = _compare(finished[1], out, capsys)
    assert code == 0, err
    summary = (out / "compare" / "summary.md").read_text()
    assert f"reference: `{finished[1]}`" in summary and "1 experiment folders of" in summary
