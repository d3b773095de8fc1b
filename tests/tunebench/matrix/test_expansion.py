"""Unit tests: precedence, no leaking between scenarios, batch splitting and experiment identity."""

import pytest

from tunebench.errors import InputProblem
from tunebench.matrix.expansion import Matrices, expand, split_batch
from tunebench.matrix.inputs import BASELINE, FrameworkConfig, Scenario

FCS = {
    BASELINE: FrameworkConfig(BASELINE),
    "gc": FrameworkConfig("gc", {"gradient_checkpointing": True, "learning_rate": 5.0}),
}


def run_expand(scenarios, defaults=None, matrices=None, data_processing=None):
    problems: list[InputProblem] = []
    experiments = expand(scenarios, FCS, defaults or {}, data_processing or {}, matrices or Matrices([1]), "cpu", {},
                         problems)
    return experiments, problems


def test_precedence_cli_over_framework_over_scenario_over_data_over_defaults():
    defaults = {"max_seq_len": 64, "learning_rate": 1.0, "max_steps": 3, "seed": 1, "warmup_steps": 7}
    scenario = Scenario("s", [None, "gc"], {"model_name_or_path": ["preset:llama-tiny"], "max_seq_len": 96,
                                            "learning_rate": 2.0, "seed": 2})
    experiments, problems = run_expand([scenario], defaults, Matrices([1], max_seq_len=[128]),
                                       data_processing={"seed": 3, "warmup_steps": 8})
    assert not problems
    base, gc = experiments
    assert base.arguments["max_seq_len"] == 128  # CLI matrix beats scenario
    assert base.arguments["learning_rate"] == 2.0  # scenario beats defaults
    assert gc.arguments["learning_rate"] == 5.0  # framework config beats scenario
    assert base.arguments["seed"] == 2  # scenario beats data_processing
    assert base.arguments["warmup_steps"] == 8  # data_processing beats defaults
    assert base.arguments["max_steps"] == 3  # defaults fill the rest
    assert "gradient_checkpointing" not in base.arguments


def test_scenario_values_never_leak_into_another():
    a = Scenario("a", [None], {"model_name_or_path": ["preset:llama-tiny"], "target_modules": ["q_proj"], "r": 4})
    b = Scenario("b", [None], {"model_name_or_path": ["preset:llama-tiny"]})
    experiments, _ = run_expand([a, b], defaults={"target_modules": ["v_proj"]})
    experiments[0].arguments["target_modules"].append("mutated")
    assert experiments[1].arguments["target_modules"] == ["v_proj"]
    assert "r" not in experiments[1].arguments


def test_matrix_product_and_model_list():
    scenario = Scenario("s", [None, "gc"], {"model_name_or_path": ["preset:llama-tiny", "preset:llama-small"]})
    experiments, _ = run_expand([scenario], matrices=Matrices([1, 2], [8], [64, 128], [True, False]))
    assert len(experiments) == 2 * 2 * 2 * 1 * 2 * 2
    assert len({e.experiment_id for e in experiments}) == len(experiments)


@pytest.mark.parametrize("ebs,ngpu,args,expected", [
    (8, 2, {}, (4, 1)),
    (16, 2, {"per_device_train_batch_size": 2}, (2, 4)),
    (16, 4, {"gradient_accumulation_steps": 2}, (2, 2)),
    (6, 4, {}, "not a positive multiple of 4"),
    (8, 2, {"per_device_train_batch_size": 8}, "not a positive multiple of 16"),
    (12, 1, {"per_device_train_batch_size": 5}, "not a positive multiple of 5"),
])
def test_split_batch(ebs, ngpu, args, expected):
    result = split_batch(ebs, ngpu, args)
    if isinstance(expected, tuple):
        assert result == expected
        assert result[0] * result[1] * ngpu == ebs
    else:
        assert expected in result


def test_indivisible_batch_is_a_problem_not_a_rounded_run():
    scenario = Scenario("s", [None], {"model_name_or_path": ["preset:llama-tiny"], "per_device_train_batch_size": 3})
    experiments, problems = run_expand([scenario], matrices=Matrices([2], [8]))
    assert experiments == []
    assert len(problems) == 1 and "effective_batch_size 8" in problems[0].message


def test_identity_is_stable_and_sensitive():
    scenario = Scenario("s", [None], {"model_name_or_path": ["preset:llama-tiny"], "learning_rate": 1e-3})
    first, _ = run_expand([scenario])
    again, _ = run_expand([Scenario("s", [None], {"learning_rate": 1e-3, "model_name_or_path": ["preset:llama-tiny"]})])
    assert first[0].experiment_id == again[0].experiment_id  # key order does not matter
    edited, _ = run_expand(
        [Scenario("s", [None], {"model_name_or_path": ["preset:llama-tiny"], "learning_rate": 2e-3})]
    )
    assert edited[0].experiment_id != first[0].experiment_id
    other_fc = dict(FCS, gc=FrameworkConfig("gc", {"gradient_checkpointing": False}))
    with_gc = expand([Scenario("s", ["gc"], {"model_name_or_path": ["preset:llama-tiny"]})], FCS, {}, {},
                     Matrices([1]), "cpu", {}, [])
    changed_gc = expand([Scenario("s", ["gc"], {"model_name_or_path": ["preset:llama-tiny"]})], other_fc, {}, {},
                        Matrices([1]), "cpu", {}, [])
    assert with_gc[0].experiment_id != changed_gc[0].experiment_id  # framework config content is identity
    assert len(first[0].experiment_id) == 12


def test_unknown_framework_config_named():
    experiments, problems = run_expand([Scenario("s", ["nope"], {"model_name_or_path": ["preset:llama-tiny"]})])
    assert "unknown framework config 'nope'" in problems[0].message and "gc" in problems[0].fix
    # its arguments are still checked (every problem in one go), under the baseline: the problem means none runs
    assert [e.framework_config.name for e in experiments] == ["none"]
    experiments, problems = run_expand([Scenario("s", ["nope", None], {"model_name_or_path": ["preset:llama-tiny"]})])
    assert [e.framework_config.name for e in experiments] == ["none"] and len(problems) == 1


def test_identity_follows_local_data_file_changes(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "a"}\n')
    scenario = Scenario("s", [None], {"model_name_or_path": ["preset:llama-tiny"], "training_data_path": str(data)})
    before = run_expand([scenario])[0][0].experiment_id
    assert run_expand([scenario])[0][0].experiment_id == before
    data.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert run_expand([scenario])[0][0].experiment_id != before  # stale results are never reused
