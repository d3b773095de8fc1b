"""Generated hostile values (hypothesis) for every scenario and argument key added since 27072a4 (issue AD), read
from the registry (tests/fixtures/surfaces.py: a key added later is generated for too): the loss-parity band
(`loss_band_seed`, `loss_band_kind`), time to target (`loss_target_fraction`, `loss_target_nats`), the synthetic
corpus (`synthetic_corpus`, `synthetic_markov_states`, `synthetic_markov_branching`), the 4-bit storage
(`bnb_4bit_quant_storage`), fms-acceleration's plugins (`fms_plugins`), a scenario's `num_gpus`, and the nested
`fsdp` / `fsdp_config` (with `torch_compile_mode`, which narrows). Through tunebench/matrix/validation.py, in this
process (no subprocess per example): a matrix whose typed values are in range, or one InputError whose every problem
names the scenario's key, never another exception."""

from __future__ import annotations

import math
import typing

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tunebench
from tests.fixtures.surfaces import new_argument_keys
from tunebench.experiment.arguments import ENTRY_GROUPS
from tunebench.experiment.fms.settings import PACKAGE_OF_PATH, fms_plugins_of
from tunebench.experiment.ranges import RANGES
from tunebench.experiment.sharding import CONFIG_KEYS

GENERATED = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NEW_KEYS = new_argument_keys()
GROUP = {f: g for g, kind in ENTRY_GROUPS.items() for f in kind.__dataclass_fields__}

scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10),
                   st.sampled_from(["rows", "last_bit", "markov", "uniform", "auto", "uint8", "bfloat16", "1", "2",
                                    "two", "nan", "1e400", "-1", ""]))

def _nested(path: str, leaf) -> dict:
    """`a.b.c` as {a: {b: {c: leaf}}}."""
    for part in reversed(path.split(".")):
        leaf = {part: leaf}
    return leaf


# fms-acceleration's `plugins:` bodies: a registered path with a hostile leaf, an empty section, a whole file's body
plugin_paths = st.sampled_from(sorted({p.rsplit(".", 1)[0] for p in PACKAGE_OF_PATH} | set(PACKAGE_OF_PATH)))
plugins = st.one_of(st.builds(_nested, plugin_paths, st.one_of(scalar, st.just({}), st.dictionaries(
    st.sampled_from(["kernel", "from_quantized", "fused_lora", "base_layer", "x"]), scalar, max_size=2))),
    st.builds(_nested, plugin_paths, st.just({})).map(lambda body: {"plugins": body}))
value = st.one_of(scalar, st.lists(scalar, max_size=3), st.dictionaries(st.text(max_size=6), scalar, max_size=2),
                  plugins)
fsdp_config = st.one_of(value, st.dictionaries(st.sampled_from([*CONFIG_KEYS, "fsdp_version", "reshard", "x"]),
                                               st.one_of(scalar, st.lists(scalar, max_size=2)), max_size=4))


def _in_range(spec, key: str) -> bool:
    """The typed value is what its field takes: within its range, one of its Literal's words, or (fms_plugins) a
    body that names at least one plugin fms registers, or none at all."""
    typed = spec.value(GROUP[key], key)
    bounds = RANGES.get(key)
    if bounds is not None:
        return bounds.problem(typed) is None
    if key == "fms_plugins":
        body = fms_plugins_of(typed)
        return not body.enabled or (bool(body.paths) and not body.unknown_paths)
    hint = typing.get_type_hints(ENTRY_GROUPS[GROUP[key]])[key]
    return typed in typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else isinstance(typed, hint)


def test_the_keys_read_from_the_registry_are_those_added_since_27072a4():
    assert set(NEW_KEYS) >= {"loss_band_seed", "loss_band_kind", "loss_target_fraction", "loss_target_nats",
                             "synthetic_corpus", "synthetic_markov_states", "synthetic_markov_branching",
                             "bnb_4bit_quant_storage", "fms_plugins"}
    assert not set(NEW_KEYS) & {"r", "lora_alpha", "model_name_or_path", "torch_dtype"}  # 27072a4 had these


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@GENERATED
@given(arguments=st.dictionaries(st.sampled_from(NEW_KEYS), value, min_size=1, max_size=3))
def test_every_new_argument_is_typed_in_range_or_one_problem_naming_it(arguments):
    scenario = {"name": "s", "arguments": {"model_name_or_path": "preset:llama-tiny", **arguments}}
    try:
        matrix = tunebench.Matrix.from_scenarios([scenario], device="cpu")
    except tunebench.InputError as error:
        event("refused")
        assert all(p.source == "Matrix.from_scenarios" and len(str(p)) < 2000 for p in error.problems), error
        assert any(any(key in p.key for key in arguments) for p in error.problems), error.problems
    else:
        event("accepted")
        for key in arguments:
            assert all(_in_range(spec, key) for spec in matrix.experiments), (key, arguments[key])


