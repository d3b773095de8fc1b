"""The FSDP setting read once from an experiment's training values, the quantized bases FSDP can shard, and the
4-bit storage dtype that lets it (issue Y: QLoRA under FSDP)."""

from __future__ import annotations

import json
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunebench.execution.scheduling import overlap_columns
from tunebench.experiment.quantization import Quantization, bnb_config, quantization_of
from tunebench.experiment.sharding import Fsdp, fsdp_of, fsdp_problems, quantized_skip_reason


def test_fsdp_words_and_config_as_transformers_reads_them():
    assert fsdp_of({}) is None
    assert fsdp_of({"fsdp": ""}) is None
    assert fsdp_of({"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 2}}) == Fsdp()
    ac = fsdp_of({"fsdp": "full_shard auto_wrap",
                  "fsdp_config": json.dumps({"version": 2, "activation_checkpointing": "true"})})
    assert ac.version == 2 and ac.activation_checkpointing and ac.label == "fsdp2"
    zero2 = fsdp_of({"fsdp": "shard_grad_op auto_wrap", "fsdp_config": {"version": 1}})
    assert (zero2.version, zero2.strategy, zero2.reshard_after_forward) == (1, "shard_grad_op", False)
    assert zero2.label == "fsdp1-shard_grad_op"
    assert fsdp_of({"fsdp": "full_shard auto_wrap offload", "fsdp_config": {"version": 1}}).offload
    assert fsdp_of({"fsdp": True}) == Fsdp()  # TrainingArguments' own value once it has read the words


def test_the_config_form_transformers_recommends_reads_as_its_words_did():
    """`fsdp: true` with the strategy, the offload and the version in fsdp_config (framework_configs.yaml now: the
    words are deprecated) is the same setting as the words were."""
    assert fsdp_of({"fsdp": True, "fsdp_config": {"version": 1, "reshard_after_forward": "shard_grad_op"}}) == \
        fsdp_of({"fsdp": "shard_grad_op auto_wrap", "fsdp_config": {"version": 1}})
    offload = fsdp_of({"fsdp": True, "fsdp_config": {"version": 1, "reshard_after_forward": "full_shard",
                                                     "cpu_offload": True}})
    assert offload == Fsdp(version=1, offload=True)
    assert fsdp_of({"fsdp": True, "fsdp_config": '{"version": 2, "reshard_after_forward": false}'}) == \
        Fsdp(reshard_after_forward=False)
    assert fsdp_of({"fsdp": False, "fsdp_config": {"version": 2}}) is None


@pytest.mark.parametrize("values, expected", [
    ({"fsdp": True, "fsdp_config": {"version": [1]}}, [("fsdp_config.version", "expected 1 or 2, got [1]")]),
    ({"fsdp": True, "fsdp_config": {"version": "two"}}, [("fsdp_config.version", 'expected 1 or 2, got "two"')]),
    ({"fsdp": True, "fsdp_config": '{"version": "x"}'}, [("fsdp_config.version", 'expected 1 or 2, got "x"')]),
    ({"fsdp": True, "fsdp_config": [1]}, [("fsdp_config", "expected a mapping, got [1]")]),
    ({"fsdp": True, "fsdp_config": {"version": 1, "reshard_after_forward": True}},
     [("fsdp_config.reshard_after_forward", "FSDP1 takes a sharding strategy, got true")]),
    ({"fsdp": True, "fsdp_config": {"reshard_after_forward": "full_shard"}},
     [("fsdp_config.reshard_after_forward", 'FSDP2 takes true or false, got "full_shard"')]),
    ({"fsdp": True, "fsdp_config": {"cpu_ofload": True}},
     [("fsdp_config.cpu_ofload", "unknown key: transformers reads no fsdp_config key of that name (it would be "
                                 "ignored)")]),
    ({"fsdp": "full_shard auto_wrap quickly"}, [("fsdp", "unknown word 'quickly'")]),
    ({"fsdp": "hybrid_shard", "fsdp_config": {"version": 2}}, [("fsdp", "hybrid_shard is FSDP1's strategy")]),
    ({"fsdp": 3}, [("fsdp", "expected true, false or transformers' words, got 3")]),
    ({"fsdp": True, "fsdp_config": {"version": 2, "fsdp_activation_checkpointing": "true", "min_num_params": 0,
                                    "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}}, []),
    ({"fsdp": "full_shard auto_wrap offload", "fsdp_config": {"version": 1, "use_orig_params": True}}, []),
    ({"fsdp": float("nan"), "fsdp_config": float("nan")}, []),  # a CSV's empty cells
])
def test_one_checker_names_every_nested_fsdp_problem(values, expected):
    assert [(key, message) for key, message, _ in fsdp_problems(values)] == expected


@given(st.dictionaries(st.one_of(st.sampled_from(["fsdp", "fsdp_config"]), st.text(max_size=6)),
                       st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                              st.text(max_size=8)),
                                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                                    max_leaves=8), max_size=3))
def test_the_fsdp_checker_and_reader_never_raise(values):
    problems = fsdp_problems(values)
    assert all(isinstance(key, str) and key.startswith("fsdp") and message and fix for key, message, fix in problems)
    fsdp_of(values)


@pytest.mark.parametrize("config, key, message", [
    ({"version": [1]}, "fsdp_config.version", "expected 1 or 2, got [1]"),
    ({"version": "two"}, "fsdp_config.version", 'expected 1 or 2, got "two"'),
])
def test_a_scenarios_fsdp_config_is_one_problem_naming_file_scenario_and_key(tmp_path, capsys, config, key, message):
    """Issue AD: `fsdp_config: {version: [1]}` raised TypeError from the dry run and Matrix.from_scenarios; `{version:
    two}` gave a bare `invalid literal for int()`."""
    import yaml

    import tunebench
    from tunebench import cli

    scenario = {"name": "s", "arguments": {"model_name_or_path": ["preset:llama-tiny"], "fsdp": True,
                                           "fsdp_config": config}}
    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios([scenario], device="cpu", num_gpus=[2])
    assert [(p.key, p.message) for p in caught.value.problems] == [(f"scenario 's': arguments.{key}", message)]
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [scenario]}))
    assert cli.main(["--scenarios_config_path", str(path), "--dry_run", "--device", "cpu", "--num_gpus_matrix", "2",
                     "--results_output_path", str(tmp_path / "out")]) == 2
    assert f"  - {path}: scenario 's': arguments.{key}: {message} (fix: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_value_of_the_wrong_type_names_the_file_and_the_scenario(tmp_path):
    """Issue AD: `tf32: 2` said "arguments: -", naming neither the file nor the scenario."""
    import tunebench

    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios([{"name": "s", "arguments": {"tf32": 2}}], device="cpu")
    (problem,) = caught.value.problems
    assert (problem.source, problem.key) == ("Matrix.from_scenarios", "scenario 's': arguments.tf32")
    assert problem.message.startswith("Truthy value expected: got 2")
    import yaml

    from tunebench import cli

    path = tmp_path / "scenarios.yaml"  # from a file, the line names it
    path.write_text(yaml.safe_dump({"scenarios": [{"name": "s", "arguments": {"model_name_or_path":
                                                                              "preset:llama-tiny", "tf32": 2}}]}))
    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_yaml(scenarios=str(path), device="cpu")
    assert [(p.source, p.key) for p in caught.value.problems] == [(str(path), "scenario 's': arguments.tf32")]
    assert cli.main(["--scenarios_config_path", str(path), "--dry_run", "--device", "cpu", "--results_output_path",
                     str(tmp_path / "out")]) == 2


