"""Memory prediction under fake tensors (issue H): exact analytic sizes, CPU activations against the scanner,
no real weights, bad options, and --skip_predicted_oom.

Reached through the modules it calls (the fake step's model, quantized bases, contexts and categories):
tunebench/planning/fake_model.py, tunebench/planning/quantized.py, tunebench/planning/step_contexts.py,
tunebench/planning/step_categories.py."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench import cli
from tunebench.planning.fake_step import StepShape, predict_step


def analytic(model_name: str, lora_targets=None, r=8):
    """Parameter count of a preset and of its LoRA adapters, from the config alone."""
    from tunebench.experiment.models import load_config

    c = load_config(model_name)
    kv = c.num_key_value_heads * (c.hidden_size // c.num_attention_heads)
    per_layer = 2 * c.hidden_size * c.hidden_size + 2 * c.hidden_size * kv + 3 * c.hidden_size * c.intermediate_size
    per_layer += 2 * c.hidden_size  # the two RMSNorms
    total = c.num_hidden_layers * per_layer + c.vocab_size * c.hidden_size * (1 if c.tie_word_embeddings else 2)
    total += c.hidden_size  # final norm
    out_dims = {"q_proj": c.hidden_size, "v_proj": kv, "k_proj": kv, "o_proj": c.hidden_size}
    lora = c.num_hidden_layers * sum(r * (c.hidden_size + out_dims[t]) for t in (lora_targets or []))
    return total, lora


def test_params_grads_optimizer_equal_the_analytic_sizes():
    total, _ = analytic("preset:llama-small")
    full = predict_step(StepShape("preset:llama-small", "float32", 2, 64, False), round_to_cuda_blocks=False)
    assert full["params"] == 4 * total
    # AdamW: two fp32 states per parameter and one fp32 `step` per parameter tensor (4 layers × 9 + 2 + 1 = 39)
    assert full["optimizer"] == 8 * total + 4 * 39
    accum = predict_step(StepShape("preset:llama-small", "float32", 2, 64, False, grad_accum=2),
                         round_to_cuda_blocks=False)
    assert accum["grads"] == 4 * total  # with accumulation the peak micro-batch holds every gradient
    base, lora = analytic("preset:llama-small", ["q_proj", "v_proj"])
    adapted = predict_step(StepShape("preset:llama-small", "float32", 2, 64, False, grad_accum=2, peft="lora",
                                     lora_targets=("q_proj", "v_proj")), round_to_cuda_blocks=False)
    assert adapted["params"] == 4 * (base + lora) and adapted["grads"] == 4 * lora
    assert adapted["optimizer"] == 8 * lora + 4 * (4 * 2 * 2)  # + a step scalar per LoRA A/B tensor


@pytest.mark.parametrize("extra", [{}, {"peft": "lora", "checkpointing": True, "grad_accum": 2}])
def test_peak_only_tracker_gives_memtrackers_own_answer(monkeypatch, extra):
    """The fast tracker drops only MemTracker's per-module peaks: every predicted byte is unchanged."""
    from tunebench.planning import fake_step

    shape = StepShape("preset:llama-tiny", "float32", 2, 32, False, **extra)
    fast = predict_step(shape)
    monkeypatch.setattr(fake_step, "peak_only", lambda tracker_class: tracker_class)
    assert predict_step(shape) == fast


