"""Liger's patches per model type read from liger-kernel itself (planning.liger_patches), for every type it supports,
and the plan's stand-ins on exactly the layers Liger's own apply function replaces on a model instance."""

import contextlib
import importlib
import inspect

import pytest

liger = pytest.importorskip("liger_kernel.transformers.monkey_patch")

from tunebench.planning import liger_kernels, liger_patches  # noqa: E402

# What each kind's Liger object runs (its source names the kernel's autograd Function): a kind is read from Liger's
# objects, and the stand-in of that kind allocates what that Function's Python allocates.
KERNEL_OF = {"rms_norm": "LigerRMSNormFunction", "swiglu": "_swiglu_dispatch", "swiglu_fused": "_swiglu_dispatch",
             "geglu": "LigerGELUMulFunction", "relu_squared": "LigerReLUSquaredFunction", "rope": 'dispatch("rope"'}
TYPES = liger_patches.supported_types()
# text model types a tiny config builds (AutoConfig.for_model) with the harness's AutoModelForCausalLM
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, vocab_size=256, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
BUILT = {"llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {}, "smollm3": {}, "phi3": {}, "granite": {},
         "olmo2": {}, "olmo3": {}, "glm4": {}, "exaone4": {}, "nemotron": {"hidden_act": "relu2"},
         "gemma": {"hidden_act": "gelu_pytorch_tanh"}, "gemma2": {"hidden_activation": "gelu_pytorch_tanh"},
         "gemma3_text": {"hidden_activation": "gelu_pytorch_tanh"}, "ministral": {},
         "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2}}


def test_liger_supports_the_types_it_maps():
    assert len(TYPES) == len(liger.MODEL_TYPE_TO_APPLY_LIGER_FN) >= 50
    assert {"llama", "mistral", "qwen3", "gemma", "phi3", "nemotron", "granite", "olmo2"} <= set(TYPES)


@pytest.mark.parametrize("model_type", TYPES)
def test_every_patch_is_read_from_liger_and_its_kind_from_the_kernel_it_runs(model_type):
    """Every type's patches: each assigns a Liger object over a name of a modeling module it imports, and a patch's
    kind is the kernel its Liger object runs; a patch without a stand-in is `other` (the note names it)."""
    found = liger_patches.patches(model_type)
    source = inspect.getsource(liger.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type])
    assert found or "_apply_liger_kernel_to_instance" in source or "MODEL_TYPE_TO_APPLY_LIGER_FN" in source
    for patch in found:
        assert patch.liger in source or any(f"apply_liger_kernel_to_{t}" in source for t in TYPES)
        if patch.kind in KERNEL_OF:
            obj = getattr(liger, patch.liger, None) or _imported(patch.liger)
            text = _liger_source(obj) if obj is not None else source
            assert KERNEL_OF[patch.kind] in text or (patch.kind == "rms_norm" and "LigerRMSNorm" in text), patch


def _liger_source(obj) -> str:
    """The source of a Liger function, or of a Liger class and its Liger bases."""
    if not inspect.isclass(obj):
        return inspect.getsource(obj)
    return "\n".join(inspect.getsource(c) for c in inspect.getmro(obj) if c.__module__.startswith("liger"))


def _imported(name: str):
    for module in ("liger_kernel.transformers.rms_norm", "liger_kernel.transformers.swiglu",
                   "liger_kernel.transformers.geglu", "liger_kernel.transformers.rope"):
        obj = getattr(importlib.import_module(module), name, None)
        if obj is not None:
            return obj
    return None


def test_patch_sets_of_types_that_differ_from_llamas():
    """A few types' sets, as Liger 0.8.5 writes them."""
    kinds = {t: {(p.kind, p.target, p.in_place) for p in liger_patches.patches(t)} for t in TYPES}
    assert kinds["llama"] == {("rope", "apply_rotary_pos_emb", True), ("rms_norm", "LlamaRMSNorm", True),
                              ("swiglu", "LlamaMLP", True)}
    assert kinds["nemotron"] == {("relu_squared", "ACT2FN[relu2]", True)}  # no RMSNorm, no RoPE (partial)
    assert kinds["gemma2"] == {("rope", "apply_rotary_pos_emb", True), ("rms_norm", "Gemma2RMSNorm", False),
                               ("geglu", "Gemma2MLP", True)}
    assert ("swiglu_fused", "Phi3MLP", True) in kinds["phi3"] and ("rms_norm", "Exaone4RMSNorm", False) in kinds[
        "exaone4"]
    assert ("other", "functional.cross_entropy", True) in kinds["granite"]  # granite's default: Liger's loss
    assert ("other", "Qwen3MoeExperts", True) in kinds["qwen3_moe"]  # experts: no stand-in
    with_flce = {(p.kind, p.target) for p in liger_patches.patches("llama", fused_linear_cross_entropy=True)}
    assert ("fused_linear_cross_entropy", "LlamaForCausalLM.forward") in with_flce


@contextlib.contextmanager
def _restored(model_type: str):
    """Liger's apply function also rewrites the modeling module's names and transformers' ACT2FN: put back after."""
    from transformers.activations import ACT2FN

    module = importlib.import_module(type(_config(model_type)).__module__.replace("configuration_", "modeling_"))
    names = dict(vars(module))
    acts = {key: dict.__getitem__(ACT2FN, key) for key in ACT2FN}  # its classes (ACT2FN[key] makes an instance)
    try:
        yield
    finally:
        for name, value in names.items():
            setattr(module, name, value)
        for key, value in acts.items():
            dict.__setitem__(ACT2FN, key, value)