@given(st.one_of(st.none(), st.text(max_size=40), st.integers(), st.lists(st.text(max_size=10), max_size=3)),
       st.one_of(st.none(), st.text(max_size=40), st.dictionaries(st.text(max_size=8), st.text(max_size=8))))
def test_fsdp_of_never_raises_on_odd_values(words, config):
    setting = fsdp_of({"fsdp": words, "fsdp_config": config})
    assert setting is None or setting.version in (1, 2) or isinstance(setting.version, int)


def _model(**values):
    base = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
            "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "auto", "torch_dtype": "bfloat16"}
    return types.SimpleNamespace(**{**base, **values})


def test_auto_storage_is_the_weights_dtype_under_fsdp_and_uint8_otherwise():
    assert quantization_of(_model()).storage == "uint8"
    assert quantization_of(_model(), sharded=True).storage == "bfloat16"
    assert quantization_of(_model(torch_dtype="float32"), sharded=True).storage == "float32"
    assert quantization_of(_model(bnb_4bit_quant_storage="uint8"), sharded=True).storage == "uint8"
    assert quantization_of(_model()).label() == "bnb-4bit-nf4-dq"  # the labels of earlier rows are unchanged
    assert quantization_of(_model(), sharded=True).label() == "bnb-4bit-nf4-dq-bfloat16-storage"


