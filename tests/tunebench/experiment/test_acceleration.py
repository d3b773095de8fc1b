"""The acceleration axis on CPU: quantized bases (validation, skips, the scanner's and the prediction's figures
against analytic sizes and a real bitsandbytes run), Liger's and torch.compile's checks, compile's counters."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench.experiment import acceleration
from tunebench.experiment.compile_watch import CompileEvent, CompileWatch
from tunebench.experiment.models import load_config
from tunebench.experiment.quantization import Quantization, quantization_of, skip_reason
from tunebench.planning.fake_step import StepShape, predict_step

bnb = pytest.importorskip("bitsandbytes")

QLORA = Quantization("bnb-4bit", "nf4", True, "float32")
INT8 = Quantization("bnb-8bit")


def test_labels_and_settings_from_the_model_arguments():
    from tunebench.experiment.arguments import ModelArguments

    assert quantization_of(ModelArguments()).label() == "none"
    four = ModelArguments(load_in_4bit=True, bnb_4bit_quant_type="fp4")
    assert quantization_of(four).label() == "bnb-4bit-fp4"
    assert (
        quantization_of(ModelArguments(load_in_4bit=True, bnb_4bit_use_double_quant=True)).label() == "bnb-4bit-nf4-dq"
    )
    assert quantization_of(ModelArguments(load_in_8bit=True)).label() == "bnb-8bit"


@pytest.mark.parametrize("given", [{}, {"load_in_4bit": True}, {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4",
                                   "torch_dtype": "float16"}, {"load_in_8bit": True, "llm_int8_threshold": 0.0}])
@pytest.mark.parametrize("sharded", [False, True])
def test_the_spec_values_and_the_built_arguments_give_one_setting(given, sharded):
    """quantization_of reads a spec's typed model values (only the given keys) as it reads the ModelArguments the
    child builds from them: the same setting, the dataclass's defaults where a key is absent."""
    from tunebench.experiment.arguments import ModelArguments

    assert quantization_of(given, sharded) == quantization_of(ModelArguments(**given), sharded)


@pytest.mark.parametrize("entry, key", [
    ({"model": {"load_in_4bit": True, "load_in_8bit": True}}, "load_in_8bit"),
    ({"training": {"torch_compile_mode": "fastest"}}, "torch_compile_mode"),
    ({"training": {"use_liger_kernel": True}}, "use_liger_kernel"),  # on CPU: no Triton kernel
    ({"model": {"attn_implementation": "flash_attention_3"}}, "attn_implementation"),  # flash-attn absent here
])
def test_input_problems_name_their_key(entry, key):
    """(Liger on a CPU is one problem whether liger-kernel is installed or not: no kernel, or no package.)"""
    found = acceleration.problems(entry, "cpu")
    assert [p.key for p in found] == [key]
    assert found[0].fix


def test_an_8bit_optimizer_without_bitsandbytes_is_refused_before_anything_runs(monkeypatch):
    absent = {"bitsandbytes"}
    real = acceleration.importlib.util.find_spec
    monkeypatch.setattr(acceleration.importlib.util, "find_spec", lambda name: None if name in absent else real(name))
    for optim in ("adamw_bnb_8bit", "paged_adamw_32bit", "lion_8bit"):
        assert [p.key for p in acceleration.problems({"training": {"optim": optim}}, "cuda")] == ["optim"]
    assert acceleration.problems({"training": {"optim": "adamw_torch_fused"}}, "cuda") == []


def test_valid_settings_have_no_problem():
    entry = {"model": {"load_in_4bit": True, "attn_implementation": "flex_attention"},
             "training": {"torch_compile_mode": "max-autotune-no-cudagraphs"}}
    assert acceleration.problems(entry, "cuda") == []


def test_a_quantized_base_without_lora_is_skipped_with_its_reason():
    assert skip_reason(QLORA, "lora") is None
    reason = skip_reason(QLORA, "none")
    assert "only LoRA adapters" in reason and "bnb-4bit-nf4-dq" in reason
    assert acceleration.skip_reason({"model": {"load_in_8bit": True}, "peft": {"peft_method": "prompt-tuning"}},
                                    "preset:llama-tiny").startswith("a bnb-8bit base")


