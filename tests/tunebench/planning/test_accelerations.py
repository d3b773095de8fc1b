"""torch.compile, Liger and flex attention memory, modelled from what each saves, against truths a CPU has: a real
compiled CPU step (the c10 allocator's own records), AOTAutograd's partition of torch's flex-attention op, Liger's
chunk arithmetic, and the peaks measured on an H100 (docs/evidence/acceleration-h100/raw_summary.csv)."""

import math
import os

import pandas as pd
import pytest
import torch

from tests.fixtures.harness import REPO
from tunebench.planning.fake_step import StepShape, predict_step

H100_ROWS = REPO / "docs" / "evidence" / "acceleration-h100" / "raw_summary.csv"
CUBLAS = 68_357_632  # pred_mem_other of one CUDA process (planning.predict.CUBLAS_WORKSPACES)
LORA = {"peft": "lora", "lora_r": 16, "lora_alpha": 32, "lora_targets": ("q_proj", "k_proj", "v_proj", "o_proj")}
# The compiled rows of the same H100 evidence take a fake compilation of a 1B or 8B each (1-4 min): they are
# replanned by the commands of docs/evidence/acceleration-memory-h100.md, not in this suite; one of them, the
# max-autotune qwen3 row, is a test here that TUNEBENCH_REPLAN_EVIDENCE=1 turns on.


def _real_compiled_step(batch: int, seq: int) -> tuple[int, int]:
    """(peak over what existed before, what existed before) of one compiled CPU training step after its compiling
    step, from the allocator's records (the torch profiler's memory events: every c10 allocation and free,
    inductor's buffers included, which no dispatch mode sees)."""
    from transformers import AutoModelForCausalLM

    from tunebench.experiment.models import load_config
    from tunebench.planning.compiled_step import _causal_mask_kept

    torch.manual_seed(0)
    config = load_config("preset:llama-tiny")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5, fused=True)
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    compiled = torch.compile(model)
    ids = torch.randint(3, config.vocab_size, (batch, seq))

    def step():
        loss = compiled(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        del loss
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with _causal_mask_kept():
        step()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
    records = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    now = peak = 0
    for _, change in records:
        now += change
        peak = max(peak, now)
    assert now == 0  # the step gave back all it took
    before = sum(p.untyped_storage().nbytes() for p in model.parameters())
    before += sum(
        t.untyped_storage().nbytes() for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)
    )
    return peak, before


@pytest.mark.slow
def test_a_compiled_cpu_step_is_planned_to_the_byte():
    """The plan (dynamo, AOTAutograd's partition, inductor's C++ scheduling, its wrapper replayed on fake tensors)
    against the same compiled step run for real on this CPU."""
    peak, before = _real_compiled_step(2, 64)
    planned = predict_step(StepShape("preset:llama-tiny", "float32", 2, 64, False, compile_mode="default"),
                           round_to_cuda_blocks=False, gpu_arch=None)
    assert planned["params"] + planned["optimizer"] == before
    over = planned["peak"] - planned["params"] - planned["optimizer"] - planned["buffers"]
    assert abs(over - peak) <= 64, (over, peak)  # measured: 4 bytes apart of 1.81 MB
    eager = predict_step(StepShape("preset:llama-tiny", "float32", 2, 64, False), round_to_cuda_blocks=False)
    assert planned["peak"] < eager["peak"]  # the compiled step keeps less than the eager one


def test_flex_attention_saves_what_aot_autograds_partition_of_torchs_op_saves():
    """The stand-in's saved tensors against the forward outputs the min-cut partitioner keeps for backward when it
    traces torch's own flex-attention op (queries, keys, values, the block mask's tensors, output, log-sum-exp;
    not the row maxima) on a grouped-query shape."""
    from functorch.compile import aot_function, make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._higher_order_ops.flex_attention import flex_attention as flex_op
    from torch.nn.attention.flex_attention import _identity, create_block_mask

    from tunebench.planning.kernel_ops import flex_stand_in

    batch, heads, kv_heads, length, dim = 2, 8, 2, 256, 64
    mask = create_block_mask(lambda b, h, q, k: q >= k, batch, None, length, length, device="cpu")
    parts = mask.as_tuple()
    at = [i for i, p in enumerate(parts) if isinstance(p, torch.Tensor)]
    partitioned = []

    def forward_graph(graph, inputs):
        outputs = [n for n in graph.graph.nodes if n.op == "output"][0].args[0]
        partitioned.extend((tuple(a.meta["val"].shape), a.meta["val"].dtype) for a in outputs[1:])
        return make_boxed_func(graph)

    def attention(q, k, v, *tensors):
        rebuilt = list(parts)
        for i, tensor in zip(at, tensors, strict=True):
            rebuilt[i] = tensor
        return flex_op(q, k, v, _identity, tuple(rebuilt), 0.125, {"OUTPUT_LOGSUMEXP": True}, (), ())[0]

    q = torch.randn(batch, heads, length, dim, requires_grad=True)
    k, v = (torch.randn(batch, kv_heads, length, dim, requires_grad=True) for _ in range(2))
    aot_function(attention, forward_graph, lambda graph, inputs: make_boxed_func(graph),
                 partition_fn=min_cut_rematerialization_partition)(q, k, v, *[parts[i] for i in at])
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append((tuple(t.shape), t.dtype)) or t, lambda t: t):
        flex_stand_in(q, k, v, block_mask=mask)
    assert sorted(kept, key=str) == sorted(partitioned, key=str)
    assert ((batch, heads, length), torch.float32) in kept and len(kept) == 5 + len(at)


