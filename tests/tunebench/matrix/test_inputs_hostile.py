"""Generated hostile values (hypothesis) for every key a scenario entry or a framework config entry takes that it did
not at 27072a4 (issue AD), read from tunebench/matrix/inputs.py's key lists (tests/fixtures/surfaces.py: a key
added later is generated for unasked): a scenario's `num_gpus`, a framework config's `parity_baseline`. Written
into the YAML files and read by tunebench.Matrix.from_yaml in this process: a matrix, or an InputError whose every
problem names the file and the entry's key; never another exception."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tunebench
from tests.fixtures.harness import TINY_DEFAULTS, tiny_scenario, write_inputs
from tests.fixtures.surfaces import new_file_keys

GENERATED = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                            HealthCheck.data_too_large])
NEW = new_file_keys()
CONFIGS = ("none", "gradient-checkpointing", "lora-fast")
scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**7), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=8), st.sampled_from([*CONFIGS, "None", "NONE", "", " none", "lora-fast "]))
value = st.one_of(scalar, st.lists(scalar, max_size=3), st.dictionaries(st.sampled_from([*CONFIGS, "x"]), scalar,
                                                                       max_size=2),
                  st.sampled_from(CONFIGS), st.integers(1, 4), st.lists(st.integers(1, 4), min_size=1, max_size=3))


def test_the_keys_read_from_the_registry_are_those_added_since_27072a4():
    assert set(NEW["scenario"]) >= {"num_gpus"} and set(NEW["framework_config"]) >= {"parity_baseline"}
    assert not (set(NEW["scenario"]) | set(NEW["framework_config"])) & {"name", "arguments", "min_gpus"}


def _write(folder, where: str, key: str, drawn) -> None:
    """The three files, `key: drawn` in the scenario `s` or in the framework config `lora-fast` (the scenario `t`
    runs whatever `s` does: the matrix is never empty)."""
    scenario = {**tiny_scenario("s", max_steps=8, max_seq_len=16), "framework_config": list(CONFIGS)}
    configs = {"gradient-checkpointing": {"arguments": {"gradient_checkpointing": True}},
               "lora-fast": {"arguments": {"peft_method": "lora"}}}
    (scenario if where == "scenario" else configs["lora-fast"])[key] = drawn
    write_inputs(folder, [scenario, tiny_scenario("t", max_steps=8, max_seq_len=16)], defaults=TINY_DEFAULTS,
                 framework_configs=configs)


@GENERATED
@given(case=st.sampled_from([(where, key) for where, keys in sorted(NEW.items()) for key in keys]), drawn=value)
def test_every_new_file_key_is_read_or_one_problem_naming_file_and_key(tmp_path_factory, case, drawn):
    where, key = case
    folder = tmp_path_factory.mktemp("inputs")
    _write(folder, where, key, drawn)
    file = folder / ("scenarios.yaml" if where == "scenario" else "framework_configs.yaml")
    named = "scenarios[0] (s)." + key if where == "scenario" else f"framework_configs.lora-fast.{key}"
    try:
        matrix = tunebench.Matrix.from_yaml(scenarios=str(folder / "scenarios.yaml"),
                                            defaults=str(folder / "defaults.yaml"),
                                            framework_configs=str(folder / "framework_configs.yaml"), device="cpu",
                                            num_gpus=[1, 2])
    except tunebench.InputError as error:
        event("refused")
        assert [(p.source, p.key) for p in error.problems] == [(str(file), named)], [str(p) for p in error.problems]
        return
    event("accepted")
    assert yaml.safe_load(file.read_text()) is not None and matrix.experiments  # read, and something to run
    if where == "framework_config" and key == "parity_baseline":
        fast = [e for e in matrix.experiments if e.framework_config.name == "lora-fast"]
        assert all(e.framework_config.parity_baseline in (None, *CONFIGS) for e in fast)


@pytest.mark.parametrize("drawn, message", [
    ("lora-fast ", "'lora-fast ' is not a framework config of this file"),
    (3, "3 is not a framework config of this file"),
    (["none"], "['none'] is not a framework config of this file"),
])
def test_a_parity_baseline_naming_no_config_of_the_file_is_named(tmp_path, drawn, message):
    _write(tmp_path, "framework_config", "parity_baseline", drawn)
    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_yaml(scenarios=str(tmp_path / "scenarios.yaml"),
                                   defaults=str(tmp_path / "defaults.yaml"),
                                   framework_configs=str(tmp_path / "framework_configs.yaml"), device="cpu")
    assert [str(p) for p in caught.value.problems] == [
        f"{tmp_path / 'framework_configs.yaml'}: framework_configs.lora-fast.parity_baseline: {message} (fix: name "
        "one of: gradient-checkpointing, lora-fast, none)"]