def test_cuda_sizes_are_counted_in_allocator_blocks():
    exact = predict_step(StepShape("preset:llama-tiny", "float32", 2, 32, False), round_to_cuda_blocks=False)
    blocks = predict_step(StepShape("preset:llama-tiny", "float32", 2, 32, False), round_to_cuda_blocks=True)
    from tunebench.experiment.models import load_model

    def padding(nbytes: int) -> int:
        return -(-nbytes // 512) * 512 - nbytes

    # per parameter tensor: exp_avg and exp_avg_sq rounded up to 512 B blocks, and a 4 B step scalar → 512 B
    expected = sum(
        2 * padding(4 * p.numel()) + padding(4) for p in load_model("preset:llama-tiny", "float32").parameters()
    )
    assert blocks["optimizer"] - exact["optimizer"] == expected > 21 * 508
    assert all(blocks[k] >= exact[k] for k in exact)


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_predicting_a_1b_model_allocates_no_real_weights():
    # The peak RSS of this process's own memory (VmHWM): ru_maxrss would carry over the pytest parent's peak,
    # which the kernel keeps across the fork and exec (1.29 GB in a CI run late in the suite).
    code = (f"import re, sys; sys.path.insert(0, {str(REPO)!r});"
            "from tunebench.planning.fake_step import StepShape, predict_step;"
            "r = predict_step(StepShape('preset:llama-3.2-1b', 'bfloat16', 1, 128, False));"
            "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1);"
            "print(r['params'], int(hwm) * 1024)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    params, rss = map(int, out.stdout.split()[-2:])
    assert params == 2 * 1_235_814_400  # the real 1B: 2.47 GB of bf16 weights ...
    assert rss < 1.2 * 1024**3  # ... never materialised (the process stays far below them)


@pytest.mark.parametrize("extra, message", [(["--plan_device", "a toaster"], "not a size"),
                                            (["--plan_device", "3 furlongs"], "not a size")])
def test_bad_plan_options_exit_2(tmp_path, capsys, extra, message):
    options = write_inputs(tmp_path, [tiny_scenario()])
    assert cli.main(["plan", *options, *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_cpu_run_with_plan_predicts_activations_and_skips_the_oversized_experiment(tmp_path):
    big = tiny_scenario("huge", model_name_or_path=["preset:llama-small"], per_device_train_batch_size=64,
                        max_seq_len=2048, synthetic_num_samples=128)
    scenarios = [tiny_scenario("full", synthetic_length_distribution="fixed"),
                 tiny_scenario("lora", peft_method="lora", synthetic_length_distribution="fixed"),
                 tiny_scenario("gc", gradient_checkpointing=True, synthetic_length_distribution="fixed"), big]
    options = write_inputs(tmp_path, scenarios)
    out = tmp_path / "results"
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out),
                           "--skip_predicted_oom", "--plan_device", "1GiB"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv").set_index("scenario")
    assert frame.loc["huge", "status"] == "skipped" and "predicted OOM" in frame.loc["huge", "error_messages"]
    assert (frame.drop(index="huge")["status"] == "ok").all()  # exactly the oversized one was skipped
    assert frame.loc["huge", "pred_fits"] in (False, "False") and frame.loc["huge", "pred_mem_peak"] > 1024**3
    for name in ("full", "lora", "gc"):
        row = frame.loc[name]
        assert (
            row["pred_mem_params"] == row["scan_mem_params"] and row["pred_mem_optimizer"] == row["scan_mem_optimizer"]
        )
        assert abs(row["pred_error_activations"]) < 0.05, (
            name,
            row["pred_mem_activations"],
            row["scan_mem_activations"],
        )
    assert frame.loc["full", "pred_fits"] in (True, "True")
    from tunebench.experiment.entry_parser import entry_parser
    from tunebench.results.columns.lookup import undeclared

    assert undeclared(frame.reset_index().columns, entry_parser().known_keys()) == []


def test_packed_rows_say_why_their_activations_do_not_compare():
    from tunebench.planning.prediction_errors import error_columns

    row = {"pred_mem_params": 100, "scan_mem_params": 100, "pred_mem_activations": 400, "scan_mem_activations": 350,
           "pred_mem_temporaries": 50, "scan_mem_temporaries": 45, "pred_mem_peak": 1000,
           "mem_peak_torch_max_allocated_bytes": 998, "per_device_train_batch_size": 4, "max_seq_len": 1024,
           "scan_tokens": 3871, "scan_micro_batches": 1}
    fixed = error_columns({**row, "packing": False, "padding_free": False})
    assert fixed["pred_error_activations"] == 400 / 350 - 1 and "pred_note" not in fixed
    packed = error_columns({**row, "packing": True, "padding_free": "True"})
    assert packed["pred_error_activations"] is None and packed["pred_error_temporaries"] is None
    assert packed["pred_error_params"] == 0 and packed["pred_error_peak"] == 1000 / 998 - 1
    assert "3871" in packed["pred_note"] and "4096" in packed["pred_note"]
    full = error_columns({**row, "packing": True, "padding_free": True, "scan_tokens": 4096})
    assert full["pred_error_activations"] == 400 / 350 - 1 and "pred_note" not in full


def test_gpu_attention_casts_float32_inputs_as_cudas_autocast_does():
    """CUDA's autocast runs SDPA in the autocast dtype (its lower-precision list), whatever dtype the queries come
    in: the GPU stand-in returns, and keeps for backward, bf16 tensors for float32 inputs under bf16 autocast,
    and leaves them alone without autocast."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tunebench.planning.attention_kernels import HOPPER, gpu_attention

    with FakeTensorMode():
        query = torch.empty(2, 4, 128, 64, requires_grad=True)
        key = torch.empty(2, 4, 128, 64, requires_grad=True)  # no grouped heads: float32 takes a fused kernel too
        for autocast, expected in ((True, torch.bfloat16), (False, torch.float32)):
            chosen: list[str] = []
            with gpu_attention(HOPPER, chosen), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = F.scaled_dot_product_attention(query, key, key, is_causal=True)
            assert out.dtype == expected
            assert chosen[0] in ("cudnn", "efficient")  # a fused kernel of the stand-in: its saved tensors are ours
            assert {t.dtype for t in out.grad_fn.saved_tensors[:4]} == {expected}  # queries, keys, values, output


def test_an_unquantized_model_plans_without_bitsandbytes(monkeypatch):
    """bitsandbytes is an extra: a GPU host without it predicted nothing at all (every row "no module named
    bitsandbytes") until the fake step asked for it only for quantized weights."""
    import sys

    from tunebench.planning.fake_step import StepShape, predict_step

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # importing it now raises ModuleNotFoundError
    shape = StepShape("preset:llama-tiny", "bfloat16", 2, 64, padded=False, autocast_bf16=True)
    assert predict_step(shape, gpu_arch=90)["peak"] > 0


def test_zero_gradients_at_the_peak_are_explained_under_the_plan_table():
    """Issue W2: `plan` showed 0 GiB of gradients for full fine-tuning (right: their value at the peak, before
    backward makes this step's first gradient), without a word; a note now says so under the table."""
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed
    from tunebench.planning.plan_matrix import plan_experiments, table_notes

    spec = typed([ExperimentSpec("full", FrameworkConfig("none"), 1, "cuda", {
        "model_name_or_path": "preset:llama-tiny", "per_device_train_batch_size": 8, "max_seq_len": 128})])[0]
    found = plan_experiments([spec], 80 * 2**30, device_name="80GiB")
    assert found[spec.experiment_id]["pred_mem_grads"] == 0 and found[spec.experiment_id]["pred_mem_params"] > 0
    (note,) = table_notes([spec], found)
    assert note.startswith(f"grads 0 GiB (1 row(s), e.g. {spec.folder_name}): every column is its size at the step's "
                           "peak, which comes before backward makes this step's first gradient")
    on_cpu = {spec.experiment_id: {**found[spec.experiment_id], "pred_mem_grads": 1024}}
    assert table_notes([spec], on_cpu) == []
