"""The fake step's CUDA autocast rules (tunebench.planning.cuda_semantics) against CUDA itself.

`docs/evidence/layer-families-h100/autocast_cuda.csv` holds, for every ATen, torch.special, torch.linalg and
functional op the probe could call, the dtype CUDA's bf16 autocast returned on an H100
(docs/evidence/layer-families-h100/autocast_probe.py). Each row is replayed here on CPU under CPU autocast plus the
fake step's rules, and must come out in CUDA's dtype: an op that CUDA runs in float32 and the rules miss would keep a
bf16 tensor where CUDA keeps a float32 one (the squared-ReLU MLP's activations were 28 % short that way).
"""

from __future__ import annotations

import csv
import warnings

import torch

from tests.fixtures.harness import EVIDENCE, REPO, load_script
from tunebench.planning.cuda_semantics import cuda_rules

ROOT = REPO
TABLE = ROOT / "docs" / "evidence" / "layer-families-h100" / "autocast_cuda.csv"
# CPU's own autocast policy differs from CUDA's on float32 inputs of two linear-algebra ops no model calls
# (CPU casts `inner` to bf16 and keeps `pinverse` in float32; CUDA the other way round); the rules follow
# CUDA's float32 list, which these are not part of.
KNOWN = {("torch.inner", "float32"), ("torch.pinverse", "float32")}


def _probe():
    return load_script(EVIDENCE / "layer-families-h100" / "autocast_probe.py")


def test_the_fake_rules_give_cudas_dtype_for_every_probed_op():
    probe = _probe()
    ops = dict(probe.candidates())
    rows = list(csv.DictReader(TABLE.open()))
    wrong, ran, no_cpu_kernel = [], 0, []
    for row in rows:
        dtype = getattr(torch, row["input_dtype"])
        generator = torch.Generator().manual_seed(0)
        x = torch.rand(4, 8, dtype=dtype, generator=generator) * 0.9 + 0.05
        y = torch.rand(4, 8, dtype=dtype, generator=generator) * 0.9 + 0.05
        try:
            with warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.bfloat16), cuda_rules():
                warnings.simplefilter("ignore")
                out = probe.first_tensor(probe.PATTERNS[row["pattern"]](ops[row["op"]], x, y))
        except RuntimeError:
            no_cpu_kernel.append(row["op"])
            continue
        ran += 1
        got = str(out.dtype).removeprefix("torch.")
        if got != row["cuda_dtype"] and (row["op"], row["input_dtype"]) not in KNOWN:
            wrong.append((row["op"], row["input_dtype"], row["cuda_dtype"], got))
    assert not wrong, wrong
    assert ran >= 470 and len(no_cpu_kernel) <= 4, (ran, no_cpu_kernel)


def test_a_squared_relu_keeps_a_float32_copy_as_cuda_does():
    x = torch.rand(4, 8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16), cuda_rules():
        assert torch.square(torch.relu(x)).dtype == torch.float32
        assert torch.norm(x).dtype == torch.float32  # torch.norm(x) has no dtype overload: cast instead
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.square(x).dtype == torch.bfloat16  # CPU's own policy, which the rules correct


def test_autocast_asked_without_a_device_is_the_targets():
    """PEFT asks `torch.is_autocast_enabled()` (CUDA's, without a device) before casting a LoRA layer's input to the
    adapter's dtype: for a CUDA target the CPU autocast that stands in for CUDA's must answer, and a float32 adapter
    then saves its bf16 input itself for backward, not a bf16 recast of a float32 copy (an FSDP1 rank's upcast
    adapters did, 1.4 GiB on the 1B)."""
    import bitsandbytes as bnb
    from peft import LoraConfig, get_peft_model

    from tunebench.planning.cuda_semantics import applied

    base = bnb.nn.Linear4bit(64, 64, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
    base.weight = bnb.nn.Params4bit(torch.randn(64, 64, dtype=torch.bfloat16), requires_grad=False, quant_type="nf4")
    model = torch.nn.Sequential(base.to("cpu"))  # quantized on CPU
    model.is_loaded_in_4bit = True  # as transformers marks a 4-bit model: PEFT wraps it with its 4-bit LoRA layer
    layer = get_peft_model(model, LoraConfig(r=4, target_modules=["0"]))
    for p in layer.parameters():
        if p.requires_grad:
            p.data = p.data.float()  # FSDP1's upcast of trainable flat parameters
    x = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)

    def copies_of_input_saved(target_is_cuda: bool) -> int:
        """Saved bf16 tensors of the input's shape that are not the input."""
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t), \
                torch.autocast("cpu", dtype=torch.bfloat16), applied(target_is_cuda):
            assert torch.is_autocast_enabled() is target_is_cuda
            layer(x)
        return sum(t.shape == x.shape and t.data_ptr() != x.data_ptr() for t in saved)

    assert copies_of_input_saved(True) == 0
    assert copies_of_input_saved(False) == 1  # CPU semantics: PEFT casts, as a CPU run does
    assert torch.is_autocast_enabled("cpu") is False and torch.is_autocast_enabled() is False


def test_an_embeddings_backward_holds_cudas_partial_sums_for_a_cuda_target():
    """CUDA's embedding backward above 3 072 indices sums equal indices' rows in float32 partial sums sized for the
    worst case ((indices / 10 + min(indices, rows)) x width), beside its sorted indices and segment bookkeeping:
    for a CUDA target the fake step's backward allocates them while it makes the gradient (MemTracker's peak of the
    backward: gradient + workspace), the forward and the gradient unchanged; at 3 072 indices and below (CUDA's
    atomic kernel) and on a CPU target it allocates nothing more."""
    from torch.distributed._tools.mem_tracker import MemTracker

    from tunebench.planning.cuda_embedding import workspace_shapes
    from tunebench.planning.cuda_semantics import applied

    rows, width = 500, 64

    def backward_peak(indices: int, target_is_cuda: bool) -> tuple[int, torch.Tensor]:
        torch.manual_seed(0)
        embedding = torch.nn.Embedding(rows, width, dtype=torch.bfloat16)
        ids = torch.randint(0, rows, (indices,))
        with applied(target_is_cuda):
            out = embedding(ids)
        grad = torch.ones_like(out)
        tracker = MemTracker()
        with tracker:
            out.backward(grad)
        (peak,) = tracker.get_tracker_snapshot("peak").values()
        return int(peak["Total"]), embedding.weight.grad

    cpu_peak, cpu_grad = backward_peak(4000, False)
    cuda_peak, cuda_grad = backward_peak(4000, True)
    assert torch.equal(cuda_grad, cpu_grad)
    segments = min(4000, rows)
    partials = 4000 // 10 + segments
    expected = 3 * 4000 * 8 + 2 * segments * 8 + 2 * 8 + partials * 8 + partials * width * 4
    assert sum(n * (4 if kind == "accumulator" else 8) for n, kind in workspace_shapes(4000, rows, width)) == expected
    assert cuda_peak - cpu_peak == expected
    assert backward_peak(3072, True)[0] == backward_peak(3072, False)[0]