@GENERATED
@given(fsdp=value, config=fsdp_config, mode=st.one_of(st.none(), st.sampled_from(["default", "max-autotune"])),
       compile_switch=st.one_of(st.none(), st.booleans()))
def test_fsdp_and_its_config_are_typed_or_one_problem_naming_the_nested_key(fsdp, config, mode, compile_switch):
    arguments = {"model_name_or_path": "preset:llama-tiny", "fsdp": fsdp, "fsdp_config": config,
                 "torch_compile_mode": mode, "torch_compile": compile_switch}
    arguments = {k: v for k, v in arguments.items() if v is not None}
    try:
        matrix = tunebench.Matrix.from_scenarios([{"name": "s", "arguments": arguments}], device="cpu",
                                                 num_gpus=[2])
    except tunebench.InputError as error:
        event("refused")
        assert all(p.source == "Matrix.from_scenarios" and p.key.startswith("scenario 's'") for p in error.problems)
    else:
        event("accepted")
        spec = matrix.experiments[0]
        if mode is not None:  # a mode compiles: the typed values say so (or it was refused, above)
            assert spec.value("training", "torch_compile") is True


@GENERATED
@given(counts=st.one_of(value, st.lists(st.integers(-3, 9), max_size=4)),
       matrix_counts=st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True))
def test_a_scenarios_gpu_counts_run_where_the_matrix_has_them_or_are_one_problem(counts, matrix_counts):
    scenarios = [{"name": "s", "num_gpus": counts, "arguments": {"model_name_or_path": "preset:llama-tiny"}},
                 {"name": "t", "arguments": {"model_name_or_path": "preset:llama-tiny"}}]
    try:
        matrix = tunebench.Matrix.from_scenarios(scenarios, device="cpu", num_gpus=matrix_counts)
    except tunebench.InputError as error:
        event("refused")
        assert all(p.key.endswith("num_gpus") for p in error.problems), error.problems
        return
    event("accepted")
    ran = sorted(e.num_gpus for e in matrix.experiments if e.scenario == "s")
    wanted = counts if isinstance(counts, list) else [counts] if counts is not None else matrix_counts
    assert ran == sorted(n for n in matrix_counts if n in wanted)


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@pytest.mark.parametrize("key, value", [("loss_target_fraction", math.nan), ("loss_target_nats", math.inf),
                                        ("synthetic_markov_states", 0), ("loss_band_seed", -1),
                                        ("synthetic_corpus", "zipf"), ("loss_band_kind", "bits"),
                                        ("bnb_4bit_quant_storage", "int4"), ("fms_plugins", {"peft": {}}),
                                        ("fms_plugins", {"plugins": {"training": {}}})])
def test_the_generated_cases_refusals_name_the_key(key, value):
    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios([{"name": "s", "arguments": {key: value}}], device="cpu")
    assert f"scenario 's': arguments.{key}" in [p.key for p in caught.value.problems]


@pytest.mark.parametrize("value", [[1, None], [1, 2], []])
def test_a_list_for_an_option_of_one_value_names_the_option(value):
    """A generated `loss_band_seed: [1, None]` became `--loss_band_seed 1 None` and the problem was "unrecognised
    arguments: None", naming no key (CI's hypothesis draw)."""
    with pytest.raises(tunebench.InputError) as error:
        tunebench.Matrix.from_scenarios([{"name": "s", "arguments": {"model_name_or_path": "preset:llama-tiny",
                                                                     "loss_band_seed": value}}], device="cpu")
    [problem] = error.value.problems
    assert "loss_band_seed" in problem.key and f"expected one value, got a list of {len(value)}" in problem.message