def test_liger_skips_a_model_type_it_has_no_kernels_for():
    """The model types as liger-kernel 0.8.5 lists them where it is installed (it is not in CI: it pulls Triton),
    else a set with llama and without gpt_bigcode, as 0.8.5's."""
    supported = acceleration.liger_model_types() or {"llama", "mistral", "qwen2"}
    assert "llama" in supported
    assert acceleration.liger_unsupported("preset:llama-tiny", supported) is None
    kind = load_config("preset:gpt-bigcode-1b").model_type
    assert kind not in supported
    reason = acceleration.liger_unsupported("preset:gpt-bigcode-1b", supported)
    assert kind in reason and "llama" in reason
    entry = {"training": {"use_liger_kernel": True}}
    if acceleration.liger_model_types() is not None:  # the skip as the runner asks for it
        assert kind in acceleration.skip_reason(entry, "preset:gpt-bigcode-1b")


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_bad_acceleration_input_is_exit_2_before_anything_runs(tmp_path):
    options = write_inputs(tmp_path, [tiny_scenario(load_in_4bit=True, load_in_8bit=True, peft_method="lora")])
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "load_in_4bit and load_in_8bit are both true" in proc.stdout + proc.stderr
    assert not out.exists()


def _tiny_linear_numel() -> tuple[int, int]:
    """(elements of every quantized linear weight, of every other parameter) of preset:llama-tiny."""
    config = load_config("preset:llama-tiny")
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    linear = layers * (h * h * 2 + h * kv * 2 + 3 * h * i)
    other = 2 * config.vocab_size * h + layers * 2 * h + h  # embeddings, head, norms
    return linear, other


