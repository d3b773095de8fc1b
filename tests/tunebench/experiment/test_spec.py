"""One typed experiment spec, parsed once (issue K): the reference pages' tables are the spec's, the child reads
spec.json and parses nothing, defaults and identity are consistent, and a default experiment prints no deprecation."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import typing

import pytest

from tests.fixtures.harness import REPO, TINY_DEFAULTS, tiny_scenario, write_inputs
from tunebench import cli
from tunebench.cli import reference_tables
from tunebench.cli.options import MATRIX_TYPES, OPTION_RANGES, build_parser
from tunebench.experiment.arguments import ENTRY_GROUPS
from tunebench.experiment.ranges import ENTRY_RANGES


def test_the_reference_tables_are_the_parser_and_the_argument_classes():
    assert reference_tables.sync(), "run `python -m tunebench.cli.reference_tables` and commit docs/reference/"


def test_every_numeric_option_and_argument_has_a_type_and_a_range():
    for action in build_parser()._actions:
        name = action.option_strings[0] if action.option_strings else ""
        if action.type in (int, float):
            assert name in OPTION_RANGES, f"{name} is numeric but has no range"
        if name in MATRIX_TYPES:
            assert action.nargs == "+"
    for kind in ENTRY_GROUPS.values():
        hints = typing.get_type_hints(kind)
        for field in dataclasses.fields(kind):
            assert field.metadata.get("help"), f"{field.name} has no meaning for the reference page"
            if hints[field.name] in (int, float):
                assert field.name in ENTRY_RANGES, f"{field.name} is numeric but has no range"


def test_a_table_row_that_drifts_is_caught(tmp_path):
    for page in ("options.md", "arguments.md"):
        (tmp_path / page).write_text((REPO / "docs" / "reference" / page).read_text())
    arguments = tmp_path / "arguments.md"
    arguments.write_text(arguments.read_text().replace("| LoRA rank |", "| LoRA's rank |"))
    assert not reference_tables.sync(tmp_path) and reference_tables.sync(tmp_path, write=True) is False
    assert reference_tables.sync(tmp_path) and "| LoRA rank |" in arguments.read_text()


def test_a_batch_size_is_parsed_once_in_the_parent_and_read_as_it_is_by_the_child(tmp_path, capsys, monkeypatch):
    """per_device_train_batch_size from a scenario file to spec.json: typed by the one parse (YAML's text '3'
    becomes 3), then the child builds its objects from spec.json without any parser."""
    out = tmp_path / "out"
    options = write_inputs(tmp_path, [tiny_scenario(per_device_train_batch_size="3", learning_rate="2e-5")])
    assert cli.main([*options, "--results_output_path", str(out), "--dry_run"]) == 0
    folder = next(out.glob("full_*"))
    spec = json.loads((folder / "spec.json").read_text())
    assert spec["entry"]["training"]["per_device_train_batch_size"] == 3
    assert spec["entry"]["training"]["learning_rate"] == 2e-5
    assert "--spec" in (folder / "command.sh").read_text() and "per_device_train_batch_size" not in \
        (folder / "command.sh").read_text()

    from tunebench.experiment import entry_parser, train

    def no_parsing(*args, **kwargs):
        raise AssertionError("the child parsed its arguments again")

    monkeypatch.setattr(entry_parser.EntryParser, "__init__", no_parsing)
    training = train.load_entry(["--spec", str(folder / "spec.json")])[4]
    assert training.per_device_train_batch_size == 3 and training.learning_rate == 2e-5


def test_a_scenario_without_a_model_gets_the_entry_default(tmp_path, capsys):
    out = tmp_path / "out"
    defaults = {k: v for k, v in TINY_DEFAULTS.items()}
    options = write_inputs(tmp_path, [{"name": "nomodel", "framework_config": [None], "arguments": {}}],
                           defaults=defaults)
    assert cli.main([*options, "--results_output_path", str(out), "--dry_run"]) == 0
    spec = json.loads(next(out.glob("nomodel_*/spec.json")).read_text())
    assert spec["model_name_or_path"] == "preset:llama-tiny"


def test_the_tokenizer_is_built_once_per_model(monkeypatch, tmp_path):
    from tunebench.execution import preparation
    from tunebench.experiment import models
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed

    built = []
    real = models.build_tokenizer
    monkeypatch.setattr(models, "build_tokenizer", lambda name: built.append(name) or real(name))
    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path / "cache"))
    specs = typed([ExperimentSpec(f"s{i}", FrameworkConfig("none"), 1, "cpu",
                                  {**TINY_DEFAULTS, "model_name_or_path": "preset:llama-tiny", "seed": i})
                   for i in range(3)])
    preparation.preprocess_data(specs)
    assert built == ["preset:llama-tiny"]


@pytest.mark.slow
def test_a_default_experiment_prints_no_deprecation_warning(tmp_path):
    """The quickstart's first experiment (the repository's defaults and CPU scenario set, a few steps)."""
    out = tmp_path / "out"
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache"), "PYTHONWARNINGS": "default"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), "--device", "cpu", "--results_output_path",
                           str(out), "--run_only_scenarios", "full-finetuning", "standard-peft",
                           "--max_seq_len_matrix", "32"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for stderr in out.glob("*/stderr.log"):
        text = stderr.read_text()
        assert "FutureWarning" not in text and "DeprecationWarning" not in text, (stderr, text[-3000:])
    assert "FutureWarning" not in proc.stderr and "DeprecationWarning" not in proc.stderr