@pytest.mark.parametrize("tokens, hidden, vocab, chunk", [
    (4096 * 4, 4096, 32000, 2048),  # Liger's own worked example (ops/fused_linear_cross_entropy.py)
    (8 * 1024, 2048, 128256, 256),  # llama-3.2-1b at 8 x 1024: ceil(128256 / 2048) = 63, 8192 / 63 -> 131 -> 256
    (4 * 1024, 4096, 128256, 128),  # llama-3.1-8b at 4 x 1024: 32, 4096 / 32 = 128
    (100, 4096, 1000, 100),  # a budget that holds every row: one chunk, never more rows than there are
])
def test_liger_fused_cross_entropy_chunks_as_liger_does(tokens, hidden, vocab, chunk):
    from tunebench.planning.liger_kernels import flce_chunk_size

    assert flce_chunk_size(tokens, hidden, vocab) == chunk
    factor = math.ceil(vocab / hidden)
    assert chunk == min(2 ** math.ceil(math.log2(math.ceil(tokens / factor))), tokens)


def test_trl_turns_ligers_fused_cross_entropy_off_so_the_plan_keeps_the_logits():
    from tunebench.planning.liger_kernels import fused_linear_cross_entropy_applied

    # TRL 1.x: liger_kernel_config fused_linear_cross_entropy False
    assert fused_linear_cross_entropy_applied() is False


def _measured(scenario: str, framework: str) -> int:
    rows = pd.read_csv(H100_ROWS)
    row = rows[(rows["scenario"] == scenario) & (rows["framework_config"] == framework)].iloc[0]
    assert row["gpu_name"] == "NVIDIA H100 80GB HBM3"
    return int(row["mem_peak_torch_max_allocated_bytes"])


@pytest.mark.slow
@pytest.mark.parametrize("scenario, framework, shape", [
    ("full-1b", "liger-kernels", dict(liger=True)),
    ("lora-1b", "liger-kernels", dict(liger=True, **LORA)),
    ("attention-1b", "attn-flex", dict(attn_implementation="flex_attention", padded=True)),
])
def test_liger_and_flex_plans_hold_the_h100s_peaks(scenario, framework, shape):
    """Planned here, measured on an H100 (whole-run max_memory_allocated, batch 8 x 1024): Liger's kernels and
    flex attention as they allocate, to 0.01 %."""
    padded = shape.pop("padded", False)
    step = predict_step(StepShape("preset:llama-3.2-1b", "bfloat16", 8, 1024, padded, autocast_bf16=True, **shape),
                        True, 90)
    measured = _measured(scenario, framework)
    assert abs((step["peak"] + CUBLAS) / measured - 1) < 1e-4, (step["peak"] + CUBLAS, measured)


def test_decompose_k_partial_sums_as_inductor_offers_them():
    """max-autotune's decompose-K candidate for mm(a, b) holds S x M x N float32 partial sums while it is benchmarked,
    S its largest split, and is offered only when K >= decompose_k_threshold x M and x N. qwen3-1.7b's LM-head input
    gradient at 4 x 1024 tokens ([4096, 151936] @ [151936, 2048]): the 1 024 MiB block at that H100 run's peak
    (allocator history; S = 32: 151 936 = 2^7 x 1 187, K / S stays >= 128 and S <= K / M = 37)."""
    from torch._inductor import config

    from tunebench.planning.compiled_step import split_k_partials

    assert split_k_partials((4096, 151936), (151936, 2048)) == 1024 * 2**20
    assert split_k_partials((8192, 128256), (128256, 2048)) == 0  # llama-3.2-1b at 8 x 1024: K < 32 x M
    # at 2 x 1024 it is: 128 256 = 2^8 x 3 x 167, splits up to K / M = 62 keeping K / S >= 128, the largest 48
    assert split_k_partials((2048, 128256), (128256, 2048)) == 48 * 2048 * 2048 * 4
    with config.patch({"triton.decompose_k_threshold": 64}):
        assert split_k_partials((4096, 151936), (151936, 2048)) == 0


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_max_autotune_plans_step_1s_autotuning_above_the_steady_step():
    """In a fresh interpreter: in CI's shared worker, after other compile plans, the autotune excess came out
    -287 232 bytes (order-dependent, as test_compile_bounds' was; cause not found); the rule is checked where no
    earlier test's inductor state can reach it."""
    import subprocess
    import sys

    from tests.fixtures.harness import REPO

    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); "
            "from tests.tunebench.planning.test_accelerations import _autotune_excess_rule; _autotune_excess_rule()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]


