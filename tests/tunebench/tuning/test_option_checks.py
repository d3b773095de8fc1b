"""tune's messages: every hostile option value is exit 2 with one line naming the option, and nothing is created;
a problem the pipeline still finds in tune's generated scenarios names the option that produced it."""

from __future__ import annotations

import atexit
import contextlib
import io
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.hf_argparser import string_to_bool

from tunebench.cli import tune as command
from tunebench.errors import InputError
from tunebench.hardware.gpus import load_table
from tunebench.tuning.option_checks import RANGES, _distributions, _optimizer_names, plan_device_problem
from tunebench.tuning.options import TuneOptions

WORK = Path(tempfile.mkdtemp(prefix="tunebench-tune-messages-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)
OUT = WORK / "out"  # never created by a refused command
FILE = WORK / "a-file.txt"
FILE.write_text("not a folder\n")
FOREIGN = WORK / "foreign"
FOREIGN.mkdir()
(FOREIGN / "notes.txt").write_text("keep")
GARBAGE_YAML = WORK / "garbage.yaml"
GARBAGE_YAML.write_text("a: [1, 2\n")
LIST_YAML = WORK / "list.yaml"
LIST_YAML.write_text("- 1\n- 2\n")
BASE = ["--model", "preset:llama-tiny", "--device", "cpu", "--results_output_path", str(OUT)]


def _run(argv: list[str]) -> tuple[int, list[str], str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = command.main(argv)
    return code, err.getvalue().splitlines(), out.getvalue()


def _refused(argv: list[str], option: str) -> None:
    before = sorted(p.name for p in WORK.iterdir())
    code, lines, stdout = _run(argv)
    assert code == 2, (argv, lines)
    assert len(lines) == 1 and option in lines[0] and lines[0].startswith("tunebench tune: "), (argv, lines)
    assert stdout == ""
    assert sorted(p.name for p in WORK.iterdir()) == before and not OUT.exists()


def _with(option: str, *values: str) -> list[str]:
    base = [a for i, a in enumerate(BASE) if a != option and (i == 0 or BASE[i - 1] != option)]
    return [*base, option, *values]


def _out_of(allowed) -> st.SearchStrategy[str]:
    """Numbers outside a Range, NaN and infinities, as the user would type them."""
    below = st.floats(max_value=allowed.low, allow_nan=False, allow_infinity=False).filter(
        lambda v: allowed.problem(v)) if allowed.low is not None else st.nothing()
    above = st.floats(min_value=allowed.high, allow_nan=False, allow_infinity=False).filter(
        lambda v: allowed.problem(v)) if allowed.high is not None else st.nothing()
    return st.one_of(st.sampled_from(["nan", "NaN", "inf", "-inf", "1e400", "-1e400"]), below.map(repr),
                     above.map(repr))


def _integer_out_of(allowed) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(["nan", "inf", "1.5", "", "ten", "0x10"]),
                     st.integers(max_value=int(allowed.low) - 1).map(str),
                     st.integers(min_value=int(allowed.high) + 1, max_value=10**40).map(str))


INTEGER_OPTIONS = ("num_gpus", "effective_batch", "max_seq_len", "lora_ranks", "micro_batches", "confirm")
FLOAT_OPTIONS = ("gpu_hour_price", "budget_minutes", "tolerance_pct", "margin_pct", "timeout")


def _not_bool(text: str) -> bool:
    try:
        return not all(string_to_bool(v) in (True, False) for v in text.replace(",", " ").split()) or not text.split()
    except Exception:
        return True


_word = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="-"), min_size=1, max_size=12)
HOSTILE = {
    **{f"--{name}": (_integer_out_of(RANGES[name]) if name in INTEGER_OPTIONS else _out_of(RANGES[name]))
       for name in (*INTEGER_OPTIONS, *FLOAT_OPTIONS)},
    "--peft": _word.filter(lambda w: w not in ("none", "lora", "any")),
    "--objective": _word.filter(lambda w: w not in ("tokens_per_second", "joules_per_token", "cost")),
    "--device": _word.filter(lambda w: w not in ("auto", "cuda", "cpu")),
    "--model": st.one_of(_word.map(lambda w: f"preset:{w}").filter(lambda m: m != "preset:llama-tiny"),
                         _word.map(lambda w: f"./no-such-model-{w}")),
    "--training_data_path": _word.filter(lambda w: "/" not in w).map(lambda w: f"missing-{w}.jsonl"),
    "--synthetic_length_distribution": _word.filter(lambda w: w not in _distributions()),
    "--optimizers": _word.filter(lambda w: w not in _optimizer_names()),
    "--gradient_checkpointing": _word.filter(_not_bool),
    "--packing": _word.filter(_not_bool),
    "--torch_compile": _word.filter(_not_bool),
    "--plan_device": st.one_of(st.sampled_from(["0GiB", "nanGiB", "...GiB", "-1GiB", "1e400GiB", "0MB"]),
                               st.integers(65537, 10**30).map(lambda n: f"{n}GiB"),
                               _word.filter(lambda w: plan_device_problem(w) is not None)),
    "--log_level": _word.filter(lambda w: w.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    "--results_output_path": st.sampled_from(["", str(FILE), str(FOREIGN), "/"]),
    "--defaults_config_path": st.sampled_from([str(WORK / "missing.yaml"), str(WORK), str(GARBAGE_YAML),
                                               str(LIST_YAML), ""]),
    "--grid": _word,  # a flag given a value
    # issue AD: a list was read as its first GPU by a fragment ("NVIDIA H200, NVIDIA L40S" → H200)
    "--project_to": st.one_of(_word.filter(lambda w: load_table().lookup(w) is None),
                              st.sampled_from([",", " , ", "NVIDIA H200, NVIDIA L40S", "NVIDIA H200,"])),
    "--gpu_table": st.sampled_from([str(WORK / "missing.yaml"), str(WORK), str(GARBAGE_YAML), str(LIST_YAML)]),
    "--framework_configs_path": st.sampled_from([str(WORK / "missing.yaml"), str(WORK), str(GARBAGE_YAML),
                                                 str(LIST_YAML), ""]),
}


def test_every_tune_option_has_hostile_values():
    options = {f"--{name}" for name in TuneOptions.__dataclass_fields__}
    assert options == set(HOSTILE)


@pytest.mark.parametrize("option", sorted(HOSTILE))
def test_a_hostile_value_is_one_line_naming_the_option_and_nothing_is_created(option):
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(HOSTILE[option])
    def check(value):
        _refused(_with(option, value), option)

    check()


def test_project_to_takes_one_gpu_kind():
    from tunebench.tuning.option_checks import project_to_problems

    (problem,) = project_to_problems("NVIDIA H200, NVIDIA L40S", None, 1)
    assert (problem.key, problem.message) == ("--project_to", "2 devices (NVIDIA H200, NVIDIA L40S): --project_to "
                                              "takes one here (experiments are judged against one device)")
    (problem,) = project_to_problems(" , ", None, 1)
    assert problem.message == "' , ' holds an empty entry between or around its commas"


def test_project_to_is_refused_where_it_cannot_rank_and_a_bad_gpu_table_names_its_file():
    _refused(_with("--project_to", "NVIDIA H200"), "--project_to")  # on CPU: no kernel split to project
    _refused([*_with("--project_to", "NVIDIA H200"), "--num_gpus", "2"], "--project_to")
    _refused([*_with("--project_to", "NVIDIA H200"), "--gpu_table", str(GARBAGE_YAML)], str(GARBAGE_YAML))


def test_the_cases_of_issue_w_in_the_users_words():
    _refused(_with("--model", "preset:lama-tiny"), "--model")
    code, lines, _ = _run(_with("--model", "preset:lama-tiny"))
    assert "preset:llama-tiny" in lines[0]  # the presets are listed
    _refused(_with("--training_data_path", str(WORK / "missing.jsonl")), "--training_data_path")
    argv = [*_with("--effective_batch", "4"), "--micro_batches", "3"]
    _refused(argv, "--micro_batches")
    assert "--effective_batch 4" in _run(argv)[1][0] and "does not divide" in _run(argv)[1][0]
    _refused(_with("--optimizers", "bogus"), "--optimizers")
    assert "adamw_torch_fused" in _run(_with("--optimizers", "bogus"))[1][0]  # the choices
    _refused(_with("--budget_minutes", "nan"), "--budget_minutes")
    _refused([*_with("--objective", "cost"), "--gpu_hour_price", "nan"], "--gpu_hour_price")
    _refused([a for a in BASE if a not in ("--model", "preset:llama-tiny")], "--model")  # missing
    _refused([*BASE, "--grid", "yes"], "--grid")
    assert "--grid: takes no value, got 'yes'" in _run([*BASE, "--grid", "yes"])[1][0]
    _refused([*BASE, "--frobnicate", "3"], "'--frobnicate'")


def test_a_space_too_large_to_search_names_the_options_that_widen_it():
    from tunebench.tuning.space import MAX_POINTS, build_space

    options = TuneOptions(model="preset:llama-tiny", effective_batch=720, lora_ranks=tuple(range(1, 60)),
                          optimizers=("adamw_torch", "adamw_torch_fused", "sgd"))
    with pytest.raises(InputError) as caught:
        build_space(options, cpu=True)
    (problem,) = caught.value.problems
    assert problem.key == "--lora_ranks (59), --micro_batches (30), --optimizers (3), --gradient_checkpointing (2)"
    assert f"at most {MAX_POINTS}" in problem.message


def test_a_problem_found_in_the_generated_scenarios_names_the_tune_option_once():
    """Past the edge (options built in Python, as issue S's API will), the pipeline's problems are mapped back:
    one line naming --model, not one per point naming a deleted temporary file."""
    from tunebench.tuning.runs import HarnessRuns
    from tunebench.tuning.space import build_space

    options = TuneOptions(model="preset:lama-tiny", effective_batch=4, max_seq_len=32, optimizers=("adamw_torch",),
                          device="cpu", results_output_path=str(OUT))
    points = build_space(options, cpu=True)
    assert len(points) == 12
    with pytest.raises(InputError) as caught:
        HarnessRuns(options).predict(points)
    (problem,) = caught.value.problems
    assert (problem.source, problem.key) == ("command line", "--model")
    assert "unknown preset 'preset:lama-tiny'" in problem.message and "tunebench-tune-" not in str(problem)
    assert not OUT.exists()


def test_problems_are_mapped_to_the_option_that_made_the_value():
    from tunebench.errors import InputProblem
    from tunebench.tuning.option_checks import in_users_words

    tmp = "/tmp/tunebench-tune-x/tune-space.yaml"
    problems = [InputProblem(tmp, f"scenario 'tune-space-{label}': arguments.optim", "invalid choice: 'x'", "fix")
                for label in ("full-nogc-mb1x4-pad-x", "lora16-gc-mb4x1-pad-x")]
    problems += [InputProblem(tmp, "data_processing.max_seq_len", "must be positive", "fix"),
                 InputProblem(tmp, "scenario 'tune-space-full-nogc-mb1x4-pad-x'", "SFTConfig says no", "fix"),
                 InputProblem("command line", "--num_gpus_matrix", "out of range", "fix"),
                 InputProblem("defaults.yaml", "max_steps", "out of range", "fix")]
    mapped = in_users_words(problems, tmp)
    assert [(p.source, p.key, p.message) for p in mapped] == [
        ("command line", "--optimizers", "invalid choice: 'x'"),
        ("command line", "--max_seq_len", "must be positive"),
        ("command line", "the settings of point full-nogc-mb1x4-pad-x", "SFTConfig says no"),
        ("command line", "--num_gpus", "out of range"),
        ("defaults.yaml", "max_steps", "out of range")]
