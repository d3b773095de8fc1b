"""tunebench/experiment/nested.py: the one checker of the Trainer's and SFTConfig's nested (mapping) arguments, in
a scenario and in a results row (issue AD): one problem naming the key and its nested key, never transformers'
late FileNotFoundError, PackageNotFoundError or int() of a list."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tunebench
from tunebench.experiment.nested import nested_fields, nested_problems


def test_the_nested_fields_are_this_transformers_and_trls():
    assert {"accelerator_config", "fsdp_config", "deepspeed", "lr_scheduler_kwargs", "model_init_kwargs",
            "dataset_kwargs"} <= set(nested_fields())


@pytest.mark.parametrize("values, expected", [
    ({"accelerator_config": "1"}, [("accelerator_config", 'expected a mapping, got "1"')]),
    ({"accelerator_config": {"non_blocking": "maybe"}},
     [("accelerator_config.non_blocking", 'expected true or false, got "maybe"')]),
    ({"accelerator_config": '{"nonblocking": true}'}, [("accelerator_config.nonblocking", "unknown key")]),
    ({"activation_checkpointing_kwargs": {"use_reentrant": "no"}},
     [("activation_checkpointing_kwargs.use_reentrant", 'expected true or false, got "no"')]),
    ({"lr_scheduler_kwargs": "{not json"}, [("lr_scheduler_kwargs", "not a JSON object")]),
    ({"model_init_kwargs": "x"}, [("model_init_kwargs", 'expected a mapping, got "x"')]),
    ({"fsdp": True, "fsdp_config": {"version": [1]}}, [("fsdp_config.version", "expected 1 or 2, got [1]")]),
    ({"accelerator_config": {"non_blocking": True}, "activation_checkpointing_kwargs": '{"use_reentrant": false}',
      "lr_scheduler_kwargs": {"num_cycles": 2}, "dataset_kwargs": float("nan")}, []),
])
def test_each_nested_argument_is_a_mapping_of_what_its_field_takes(values, expected):
    assert [(key, message) for key, message, _ in nested_problems(values, installed_here=False)] == expected


def test_a_json_file_stands_for_a_mapping_where_transformers_reads_one(tmp_path):
    path = tmp_path / "accelerator.json"
    path.write_text('{"non_blocking": true}')
    assert nested_problems({"accelerator_config": str(path)}) == []
    assert [k for k, _, _ in nested_problems({"lr_scheduler_kwargs": str(path)})] == ["lr_scheduler_kwargs"]
    assert [k for k, _, _ in nested_problems({"accelerator_config": str(tmp_path / "gone.json")})] == \
        ["accelerator_config"]


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None, reason="deepspeed is installed here")
def test_deepspeed_without_its_package_is_one_problem_not_a_package_error():
    """Issue AD: `deepspeed: {...}` raised PackageNotFoundError from the dry run and Matrix.from_scenarios."""
    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios([{"name": "s", "arguments": {"deepspeed": {"zero_optimization": {}}}}],
                                        device="cpu")
    assert [(p.key, p.message) for p in caught.value.problems] == [
        ("scenario 's': arguments.deepspeed", "DeepSpeed needs the deepspeed package, which is not installed")]


@pytest.mark.parametrize("key, value, where", [
    ("accelerator_config", [1], "scenario 's': arguments.accelerator_config"),  # was FileNotFoundError: '1'
    ("gradient_checkpointing_kwargs", 5, "scenario 's': arguments.gradient_checkpointing_kwargs"),  # as written
    ("lr_scheduler_kwargs", "x", "scenario 's': arguments.lr_scheduler_kwargs"),  # was taken, failed at step 1
])
def test_a_scenarios_nested_argument_is_one_problem_naming_the_key_as_written(key, value, where):
    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios([{"name": "s", "arguments": {key: value}}], device="cpu")
    assert [p.key for p in caught.value.problems] == [where]


scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8))
nested = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=10)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(values=st.dictionaries(st.sampled_from([*nested_fields(), "fsdp"]), st.one_of(nested, nested.map(str)),
                              max_size=3))
def test_the_nested_checker_never_raises_and_names_a_given_key(values):
    problems = nested_problems(values, installed_here=False)
    assert all(any(key.split(".")[0] == given for given in values) for key, _, _ in problems), problems
