"""A compiled step's bound where inductor's plan is not verified: the eager saved tensors of unverified layer classes.

The compiled plan replays inductor's partition and memory plan on a CPU host (planning.compiled_step). On a GPU it
was measured exact (within COMPILE_UNDER, planning.accelerations) only for the layer classes of the models of
docs/evidence/acceleration-memory-h100.md: Llama, Qwen3 and SmolLM3 bodies, full and LoRA. A layer class whose
forward no verified model runs (its compiled fusion and partition unknown) may keep more on the GPU than the CPU
host's plan says: a squared-ReLU MLP with LoRA kept 11 % more than its plan (issue AB, H200), far past a margin
of 0.70 %. No constant makes that sound; this does:

  * what a compiled graph saves for backward is a cut of its joint graph that the min-cut partitioner takes no
    larger than a cut eager autograd already holds (it saves a subset, recomputing the rest), and its buffers die
    at their last use: what inductor keeps of a region is at most what the eager step saves in it;
  * so the bound adds, to the compiled plan, every storage the eager forward saves while the innermost transformers
    layer running is of an unverified class (the generic torch and PEFT layers it calls are its region: a LoRA
    projection's saved input is the MLP's). The plan's own count of that region is >= 0, so the sum is >= the plan
    with the region planned as eager, whatever inductor did with it;
  * under gradient checkpointing, backward holds one checkpointed layer's recompute at a time: the layers' figures
    count by their largest, what lies outside them in full.

A layer class is known by its forward's code (bytecode, names and constants, and the transformers functions it
calls, recursively): Arcee's RMSNorm, a copy of Llama's, is verified; Nemotron's attention, whose rotary is partial,
is not.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import logging
import types

from tunebench.planning.peak_rules import rounded

logger = logging.getLogger(__name__)

# The bodies whose compiled plans held on a GPU (docs/evidence/acceleration-memory-h100.md: llama-3.2-1b and
# llama-3.1-8b, qwen3-1.7b, smollm3 with layers without rotary; full fine-tuning and LoRA on q/k/v/o), as tiny
# configs: a layer class depends on the model type and the options below, not on sizes.
VERIFIED_BODIES = (
    {"model_type": "llama", "hidden_act": "silu"},
    {"model_type": "qwen3", "hidden_act": "silu"},
    {"model_type": "smollm3", "hidden_act": "silu", "no_rope_layer_interval": 2},
)
_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 256,
         "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
VERIFIED_LORA = ("q_proj", "k_proj", "v_proj", "o_proj")


def forward_key(function) -> str:
    """What decides a forward's graph, as a digest: its code (bytecode, names, constants less the docstring, nested
    functions) and that of every transformers function it calls by global name, recursively."""
    return _function_key(function, set())


def _function_key(function, seen: set) -> str:
    function = inspect.unwrap(function)
    code = getattr(function, "__code__", None)
    if code is None:
        return f"{type(function).__module__}.{type(function).__qualname__}"
    parts = [_code_key(code)]
    scope = getattr(function, "__globals__", {})
    for name in code.co_names:
        called = scope.get(name)
        if (isinstance(called, types.FunctionType) and called not in seen
                and (called.__module__ or "").startswith("transformers")):
            seen.add(called)
            parts.append(f"{name}:{_function_key(called, seen)}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()


def _code_key(code) -> str:
    """A code object's digest; a docstring (the first constant, when a string) left out, as decorators rewrite it."""
    consts = list(code.co_consts)
    if consts and isinstance(consts[0], str):
        consts = consts[1:]
    consts = [_code_key(c) if isinstance(c, types.CodeType) else repr(c) for c in consts]
    return hashlib.sha1(repr((code.co_code, code.co_names, consts)).encode()).hexdigest()


def class_key(module) -> str:
    return forward_key(type(module).forward)


@functools.lru_cache(maxsize=1)
def verified_keys() -> frozenset:
    """The forward keys of every module class in the verified bodies (built tiny on the meta device, with LoRA)."""
    import torch
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    keys = set()
    for body in VERIFIED_BODIES:
        config = AutoConfig.for_model(**{**_TINY, **body})
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
            keys |= {class_key(m) for m in model.modules()}
            lora = get_peft_model(model, LoraConfig(r=4, target_modules=list(VERIFIED_LORA),
                                                    task_type=TaskType.CAUSAL_LM))
        keys |= {class_key(m) for m in lora.modules()}
    return frozenset(keys)


def unverified_names(model) -> list[str]:
    """The transformers layer classes of `model` that no verified body runs, once each, in model order."""
    known = verified_keys()
    return list(dict.fromkeys(type(m).__name__ for m in model.modules() if _decides(m) and class_key(m) not in known))


# Generic layers (torch's, PEFT's): their saves belong to the transformers layer that calls them
GENERIC = ("torch.", "peft.")


def _decides(module) -> bool:
    return not type(module).__module__.startswith(GENERIC)


@contextlib.contextmanager
def unverified_saved(model, block: int):
    """While it lasts (an eager forward), the storages autograd saves while the innermost transformers layer running
    is of an unverified class (the generic layers it calls included); `.bytes` when it ends: those outside
    checkpointed layers, plus the largest checkpointed layer's (checkpointing off meanwhile: every save is seen)."""
    import torch

    known = verified_keys()
    checkpointed = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    params = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    stack: list[tuple[bool, int | None]] = []
    groups: dict[int | None, dict[int, int]] = {}
    result = types.SimpleNamespace(bytes=0, classes=[])

    def enter(module, args, layer=None):
        inherited = stack[-1][1] if stack else None
        stack.append((class_key(module) not in known, layer if layer is not None else inherited))

    def leave(*_) -> None:  # returns None: the module's output stays
        stack.pop()

    def pack(tensor):
        storage = tensor.untyped_storage()
        base = tensor._base if tensor._base is not None else tensor
        if stack and stack[-1][0] and storage._cdata not in params and not isinstance(base, torch.nn.Parameter):
            groups.setdefault(stack[-1][1], {})[storage._cdata] = rounded(storage.nbytes(), block)
        return tensor

    handles = []
    for module in model.modules():
        if _decides(module):
            layer = id(module) if module in checkpointed else None
            handles.append(module.register_forward_pre_hook(functools.partial(enter, layer=layer)))
            handles.append(module.register_forward_hook(leave, always_call=True))
    for layer in checkpointed:
        layer.gradient_checkpointing = False
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield result
    finally:
        for handle in handles:
            handle.remove()
        for layer in checkpointed:
            layer.gradient_checkpointing = True
    layers = [sum(held.values()) for key, held in groups.items() if key is not None]
    result.bytes = sum(groups.get(None, {}).values()) + max(layers, default=0)
    result.classes = unverified_names(model)