def _config(model_type: str):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **SMALL, **BUILT[model_type])


def _model(model_type: str):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(_config(model_type))


def _stand_in(module):
    """The liger_kernels stand-in a module's forward is, or None."""
    forward = getattr(vars(module).get("forward"), "__func__", None)
    forward = getattr(forward, "func", forward)  # an RMSNorm's: a partial (in place or not)
    return forward if getattr(forward, "__module__", "") == liger_kernels.__name__ else None


@pytest.mark.parametrize("model_type", sorted(BUILT))
def test_the_plans_stand_ins_sit_where_liger_puts_its_kernels(model_type):
    """Liger's own apply function on a model instance (as transformers' Trainer calls it, TRL's setting) against the
    plan's stand-ins on the same model: the same layers, each the stand-in of the kernel Liger puts there, RoPE
    where Liger's patch set has it, a replacement without a stand-in (MoE experts) undone; transformers' modules
    as they were after the step."""
    from transformers.activations import ACT2FN

    liger_model = _model(model_type)
    with _restored(model_type):
        kwargs = {"cross_entropy": False, "fused_linear_cross_entropy": False}
        function = liger.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]
        function(model=liger_model, **{k: v for k, v in kwargs.items() if k in inspect.signature(function).parameters})
        by_liger = {name for name, m in liger_model.named_modules()
                    if "forward" in vars(m) or type(m).__module__.startswith("liger")}
    model = _model(model_type)
    home = importlib.import_module(type(model).__module__)
    names, acts = dict(vars(home)), {key: dict.__getitem__(ACT2FN, key) for key in ACT2FN}
    with liger_kernels.applied(model, model_type) as replaced:
        layers = {name: kind for name, kind in replaced.items() if not name.startswith(("transformers.", "torch."))}
        assert set(layers) == by_liger
        ours = {name for name, m in model.named_modules() if _stand_in(m) is not None}
        assert ours == {name for name, kind in layers.items() if kind in liger_kernels.MODELLED}
        for name in ours:
            replaced_by_liger = liger_model.get_submodule(name)
            text = _liger_source(type(replaced_by_liger)) if type(replaced_by_liger).__module__.startswith("liger") \
                else inspect.getsource(vars(replaced_by_liger)["forward"].__func__)
            assert KERNEL_OF[layers[name]] in text or "LigerRMSNorm" in text, name
            assert not type(model.get_submodule(name)).__module__.startswith("liger") or layers[name] == "relu_squared"
        assert all(not type(m).__module__.startswith("liger") or _stand_in(m) for m in model.modules())
        has_rope = any(kind == "rope" for kind in replaced.values())
        assert has_rope == any(p.kind == "rope" for p in liger_patches.patches(model_type))
    assert dict(vars(home)) == names and {key: dict.__getitem__(ACT2FN, key) for key in ACT2FN} == acts


def _plans(tmp_path, model_type: str) -> dict:
    import json

    from tunebench.planning.fake_step import StepShape, predict_step

    (tmp_path / "config.json").write_text(json.dumps(dict(model_type=model_type, **SMALL, **BUILT[model_type])))
    return {liger: predict_step(StepShape(str(tmp_path), "bfloat16", 2, 64, False, autocast_bf16=True, liger=liger),
                                True, 90) for liger in (False, True)}


@pytest.mark.parametrize("model_type", sorted(BUILT))
def test_liger_plans_below_the_model_without_it(tmp_path, model_type):
    """Every built type's Liger plan runs its stand-ins on fake tensors and keeps less than the plan without Liger
    (Liger's kernels only remove tensors)."""
    plans = _plans(tmp_path, model_type)
    assert plans[True]["peak"] < plans[False]["peak"]
    assert plans[True]["activations"] < plans[False]["activations"]


def test_ligers_squared_relu_saves_its_input_only(tmp_path):
    """Nemotron, which Liger patches only in its squared ReLU: CUDA's autocast keeps the ReLU's bf16 output, a float32
    copy for `square` and down_proj's bf16 input (8 B an element); Liger's kernel keeps its bf16 input and down_proj
    its bf16 output (4 B): 4 B x tokens x intermediate size x layers fewer, to the byte."""
    plans = _plans(tmp_path, "nemotron")
    assert plans[False]["activations"] - plans[True]["activations"] == 4 * (2 * 64) * 128 * 2
    assert plans[False]["temporaries"] == plans[True]["temporaries"]


def test_the_note_names_what_liger_patches_and_what_is_not_planned():
    from tunebench.planning.accelerations import liger_notes

    for model_type, said, unsaid in (
            ("llama", "(rope, rms norm, swiglu)", []),
            ("nemotron", "(relu squared)", []),
            ("qwen3_moe", "(rope, rms norm)", ["Liger's LigerExperts (planned as the model's own layers: an upper "
                                              "bound)"]),
            ("granite", "(swiglu, rms norm, rope)", ["Liger's liger_cross_entropy (planned as the model's own "
                                                     "layers: an upper bound)"])):
        modelled, not_modelled = [], []
        liger_notes(model_type, False, modelled, not_modelled)
        assert said in modelled[0] and not_modelled == unsaid, (model_type, modelled, not_modelled)
    modelled, not_modelled = [], []
    liger_notes("arcee", False, modelled, not_modelled)  # a type Liger does not patch
    assert modelled == [] and "Liger does not patch it" in not_modelled[0]