@pytest.mark.parametrize("quantization, packed_per_element", [(QLORA, 0.5), (INT8, 1.0)])
def test_prediction_of_a_quantized_base_is_analytic_where_it_is_knowable(quantization, packed_per_element):
    """Packed weights: half a byte (4-bit) or a byte (8-bit) per element; the rest float32; LoRA adapters in
    bf16 (as TRL keeps them on a quantized base); 8-bit's state is one float32 scale per output row."""
    shape = StepShape(model="preset:llama-tiny", dtype="float32", micro_batch=2, seq_len=32, padded=False,
                      peft="lora", lora_r=8, lora_alpha=16, lora_targets=("q_proj", "v_proj"),
                      quantization=quantization)
    out = predict_step(shape, round_to_cuda_blocks=False)
    linear, other = _tiny_linear_numel()
    config = load_config("preset:llama-tiny")
    kv = config.num_key_value_heads * (config.hidden_size // config.num_attention_heads)
    lora = config.num_hidden_layers * 8 * (config.hidden_size * 2 + config.hidden_size + kv)  # A and B of q, v
    assert out["params"] - out["quant_state"] == int(linear * packed_per_element) + other * 4 + lora * 2
    assert out["grads_full"] == lora * 2
    if quantization is INT8:  # one float32 scale per output row
        rows = config.num_hidden_layers * (config.hidden_size * 2 + kv * 2 + 2 * config.intermediate_size
                                           + config.hidden_size)
        assert out["quant_state"] == rows * 4
    else:
        assert out["quant_state"] > linear // 64  # at least a byte of block scale per 64 elements


@pytest.mark.slow
def test_cpu_run_of_qlora_and_int8_matches_its_prediction(tmp_path):
    """A real bitsandbytes run on CPU (the same loader path as a user's checkpoint) against the fake step:
    params (packed + quantization state), optimizer and activations exact or within a few bytes."""
    scenario = {"name": "peft", "framework_config": [None, "qlora", "lora-int8"],
                "arguments": {"model_name_or_path": ["preset:llama-tiny"], "peft_method": "lora", "r": 8,
                              "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
                              "synthetic_length_distribution": "fixed"}}  # full rows: the predicted shape
    configs = {"qlora": {"arguments": {"load_in_4bit": True, "bnb_4bit_use_double_quant": True,
                                       "bnb_4bit_compute_dtype": "float32"}},
               "lora-int8": {"arguments": {"load_in_8bit": True}}}
    options = write_inputs(tmp_path, [scenario], framework_configs=configs)
    out = tmp_path / "results"
    env = {"TUNEBENCH_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out),
                           "--plan"], capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv").set_index("framework_config")
    assert list(frame["status"]) == ["ok"] * 3
    assert (
        frame.loc["qlora", "quantization"] == "bnb-4bit-nf4-dq" and frame.loc["lora-int8", "quantization"] == "bnb-8bit"
    )
    for name in ("qlora", "lora-int8"):
        row = frame.loc[name]
        assert row["scan_mem_quant_state"] > 0 and row["scan_mem_quant_state"] == row["pred_mem_quant_state"]
        for category in ("params", "optimizer"):
            assert row[f"pred_error_{category}"] == 0.0, category
        assert abs(row["pred_error_activations"]) < 1e-5
    # the packed base is smaller than the float32 baseline's by the analytic amount
    linear, _ = _tiny_linear_numel()
    base = frame.loc["none", "scan_mem_params"]
    assert base - (frame.loc["qlora", "scan_mem_params"] - frame.loc["qlora", "scan_mem_quant_state"]) \
        == linear * 4 - linear // 2 + _lora(4) - _lora(2)
    spec = json.loads(next(out.glob("peft_*/spec.json")).read_text())
    assert spec["entry"]["model"].get("load_in_4bit") or spec["entry"]["model"].get("load_in_8bit") or \
        spec["framework_config"] == "none"  # the typed setting travels in the spec the child builds from


@pytest.mark.slow
def test_a_quantized_preset_loads_on_every_rank_of_a_multi_process_run(tmp_path):
    """Two processes share one random checkpoint of the quantized preset: transformers writes nothing from a rank
    other than 0, so the main process writes it while the other waits (on an H100 host, every multi-GPU QLoRA row
    failed reading a checkpoint folder another rank had left empty)."""
    scenario = {"name": "qlora", "framework_config": ["qlora"],
                "arguments": {"model_name_or_path": ["preset:llama-tiny"], "peft_method": "lora", "r": 8,
                              "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}}
    configs = {"qlora": {"arguments": {"load_in_4bit": True, "bnb_4bit_compute_dtype": "float32"}}}
    options = write_inputs(tmp_path, [scenario], framework_configs=configs)
    out = tmp_path / "results"
    env = {"TUNEBENCH_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out),
                           "--num_gpus_matrix", "2"], capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = pd.read_csv(out / "raw_summary.csv").iloc[0]
    assert row["status"] == "ok", row.get("error_messages")
    (checkpoint,) = (tmp_path / "cache" / "models").iterdir()
    assert (checkpoint / "config.json").is_file() and list(checkpoint.glob("*.safetensors"))


def test_a_rank_that_writes_no_checkpoint_never_leaves_an_empty_one(tmp_path, monkeypatch):
    """As rank 1 of 2 (a fake process group), transformers' save_pretrained writes nothing: the random checkpoint
    must say so, not rename an empty folder into the place every later experiment loads from."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from tunebench.experiment.models import load_model
    from tunebench.experiment.quantization import cache_root, random_checkpoint

    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path))
    config = load_config("preset:llama-tiny")
    dist.init_process_group("fake", rank=1, world_size=2, store=FakeStore())
    try:
        with pytest.raises(RuntimeError, match="was not written"):
            random_checkpoint(config, torch.float32, 0, "cpu",
                              lambda: load_model("preset:llama-tiny", "float32", init_device="cpu"))
    finally:
        dist.destroy_process_group()
    assert not [p for p in cache_root().iterdir() if not p.name.startswith(".")]  # nothing left in place


def _lora(element: int) -> int:
    config = load_config("preset:llama-tiny")
    kv = config.num_key_value_heads * (config.hidden_size // config.num_attention_heads)
    return element * config.num_hidden_layers * 8 * (config.hidden_size * 3 + kv)


def test_compile_watch_counts_compilations_by_step_and_warns_after_warm_up():
    watch = CompileWatch()
    watch.events = [CompileEvent(1, 20.0, "DYNAMO", False), CompileEvent(1, 9.0, "LAZY_BACKWARD", False),
                    CompileEvent(7, 1.5, "DYNAMO", True)]
    columns = watch.columns(warmup_steps=5)
    assert columns["compile_seconds"] == 30.5 and columns["compile_count"] == 3
    assert columns["compile_recompiles"] == 1 and columns["compile_steady_recompiles"] == 1
    assert columns["compile_last_step"] == 7 and watch.compiled_steps == {1, 7}
    assert "step(s) 7" in columns["measurement_warning"]
    watch.events = watch.events[:2]
    assert "measurement_warning" not in watch.columns(warmup_steps=5)


def test_compile_watch_sees_real_dynamo_compilations():
    watch = CompileWatch().install()
    try:
        compiled = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2, backend="eager")
        compiled(torch.randn(4, 8))
        compiled(torch.randn(4, 8))  # cached: no new compilation
        compiled(torch.randn(4, 8, dtype=torch.float64))  # a guard fails: a recompilation
    finally:
        watch.remove()
    assert len(watch.events) == 2 and [e.recompile for e in watch.events] == [False, True]
    assert all(e.seconds > 0 and e.step == 1 for e in watch.events)


def test_a_4bit_weight_counts_its_logical_elements_in_the_model_flops(tmp_path, monkeypatch):
    """MFU of a quantized base: a packed 4-bit weight (numel n/2) does the matmul work of n elements, so the
    model FLOPs of QLoRA equal LoRA's on the same architecture."""
    from peft import LoraConfig, get_peft_model

    from tunebench.experiment.flops import matmul_parameter_counts
    from tunebench.experiment.models import load_model

    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path))
    lora = LoraConfig(r=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    plain = get_peft_model(load_model("preset:llama-tiny", "float32", seed=1), lora)
    packed = get_peft_model(load_model("preset:llama-tiny", "float32", quantization=QLORA, seed=1), lora)
    assert matmul_parameter_counts(packed) == matmul_parameter_counts(plain)


def test_plan_notes_say_how_a_row_was_sized_and_what_it_does_not_model():
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed
    from tunebench.planning.plan_matrix import unmodelled

    def spec(**arguments):
        return typed(
            [
                ExperimentSpec(
                    "s",
                    FrameworkConfig("fc"),
                    1,
                    "cpu",
                    {"model_name_or_path": "preset:llama-tiny", "peft_method": "lora", **arguments},
                )
            ]
        )[0]

    assert unmodelled(spec()) is None
    four = unmodelled(spec(load_in_4bit=True))
    assert four.startswith("quantized base sized by fake tensors") and "not modelled" not in four
    eight = unmodelled(spec(load_in_8bit=True, torch_compile=True), "not counted: no room")
    assert "outlier columns" in eight and "lower bound" in eight and "torch.compile" in eight
    assert eight.startswith("quantized base")
    counted = unmodelled(spec(load_in_8bit=True), "12 outlier columns over 7 8-bit layers")
    assert counted.endswith("8-bit outlier columns kept for backward: 12 outlier columns over 7 8-bit layers")
    assert "not modelled" not in counted


def test_plan_notes_fused_mixer_kernels_a_run_would_take(tmp_path, monkeypatch):
    """A Mamba-2 row is predicted with transformers' torch path; where causal_conv1d / mamba_ssm are installed the
    run takes their kernels instead, and the note says so (a stand-in package: CPU machines lack the real one)."""
    import json

    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed
    from tunebench.planning.plan_matrix import unmodelled

    model = tmp_path / "mamba2"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(dict(
        model_type="mamba2", hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=512, expand=2,
        conv_kernel=4, num_heads=8, head_dim=16, n_groups=1, chunk_size=16, pad_token_id=0)))
    spec = typed([ExperimentSpec("s", FrameworkConfig("fc"), 1, "cpu", {"model_name_or_path": str(model)})])[0]
    assert unmodelled(spec) is None
    (tmp_path / "site" / "causal_conv1d").mkdir(parents=True)
    (tmp_path / "site" / "causal_conv1d" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    note = unmodelled(spec)
    assert note.startswith("not modelled: the fused mixer kernels installed here (causal_conv1d)"), note