def test_the_storage_dtype_reaches_bitsandbytes_config():
    torch = pytest.importorskip("torch")
    pytest.importorskip("bitsandbytes")
    config = bnb_config(Quantization("bnb-4bit", double_quant=True, storage="bfloat16"))
    assert config.bnb_4bit_quant_storage == torch.bfloat16


FSDP1, FSDP2 = Fsdp(version=1), Fsdp(version=2)


@pytest.mark.parametrize("fsdp, quantization, refused", [
    (FSDP2, Quantization("bnb-8bit"), "8-bit"),
    (FSDP1, Quantization("bnb-8bit"), "8-bit"),
    (FSDP1, Quantization("bnb-4bit", storage="uint8"), "uint8-stored"),
    (FSDP1, Quantization("bnb-4bit", storage="float32"), "float32-stored"),
    (FSDP1, Quantization("bnb-4bit", storage="bfloat16"), None),
    (FSDP2, Quantization("bnb-4bit", storage="uint8"), None),  # runs: accelerate keeps those weights whole
    (FSDP2, Quantization("bnb-4bit", storage="bfloat16"), None),
    (None, Quantization("bnb-8bit"), None),
    (FSDP2, Quantization(), None),
])
def test_which_quantized_bases_fsdp_can_shard(fsdp, quantization, refused):
    reason = quantized_skip_reason(fsdp, quantization, "bfloat16")
    assert (reason is None) == (refused is None)
    if refused:
        assert refused in reason and ("bnb_4bit_quant_storage" in reason or "8-bit" in reason)


def test_a_row_says_which_experiments_ran_beside_it():
    intervals = {0: (0.0, 2.0), 1: (1.0, 3.0), 2: (2.0, 4.0), 3: (5.0, None)}
    ids = ["a", "b", "c", "d"]
    assert overlap_columns(intervals, 1, ids) == {"concurrent_experiments": 2, "concurrent_experiment_ids": "a;c"}
    assert overlap_columns(intervals, 3, ids) == {"concurrent_experiments": 0, "concurrent_experiment_ids": ""}


def test_a_scenario_runs_only_at_the_gpu_counts_it_lists():
    import tunebench

    scenarios = [{"name": "one", "num_gpus": [1], "arguments": {"model_name_or_path": "preset:llama-tiny"}},
                 {"name": "par", "num_gpus": 2, "arguments": {"model_name_or_path": "preset:llama-tiny"}},
                 {"name": "all", "arguments": {"model_name_or_path": "preset:llama-tiny"}}]
    frame = tunebench.Matrix.from_scenarios(scenarios, device="cpu", num_gpus=[1, 2]).frame()
    counts = frame.groupby("scenario")["num_gpus"].apply(sorted).to_dict()
    assert counts == {"one": [1], "par": [2], "all": [1, 2]}


@pytest.mark.parametrize("value", [0, -1, True, "2", [], [1, "x"], [2.5], {"a": 1}])
def test_a_bad_scenario_gpu_count_is_one_input_problem(value):
    import tunebench

    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios([{"name": "s", "num_gpus": value, "arguments": {}}], device="cpu")
    (problem,) = [p for p in caught.value.problems if p.key.endswith("num_gpus")]
    assert "GPU count" in problem.message and "num_gpus: [1]" in problem.fix


