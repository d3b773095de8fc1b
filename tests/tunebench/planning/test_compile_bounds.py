"""A compiled step's bound on unverified layer classes (planning.compile_bounds): which classes are verified, what
the eager forward saves in the others (to the byte), that the bound adds it, and the rule's premise on inductor's
partitioner."""

import json

import pytest
import torch

from tunebench.planning import compile_bounds
from tunebench.planning.fake_step import StepShape

SMALL = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=512, max_position_embeddings=512, tie_word_embeddings=False)
# Arcee: a Llama body (its norms and attention copies of Llama's) with a squared-ReLU MLP without a gate
ARCEE = dict(model_type="arcee", hidden_act="relu2", **SMALL)
LORA = dict(peft="lora", lora_r=8, lora_alpha=16, lora_targets=("q_proj", "v_proj", "up_proj", "down_proj"))
BATCH, SEQ = 2, 64


def _folder(tmp_path, config: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def _meta(folder: str, **shape):
    from tunebench.planning.fake_model import meta_model

    return meta_model(StepShape(folder, "bfloat16", BATCH, SEQ, False, **shape))[0]


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_a_layer_class_is_verified_by_its_forwards_code(tmp_path):
    """In a fresh interpreter: in CI's shared worker an earlier test left ArceeModel unverified (order-dependent,
    cause not found yet); the rule is checked where no earlier test can have patched transformers."""
    import subprocess
    import sys

    from tests.fixtures.harness import REPO

    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path; "
            "from tests.tunebench.planning.test_compile_bounds import _verified_by_code; "
            f"_verified_by_code(Path({str(tmp_path)!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]


def _verified_by_code(tmp_path):
    from transformers.activations import ReLUSquaredActivation, SiLUActivation
    from transformers.models.arcee import modeling_arcee as arcee
    from transformers.models.llama import modeling_llama as llama
    from transformers.models.nemotron import modeling_nemotron as nemotron

    key, known = compile_bounds.forward_key, compile_bounds.verified_keys()
    assert key(arcee.ArceeRMSNorm.forward) == key(llama.LlamaRMSNorm.forward) in known  # a copy of Llama's
    assert key(llama.LlamaMLP.forward) in known and key(SiLUActivation.forward) in known
    for unseen in (arcee.ArceeMLP, ReLUSquaredActivation, nemotron.NemotronAttention, nemotron.NemotronLayerNorm1P):
        assert key(unseen.forward) not in known, unseen
    assert compile_bounds.unverified_names(_meta(_folder(tmp_path, ARCEE), **LORA)) == ["ArceeMLP",
                                                                                      "ReLUSquaredActivation"]
    assert compile_bounds.unverified_names(_meta("preset:llama-tiny", **LORA)) == []


def _region_bytes(tokens: int, hidden: int, inner: int, r: int) -> int:
    """What one Arcee MLP's eager forward saves with LoRA on up/down under CUDA's bf16 autocast, storage by storage
    in 512-byte blocks: up_proj's input and its adapters' bf16 weights and rank-r output; the ReLU's output and
    `square`'s float32 copy (CUDA autocasts pow); down_proj's bf16 input and its adapters'."""
    block = lambda n: -(-n // 512) * 512  # noqa: E731
    up = block(tokens * hidden * 2) + block(hidden * r * 2) + block(tokens * r * 2) + block(r * inner * 2)
    act = block(tokens * inner * 2) + block(tokens * inner * 4)
    down = block(tokens * inner * 2) + block(inner * r * 2) + block(tokens * r * 2) + block(r * hidden * 2)
    return up + act + down


def _unverified_bytes(folder: str, **shape) -> int:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tunebench.planning.cuda_semantics import applied
    from tunebench.planning.fake_model import to_fake
    from tunebench.planning.fake_step import _loss, mixed_precision

    model = _meta(folder, autocast_bf16=True, **shape)
    with FakeTensorMode(allow_non_fake_inputs=True):
        to_fake(model)
        ids = torch.randint(3, 512, (BATCH, SEQ))
        with compile_bounds.unverified_saved(model, 512) as saved:
            with mixed_precision(StepShape(folder, "bfloat16", BATCH, SEQ, False, autocast_bf16=True)), applied(True):
                _loss(model, ids, None)
    return saved.bytes


def test_the_eager_saves_of_a_squared_relu_mlp_to_the_byte(tmp_path):
    folder = _folder(tmp_path, ARCEE)
    per_layer = _region_bytes(BATCH * SEQ, 64, 256, 8)
    assert _unverified_bytes(folder, **LORA) == 2 * per_layer
    # checkpointed: backward holds one layer's recompute at a time
    assert _unverified_bytes(folder, checkpointing=True, **LORA) == per_layer
    assert _unverified_bytes("preset:llama-tiny", **LORA) == 0  # every class verified: nothing added


@pytest.mark.slow
def test_a_compiled_rows_bound_adds_the_unverified_saves(tmp_path):
    """The plan's bound on a compiled squared-ReLU row: the verified margin plus the MLPs' eager saves; a Llama body
    keeps the margin alone."""
    from tunebench.planning.accelerations import COMPILE_UNDER
    from tunebench.planning.predict import Sharding, predict

    folder = _folder(tmp_path, ARCEE)
    for model, added in ((folder, 2 * _region_bytes(BATCH * SEQ, 64, 256, 8)), ("preset:llama-tiny", 0)):
        row = predict(StepShape(model, "bfloat16", BATCH, SEQ, False, autocast_bf16=True, compile_mode="default",
                                **LORA), Sharding(), cuda=True, gpu_arch=90)
        assert row["pred_mem_bound_extra"] == int(row["pred_mem_peak"] * COMPILE_UNDER) + added


def _root(node):
    """The node a chain of views and transposes starts from."""
    views = {torch.ops.aten.t.default, torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
             torch.ops.aten.transpose.int, torch.ops.aten.permute.default}
    while node.op == "call_function" and node.target in views:
        node = node.args[0]
    return node


def test_inductors_partition_of_a_squared_relu_mlp_saves_no_more_than_eager():
    """The rule's premise on the held-out layer: AOTAutograd's min-cut partition (inductor's) of an Arcee MLP with
    LoRA on up/down keeps, besides the weights, exactly what eager autograd saves (x, the adapters' rank-8 outputs,
    the ReLU's output, down_proj's input): 303 104 B. A partition that recomputes nothing keeps the ReLU's output
    and its square's input as two tensors (eager saves one storage for both): 131 072 B more, which is why the bound
    counts on the partitioner inductor runs and a CPU test pins it."""
    from functorch.compile import aot_module, make_boxed_func
    from peft import LoraConfig, get_peft_model
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition
    from transformers import AutoConfig
    from transformers.models.arcee.modeling_arcee import ArceeMLP

    class Body(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = ArceeMLP(AutoConfig.for_model("arcee", hidden_size=64, intermediate_size=256,
                                                     hidden_act="relu2"))

        def forward(self, x):
            return self.mlp(x)

    torch.manual_seed(0)
    model = get_peft_model(Body(), LoraConfig(r=8, target_modules=["up_proj", "down_proj"]))
    x = torch.randn(BATCH, SEQ, 64, requires_grad=True)
    weights = {p.untyped_storage()._cdata for p in model.parameters()}
    eager = {}
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: eager.setdefault(t.untyped_storage()._cdata, t.untyped_storage().nbytes()) and t, lambda t: t):
        model(x)
    eager_bytes = sum(size for key, size in eager.items() if key not in weights)
    kept = {}
    for partition in (min_cut_rematerialization_partition, default_partition):
        saved = kept[partition.__name__] = []

        def forward_graph(graph, inputs, saved=saved):
            out = [n for n in graph.graph.nodes if n.op == "output"][0].args[0]
            saved.extend(a.meta["val"] for a in out[1:] if _root(a).op != "placeholder")  # not a weight, nor x
            return make_boxed_func(graph)

        aot_module(model, forward_graph, lambda graph, inputs: make_boxed_func(graph), partition_fn=partition)(x)
    size = {name: sum(t.numel() * t.element_size() for t in saved) for name, saved in kept.items()}
    assert eager_bytes == 303_104
    assert size["min_cut_rematerialization_partition"] + BATCH * SEQ * 64 * 4 == eager_bytes  # x: an input
    assert size["default_partition"] + BATCH * SEQ * 64 * 4 == eager_bytes + 131_072
