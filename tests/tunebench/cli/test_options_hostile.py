"""Generated hostile values (hypothesis) for every option of `benchmark.py` and `benchmark.py plan` added since
27072a4 (issue AD), read from tunebench/cli/options.py's parser (tests/fixtures/surfaces.py: an option added later
is generated for unasked): fms-acceleration's `--acceleration_framework_config_keypairs NAME FILE ...` (its files
generated too: fms `plugins:` bodies, other YAML, no file, a folder), `--dataset_save_path` and `--process_port`.
A dry run in this process: exit 0, or exit 2 with every problem naming the option or the file it names; never a
traceback, and nothing written outside the results folder."""

from __future__ import annotations

import argparse
import logging

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.fixtures.harness import TracebackRecorder, tiny_scenario, write_inputs
from tests.fixtures.surfaces import SUBCOMMAND_OPTIONS_27072A4, new_options, subcommand_options
from tunebench import cli

GENERATED = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                            HealthCheck.data_too_large])
NEW = new_options()
HOSTILE_TEXT = ["", " ", "-", "--", "x", "none", "my-gptq", "a" * 300, "../escaped", "精调", "0", "-1", "65536",
                "1e3", "nan", "80", "/etc/passwd", "a b", "\t", "$HOME"]
# fms `plugins:` bodies and what else a YAML file can hold
bodies = st.one_of(
    st.sampled_from([{"peft": {"quantization": {"auto_gptq": {"kernel": "triton_v2", "from_quantized": True}}}},
                     {"peft": {}}, {"training": {"fused_ops_and_kernels": {"fused_lora": True}}}, {"x": 1}, {}]),
    st.dictionaries(st.sampled_from(["peft", "training", "plugins", "x"]),
                    st.one_of(st.none(), st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=2)),
                    max_size=2))
files = st.one_of(bodies.map(lambda body: yaml.safe_dump({"plugins": body})), bodies.map(yaml.safe_dump),
                  st.text(max_size=40),
                  st.sampled_from(["", "plugins: 3", "plugins: [a]", "- a", "plugins:\n  x: [\n"]))
# a FILE value: a generated file, or a path that is no such file
paths = st.one_of(files.map(lambda text: ("file", text)),
                  st.sampled_from([("missing", ""), ("folder", ""), ("text", "")]))


def _values(action: argparse.Action):
    """Values for `action`, from what its parser declares: several words (texts and paths: NAME FILE pairs among
    them, and any other count), a number's text, or any text."""
    if action.nargs in ("+", "*"):
        words = [t for t in HOSTILE_TEXT if not t.startswith("-")]  # argparse's own: `--` ends the options
        return st.lists(st.one_of(st.sampled_from(words).map(lambda t: ("text", t)), paths), min_size=1, max_size=5)
    if action.type in (int, float):
        return st.one_of(st.integers(-10**6, 10**6).map(str), st.sampled_from(HOSTILE_TEXT)).map(
            lambda t: [("text", t)])
    return st.sampled_from(HOSTILE_TEXT).map(lambda t: [("text", t)])


def test_the_options_read_from_the_parser_are_those_added_since_27072a4():
    assert set(NEW) >= {"--acceleration_framework_config_keypairs", "--dataset_save_path", "--process_port"}
    assert not set(NEW) & {"--timeout", "--plan_device", "--gpu_table", "--repeats"}  # 27072a4 had these


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("new-options")
    return write_inputs(folder, [tiny_scenario(max_steps=8, max_seq_len=16, synthetic_num_samples=8)])


def _arguments(tmp_path, drawn: list[tuple[str, str]]) -> tuple[list[str], set[str]]:
    """The command-line words for the drawn values (files written under tmp_path), and the files they name."""
    words, named = [], set()
    for i, (kind, text) in enumerate(drawn):
        if kind == "text":
            words.append(text)
            continue
        path = tmp_path / f"fms-{i}.yaml"
        if kind == "file":
            path.write_text(text)
        elif kind == "folder":
            path.mkdir()
        words.append(str(path))
        named.add(str(path))
    return words, named


@GENERATED
@given(data=st.data(), option=st.sampled_from(sorted(NEW)), command=st.sampled_from(["run", "plan"]))
def test_every_new_option_runs_or_is_one_problem_naming_it(inputs, tmp_path_factory, capsys, data, option, command):
    tmp_path = tmp_path_factory.mktemp("case")
    words, named = _arguments(tmp_path, data.draw(_values(NEW[option])))
    out = tmp_path / "out"
    argv = ([] if command == "run" else ["plan"]) + [*inputs, *(["--dry_run"] if command == "run" else []),
                                                     "--log_level", "ERROR", "--results_output_path", str(out),
                                                     f"{option}", *words]
    if len(words) == 1 and words[0].startswith("-"):
        argv[-2:] = [f"{option}={words[0]}"]  # argparse reads a leading '-' as an option; '=' keeps it a value
    recorder = TracebackRecorder()
    logging.getLogger().addHandler(recorder)
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusal (a word that is no int), as benchmark.py exits
        code = exc.code
    finally:
        logging.getLogger().removeHandler(recorder)
    err = capsys.readouterr().err
    event(f"exit {code}")
    assert recorder.records == [] and "Traceback" not in err, err
    assert code in (0, 2), err
    if code == 2:
        problems = [line for line in err.splitlines() if line.startswith("  - ")] or err.strip().splitlines()
        assert problems and all(option in line or any(path in line for path in named) for line in problems), err
        assert not out.exists()  # refused: nothing made
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("fms-")) == (["out"] if code == 0
                                                                                           else [])


@pytest.mark.parametrize("words, said", [(["", ""], "the pair '' '' has an empty name"),
                                         (["my-gptq", " "], "the pair 'my-gptq' ' ' has an empty file")])
def test_an_empty_name_or_file_is_the_options_problem(inputs, tmp_path, capsys, words, said):
    """The generated cases found `NAME ''` read as the current folder: "  - .: -: file not found", naming neither
    the option nor a file."""
    assert cli.main([*inputs, "--dry_run", "--results_output_path", str(tmp_path / "out"),
                     "--acceleration_framework_config_keypairs", *words]) == 2
    problems = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  - ")]
    assert problems == [f"  - command line: --acceleration_framework_config_keypairs: {said} (fix: e.g. "
                        "--acceleration_framework_config_keypairs my-gptq my-gptq-sample-configuration.yaml)"]


def test_no_other_subcommand_has_an_option_no_corpus_generates_for():
    """benchmark.py's and plan's new options are generated for above, read from the parser. The other subcommands
    (tune, compare, verify, history, bisect) have had no option added since 27072a4, and their corpora generate for
    the options they had (tests/tunebench/api/test_checks_hostile.py, tests/tunebench/cli/test_parsing_hostile.py,
    tests/tunebench/history/test_store_hostile.py). An option added to one of them is named here until a corpus
    generates for it and tests/fixtures/surfaces.py lists it."""
    found = subcommand_options()
    assert {name: sorted(options - SUBCOMMAND_OPTIONS_27072A4.get(name, set())) for name, options in found.items()} \
        == {name: [] for name in found}