def test_fp16_under_fsdp1_with_a_fused_optimizer_is_skipped_with_the_fix():
    """torch's FSDP1 ShardedGradScaler makes found_inf one element where GradScaler makes a scalar, and the fused
    AdamW kernel takes only the scalar (the GPTQ rows of docs/evidence/fms-acceleration-h200.md failed so)."""
    import inspect

    from torch.amp import grad_scaler
    from torch.distributed.fsdp import sharded_grad_scaler

    from tunebench.experiment.sharding import fused_fp16_skip_reason

    assert "found_inf = torch.full(\n            (1,)" in inspect.getsource(sharded_grad_scaler.ShardedGradScaler)
    assert "found_inf = torch.full((), 0.0" in inspect.getsource(grad_scaler.GradScaler)
    fsdp1, fsdp2 = Fsdp(version=1), Fsdp(version=2)
    fused = {"fp16": True, "optim": "adamw_torch_fused"}
    assert "set optim: adamw_torch" in fused_fp16_skip_reason(fsdp1, fused, "cuda")
    assert fused_fp16_skip_reason(fsdp2, fused, "cuda") is None
    assert fused_fp16_skip_reason(fsdp1, {**fused, "optim": "adamw_torch"}, "cuda") is None
    assert fused_fp16_skip_reason(fsdp1, {**fused, "fp16": False, "bf16": True}, "cuda") is None
    assert fused_fp16_skip_reason(None, fused, "cuda") is None


def test_fsdp1_prefetch_is_read_as_the_trainer_passes_it():
    """fms's accelerate.yaml asks FSDP1 for BACKWARD_PRE: one more unit's parameters alive in backward, which the plan
    keeps (an H200's 2-GPU LoRA rows: −3.2 % without it, +0.007 % with it; docs/evidence/fms-acceleration-h200.md)."""
    pre = fsdp_of({"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 1, "backward_prefetch": "backward_pre",
                                                                  "forward_prefetch": "true"}})
    assert (pre.backward_prefetch, pre.forward_prefetch) == ("BACKWARD_PRE", True)
    assert fsdp_of({"fsdp": "full_shard", "fsdp_config": {"version": 1}}).backward_prefetch == "NO_PREFETCH"
    assert fsdp_of({"fsdp": "full_shard", "fsdp_config": {"backward_prefetch": "sideways"}}).backward_prefetch == \
        "NO_PREFETCH"


# framework_configs.yaml's FSDP entries as they were written before (transformers' deprecated words)
LEGACY_WORDS = {"fsdp-full-shard": "full_shard auto_wrap", "fsdp-shard-grad-op": "shard_grad_op auto_wrap",
                "fsdp2": "full_shard auto_wrap", "fsdp2-activation-checkpointing": "full_shard auto_wrap",
                "fsdp-cpu-offload": "full_shard auto_wrap offload"}


def test_the_shipped_fsdp_configs_use_the_form_transformers_does_not_deprecate(tmp_path):
    """Issue AD: transformers warned five times a run that the string form of `fsdp` is deprecated. Each shipped
    FSDP config is `fsdp: true` with fsdp_config, and gives accelerate's plugin exactly what the words gave
    (checked on 2 H200s too: FSDP1 full/grad-op/offload and FSDP2 train)."""
    import logging

    import yaml
    from transformers import TrainingArguments

    from tests.fixtures.harness import REPO

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("transformers").addHandler(handler)  # transformers' loggers do not propagate
    configs = yaml.safe_load((REPO / "framework_configs.yaml").read_text())["framework_configs"]
    sharded = {name: c["arguments"] for name, c in configs.items() if "fsdp" in (c or {}).get("arguments", {})}
    assert sorted(sharded) == sorted(LEGACY_WORDS)
    try:
        for name, arguments in sharded.items():
            assert arguments["fsdp"] is True and fsdp_problems(arguments) == [], name
            config = {k: v for k, v in arguments["fsdp_config"].items() if k not in ("reshard_after_forward",
                                                                                      "cpu_offload")}
            said.clear()
            new = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, fsdp=True,
                                    fsdp_config=dict(arguments["fsdp_config"]))
            assert not [m for m in said if "as a string is deprecated" in m], name
            old = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, fsdp=LEGACY_WORDS[name],
                                    fsdp_config=config)
            assert [m for m in said if "as a string is deprecated" in m], name  # the control: the words warn
            assert new.fsdp_plugin_args == old.fsdp_plugin_args, name
            assert fsdp_of(arguments) == fsdp_of({"fsdp": LEGACY_WORDS[name], "fsdp_config": config}), name
    finally:
        logging.getLogger("transformers").removeHandler(handler)