def _autotune_excess_rule():
    """A max-autotune row is the default mode's step until step 1's autotuning holds more: then its peak is that,
    the excess in temporaries, and its bound adds the measured margin of that model."""
    from tunebench.planning.accelerations import AUTOTUNE_UNDER, COMPILE_UNDER
    from tunebench.planning.predict import Sharding, predict

    rows = {mode: predict(StepShape("preset:llama-tiny", "bfloat16", 4, 64, False, autocast_bf16=True,
                                    compile_mode=mode, **LORA), Sharding(), cuda=True, gpu_arch=90)
            for mode in ("default", "max-autotune-no-cudagraphs")}
    default, autotune = rows["default"], rows["max-autotune-no-cudagraphs"]
    for name in ("params", "grads", "optimizer", "activations", "other"):
        assert autotune[f"pred_mem_{name}"] == default[f"pred_mem_{name}"]
    excess = autotune["pred_mem_peak"] - default["pred_mem_peak"]
    assert excess > 0  # a tiny model's LM head: its benchmark's logits-sized example input outweighs the step's
    assert autotune["pred_mem_temporaries"] - default["pred_mem_temporaries"] == excess
    assert autotune["pred_mem_bound_extra"] == int(autotune["pred_mem_peak"] * (COMPILE_UNDER + AUTOTUNE_UNDER))
    assert default["pred_mem_bound_extra"] == int(default["pred_mem_peak"] * COMPILE_UNDER)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TUNEBENCH_REPLAN_EVIDENCE"), reason="replans an H100 evidence row: a fake "
                    "compile of a 1.7B, ~80 s on 2 cores (TUNEBENCH_REPLAN_EVIDENCE=1 runs it)")
def test_max_autotunes_step_1_is_planned_to_the_h100s_peak():
    """qwen3-1.7b (no preset) LoRA at 4 x 1024 under max-autotune-no-cudagraphs, planned here, measured on an H100
    (whole-run max_memory_allocated, docs/evidence/acceleration-memory-h100/measured/am-b4-h100.tgz): the peak is
    step 1's autotuning of the LM head's input gradient (float32 logits tangent, decompose-K partial sums)."""
    import io
    import tarfile

    from tests.fixtures.harness import REPO as repo
    from tunebench.planning.predict import Sharding, predict

    with tarfile.open(repo / "docs/evidence/acceleration-memory-h100/measured/am-b4-h100.tgz") as tar:
        rows = pd.read_csv(io.BytesIO(tar.extractfile("am/b4/raw_summary.csv").read()))
    # the run recorded the config folder where it was then (scripts/gpu/configs/, now docs/evidence/common/configs/)
    row = rows[rows["model_name_or_path"] == "scripts/gpu/configs/qwen3-1.7b"].iloc[0]
    assert row["gpu_name"] == "NVIDIA H100 80GB HBM3"
    measured = int(row["mem_peak_torch_max_allocated_bytes"])
    shape = StepShape(str(repo / "docs/evidence/common/configs/qwen3-1.7b"), "bfloat16", 4, 1024, False,
                      autocast_bf16=True, compile_mode="max-autotune-no-cudagraphs", **LORA)
    planned = predict(shape, Sharding(), cuda=True, gpu_arch=90)["pred_mem_peak"]
    assert abs(planned / measured - 1) < 0.01, (planned, measured)


def test_the_evidence_sweeps_run_the_fit_maps_edge_and_judge_it(tmp_path):
    """docs/evidence/acceleration-memory-h100/acceleration_memory_doc.py: each fit-map row becomes two runs (its
    largest micro-batch and the next), and a sweep is right only when the largest that ran is the map's and the next
    ran out of memory."""
    import yaml

    from tests.fixtures.harness import EVIDENCE, load_script

    evidence = EVIDENCE / "acceleration-memory-h100"
    doc = load_script(evidence / "acceleration_memory_doc.py")
    fit_map = tmp_path / "fit_map.csv"
    pd.DataFrame([{"model_name_or_path": "preset:llama-tiny", "framework_config": "torch-compile",
                   "max_micro_batch": 7, "pred_note": None}]).to_csv(fit_map, index=False)
    out = tmp_path / "sweeps.yaml"
    assert doc.sweeps(str(fit_map), str(evidence / "scenarios-acceleration-memory.yaml"), str(out)) == 0
    runs = yaml.safe_load(out.read_text())["scenarios"]
    assert [r["arguments"]["per_device_train_batch_size"] for r in runs] == [7, 8]
    assert all(r["arguments"]["model_name_or_path"] == ["preset:llama-tiny"] for r in runs)
    rows = pd.read_csv(fit_map)
    for statuses, right in (({7: "ok", 8: "oom"}, True), ({7: "ok", 8: "ok"}, False), ({7: "oom", 8: "oom"}, False)):
        measured = pd.DataFrame([{"model_name_or_path": "preset:llama-tiny", "framework_config": "torch-compile",
                                  "per_device_train_batch_size": b, "status": s} for b, s in statuses.items()])
        lines, misses = doc._sweeps(rows, measured)
        assert (misses == 0) is right, lines
