"""8-bit outlier columns in the plan: the CPU count against bitsandbytes' own split, the fake step's memory for a
count against the analytic size, and the plan's cache and fallback (tunebench.planning.int8_outliers)."""

import dataclasses

import pytest
import torch

from tunebench.experiment.models import load_config, load_model
from tunebench.experiment.quantization import Quantization
from tunebench.planning.fake_step import StepShape, predict_step
from tunebench.planning.int8_outliers import NotCalibrated, OutlierColumns, converted_layers, count_columns
from tunebench.planning.peak_rules import rounded

bnb = pytest.importorskip("bitsandbytes")

INT8 = Quantization("bnb-8bit")


def test_the_count_is_bitsandbytes_own_split_of_each_layers_input():
    """Every converted layer's input, captured from a real forward, split by bitsandbytes' own kernel at the same
    threshold: its outlier columns are exactly the count (the threshold cuts through the values, so counts are
    neither none nor all)."""
    torch.manual_seed(0)
    model = load_model("preset:llama-tiny", "float32")
    layers, weights = converted_layers("preset:llama-tiny", "float32", INT8)
    assert "lm_head" not in layers and len(layers) == 7 * load_config("preset:llama-tiny").num_hidden_layers
    assert weights == sum(p.numel() * 4 for p in model.parameters())
    inputs, modules = {}, dict(model.named_modules())
    handles = [modules[name].register_forward_pre_hook(
        lambda module, args, name=name: inputs.setdefault(name, args[0].detach().clone())) for name in layers]
    ids = torch.randint(3, model.config.vocab_size, (2, 48))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        model(**batch, use_cache=False)
    for handle in handles:
        handle.remove()
    threshold = 2.5  # llama-tiny's normed inputs peak near 2-3.5 a column: the cut falls among them
    counts = count_columns(model, layers, batch, threshold)
    for name in layers:
        flat = inputs[name].reshape(-1, inputs[name].shape[-1]).to(torch.float16)
        _, _, outlier_cols = torch.ops.bitsandbytes.int8_vectorwise_quant(flat, threshold)
        assert counts[name] == (0 if outlier_cols is None else outlier_cols.numel()), name
    assert any(0 < counts[name] < inputs[name].shape[-1] for name in layers)


def test_a_layer_the_model_lacks_is_not_counted_as_none():
    model = load_model("preset:llama-tiny", "float32")
    with pytest.raises(NotCalibrated, match="no layer"):
        count_columns(model, ["model.layers.0.mlp.nonexistent"], {"input_ids": torch.ones(1, 4, dtype=torch.long)}, 6.0)


def test_the_fake_step_keeps_the_counted_columns_until_backward():
    """On a CUDA target the split's kept columns (tokens × columns in the weights' dtype, one 512-byte-rounded
    block each) are alive at the step's peak, the end of the forward: the peak grows by exactly their sum."""
    from tunebench.planning.attention_kernels import HOPPER

    config = load_config("preset:llama-tiny")
    batch, seq = 2, 64
    shape = StepShape(model="preset:llama-tiny", dtype="bfloat16", micro_batch=batch, seq_len=seq, padded=False,
                      peft="lora", lora_targets=("q_proj", "v_proj", "o_proj"), quantization=INT8)
    layers, _ = converted_layers("preset:llama-tiny", "bfloat16", INT8)
    down = [name for name in layers if name.endswith("down_proj")]
    columns = 37
    counted = dataclasses.replace(shape, int8_outliers=OutlierColumns(
        tuple((name, columns if name in down else 0) for name in layers), batch * seq))
    none = predict_step(shape, round_to_cuda_blocks=True, gpu_arch=HOPPER)
    kept = predict_step(counted, round_to_cuda_blocks=True, gpu_arch=HOPPER)
    assert len(down) == config.num_hidden_layers
    assert kept["peak"] - none["peak"] == len(down) * rounded(batch * seq * columns * 2, 512)
    assert kept["params"] == none["params"] and kept["activations"] == none["activations"]


def _experiment(tmp_path, **arguments):
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed

    values = {"model_name_or_path": "preset:llama-tiny", "peft_method": "lora", "load_in_8bit": True,
              "per_device_train_batch_size": 2, "max_seq_len": 32, "synthetic_num_samples": 8,
              "synthetic_length_distribution": "fixed",
              "torch_dtype": "float32", **arguments}
    # a GPU row planned on this CPU host
    return typed([ExperimentSpec("s", FrameworkConfig("lora-int8"), 1, "cuda", values)])[0]


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_the_plan_counts_once_then_reads_its_cache_and_says_so(tmp_path, monkeypatch):
    from tunebench.planning import int8_outliers
    from tunebench.planning.plan_matrix import unmodelled, with_outlier_columns
    from tunebench.planning.predict import shape_and_sharding

    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path / "cache"))
    experiment = _experiment(tmp_path)
    shape, _ = shape_and_sharding(experiment)
    counted, said = with_outlier_columns(experiment, shape)
    assert counted.int8_outliers is not None and counted.int8_outliers.tokens == 2 * 32
    assert len(counted.int8_outliers.columns) == 7 * load_config("preset:llama-tiny").num_hidden_layers
    assert said.startswith(f"{counted.int8_outliers.total():,} outlier columns over")
    note = unmodelled(experiment, said)
    assert "8-bit outlier columns kept for backward" in note and "lower bound" not in note

    def no_forward(*args, **kwargs):
        raise AssertionError("measured again although cached")

    monkeypatch.setattr(int8_outliers, "_measure", no_forward)
    again, _ = with_outlier_columns(experiment, shape)
    assert again.int8_outliers == counted.int8_outliers
    # A CPU row or a threshold of 0 splits nothing off: nothing is counted.
    off = _experiment(tmp_path, llm_int8_threshold=0.0)
    assert with_outlier_columns(off, shape_and_sharding(off)[0])[1] is None


def test_a_host_without_room_for_the_forward_gets_a_lower_bound_and_the_matrix_goes_on(tmp_path, monkeypatch):
    import json

    from tunebench.planning import int8_outliers
    from tunebench.planning.plan_matrix import plan_experiments

    monkeypatch.setattr(int8_outliers, "_available_bytes", lambda: 1024)
    (tmp_path / "request.json").write_text(json.dumps({"gpu": False, "weights": 4096}))
    torch.save({"input_ids": torch.ones(1, 2, dtype=torch.long)}, tmp_path / "batch.pt")
    problem = int8_outliers._count_here(tmp_path)["problem"]
    assert problem.startswith("the weights (0.0 GiB) fit neither a GPU here nor this host's available memory")

    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path / "cache"))

    def no_room(request, batch):
        raise NotCalibrated(problem)

    monkeypatch.setattr(int8_outliers, "_measure", no_room)
    experiment = _experiment(tmp_path)
    row = plan_experiments([experiment], capacity=80 * 1024**3)[experiment.experiment_id]
    assert row["pred_mem_peak"] > 0
    assert "not counted: the weights" in row["pred_note"] and "lower bound" in row["pred_note"]
    assert not (tmp_path / "cache" / "int8-outliers").exists()


def test_the_counting_child_dies_with_its_parent_whatever_stops_it(tmp_path):
    """SIGKILL to the harness (no handler runs): the child that counts outlier columns is ended by the kernel."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", f"""
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "import os, sys, time; from tunebench.planning.int8_outliers import die_with_parent; "
    "die_with_parent(int(sys.argv[1])); open(sys.argv[2], 'w').write(str(os.getpid())); time.sleep(120)",
    str(os.getpid()), {str(pid_file)!r}])
child.wait()
"""])
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    child = int(pid_file.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return  # dead, waiting for an init that reaps slowly
        except FileNotFoundError:
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the child outlived its parent")
