"""Quantized bases in the fake step: bitsandbytes' own modules and kernels, run on fake tensors.

The meta model's linear layers are replaced by transformers' own bitsandbytes replacement (the modules
`from_pretrained(quantization_config=...)` builds, skipping the same modules), and each weight is quantized by
bitsandbytes itself inside FakeTensorMode: bitsandbytes registers a fake implementation for every kernel it
dispatches (quantize/dequantize 4-bit and blockwise, int8 quantization and matmuls), so the packed weights, their
quantization state and every dequantized temporary of the forward and backward have their real shapes and
dtypes. What the fake step cannot know is data: 8-bit matmuls split off the input columns holding a value above
a threshold, and keep them for backward. Their count is measured by a real forward (planning.int8_outliers)
and the fake step allocates and keeps that many columns as bitsandbytes does; without a count it takes none,
which the prediction's note states.
"""

from __future__ import annotations

import contextlib
import logging

logger = logging.getLogger(__name__)

PARAM_TYPES = ("Params4bit", "Int8Params")


def quantize_meta(model, quantization, dtype) -> None:
    """Replace the meta model's linear layers as transformers' bitsandbytes quantizer does before loading, and
    flag the model as loaded quantized (PEFT and the Trainer read those flags)."""
    import torch
    from transformers.integrations import replace_with_bnb_linear
    from transformers.quantizers.auto import AutoHfQuantizer

    from tunebench.experiment.quantization import bnb_config

    config = bnb_config(quantization)
    quantizer = AutoHfQuantizer.from_config(config, pre_quantized=False)
    skip = quantizer.get_modules_to_not_convert(model, config.llm_int8_skip_modules,
                                                getattr(model, "_keep_in_fp32_modules", None))
    replace_with_bnb_linear(model, modules_to_not_convert=skip, quantization_config=config)
    for module in model.modules():
        bias = getattr(module, "bias", None)
        if type(getattr(module, "weight", None)).__name__ in PARAM_TYPES and isinstance(bias, torch.nn.Parameter):
            module.bias = torch.nn.Parameter(bias.to(dtype), requires_grad=False)  # loaded in the checkpoint's dtype
    flag = "is_loaded_in_4bit" if quantization.method == "bnb-4bit" else "is_loaded_in_8bit"
    setattr(model, flag, True)
    model.is_quantized = True


_STAND_IN = None


def _params4bit_stand_in():
    """A plain Parameter subclass named Params4bit (made once, when torch is imported): accelerate's FSDP2
    preparation tells bitsandbytes' 4-bit weights by their class name (it leaves uint8-stored ones whole, and
    upcasts no trainable weight of a model that has them)."""
    global _STAND_IN
    if _STAND_IN is None:
        import torch

        _STAND_IN = type("Params4bit", (torch.nn.Parameter,), {"__module__": __name__})
    return _STAND_IN


def fake_parameter(module, param):
    """A fake, quantized copy of a meta bitsandbytes weight (inside FakeTensorMode), or None for another kind.

    bitsandbytes' parameter classes cannot wrap a fake tensor (a tensor subclass of its own), so the copy is a
    plain parameter holding the packed data with the attributes the bitsandbytes modules read from theirs: the
    4-bit QuantState, or 8-bit's CB/SCB. The data and the state come from bitsandbytes' own quantize functions.
    """
    kind = type(param).__name__
    if kind not in PARAM_TYPES:
        return None  # before importing bitsandbytes: an unquantized model must plan without it (an extra)
    import torch
    from bitsandbytes import functional

    full = torch.empty(param.shape, dtype=torch.bfloat16, device="cpu")
    if kind == "Params4bit":
        packed, state = functional.quantize_4bit(full, blocksize=param.blocksize,
                                                 compress_statistics=param.compress_statistics,
                                                 quant_type=param.quant_type, quant_storage=param.quant_storage)
        new = _params4bit_stand_in()(packed, requires_grad=False)
        new.quant_state = state
        new.bnb_quantized = True
        module.quant_state = state
        return new
    rows, scales, _ = functional.int8_vectorwise_quant(full.to(torch.float16))
    new = torch.nn.Parameter(rows, requires_grad=False)
    new.CB, new.SCB, new.has_fp16_weights = new.data, scales, False
    return new


@contextlib.contextmanager
def fake_kernels(quantization, cuda: bool):
    """bitsandbytes as it runs on the target device, for the fake step's duration (enter it before the fake
    mode): its cached code tables are
    put back afterwards (a fake one must never be reused by a real run in this process), and on a CUDA target
    8-bit layers take CUDA's int8 matmul (the CPU path dequantizes instead) without outlier columns."""
    if quantization is None or not quantization.enabled:
        yield
        return
    import bitsandbytes
    from bitsandbytes import functional
    from bitsandbytes.autograd import _functions

    saved_maps = dict(functional.name2qmap)
    # The double quantization's code table, made from values (fake tensors have none) before the fake mode:
    # a real tensor the size of the GPU's one, shared by every weight as there.
    functional.name2qmap.setdefault("dynamic", functional.create_dynamic_map())
    original = bitsandbytes.matmul

    def cuda_matmul(A, B, out=None, state=None, threshold=0.0, bias=None):
        state = state or _functions.MatmulLtState()
        # Which columns are outliers depends on values, which fake tensors do not have: the split runs as
        # memory alone (_kept_outlier_columns), for the count measured on the layer's weight (mark_outlier_columns).
        state.threshold = 0.0
        columns = getattr(B, "outlier_columns", 0)
        if columns:
            A = _kept_outlier_columns().apply(A, columns, B.shape[0])
        return _functions.MatMul8bitLt.apply(A, B, out, bias, state)

    from bitsandbytes.nn import modules

    original_fix = modules.fix_4bit_weight_quant_state_from_module

    def fix_state(module) -> None:
        # FSDP2 hands a 4-bit layer its gathered weight as a plain parameter; bitsandbytes then wraps it in a new
        # Params4bit around the same data (no memory), which cannot wrap a fake tensor: the state is put back alone
        weight = module.weight
        if getattr(weight, "quant_state", None) is None:
            weight.quant_state = module.quant_state

    modules.fix_4bit_weight_quant_state_from_module = fix_state
    if cuda:
        bitsandbytes.matmul = cuda_matmul
    try:
        yield
    finally:
        modules.fix_4bit_weight_quant_state_from_module = original_fix
        bitsandbytes.matmul = original
        functional.name2qmap.clear()
        functional.name2qmap.update(saved_maps)


def mark_outlier_columns(model, outliers) -> None:
    """Tell each fake 8-bit weight how many outlier columns its layer splits off (`outliers`: planning.
    int8_outliers.OutlierColumns, named as in the unwrapped model; PEFT's wrapping is looked through)."""
    if outliers is None:
        return
    counts = dict(outliers.columns)
    for name, module in model.named_modules():
        if type(module).__name__ != "Linear8bitLt":
            continue
        plain = name.removeprefix("base_model.model.").replace(".base_layer", "")
        module.weight.outlier_columns = counts.get(plain, 0)


_KEPT = None


def _kept_outlier_columns():
    """An identity autograd function whose forward allocates what bitsandbytes' outlier split allocates for
    `columns` columns of A (int8_mixed_scaled_mm): the columns in A's dtype, kept for backward while A needs a
    gradient (MatMul8bitLt's ctx.tensors); the weight's columns gathered (int8), dequantized (float32) and cast
    to A's dtype; and the output's out-of-place addmm. Defined on first use: torch is imported lazily."""
    global _KEPT
    if _KEPT is not None:
        return _KEPT
    import torch

    class KeptOutlierColumns(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, columns, out_features):
            flat = A.reshape(-1, A.shape[-1])
            # a copy even when every column is an outlier (indexing by a tensor always copies; a slice would not)
            kept = torch.empty(flat.shape[0], columns, dtype=A.dtype, device=A.device)
            gathered = torch.empty(out_features, columns, dtype=torch.int8, device=A.device)
            dequantized = torch.empty(out_features, columns, dtype=torch.float32, device=A.device)
            del gathered
            weight_columns = dequantized.to(A.dtype)
            del dequantized
            summed = torch.empty(flat.shape[0], out_features, dtype=A.dtype, device=A.device)
            del weight_columns, summed
            if ctx.needs_input_grad[0]:
                ctx.kept = kept  # freed with the node after backward, as bitsandbytes' ctx.tensors
            return A.view_as(A)

        @staticmethod
        def backward(ctx, grad):
            return grad, None, None

    _KEPT = KeptOutlierColumns
    return _KEPT


def module_quant_state_bytes(model, block: int) -> int:
    """Bytes of 4-bit quantization state that only the layers hold (`module.quant_state`), not their weights: under
    FSDP2 a sharded 4-bit weight is a DTensor without it. The scanner sees it as memory held before the step."""
    from scanner.memory import quantization_state_tensors
    from tunebench.planning.peak_rules import rounded

    counted = {t.untyped_storage()._cdata for t in quantization_state_tensors(model)}
    seen, total = set(), 0
    for module in model.modules():
        state = getattr(module, "quant_state", None)
        while state is not None:
            for tensor in (getattr(state, name, None) for name in ("absmax", "code", "offset")):
                key = tensor.untyped_storage()._cdata if hasattr(tensor, "untyped_storage") else None
                if key is not None and key not in counted and key not in seen:
                    seen.add(key)
                    total += rounded(tensor.untyped_storage().nbytes(), block)
            state = getattr(state, "state2", None) if getattr(state, "nested", False) else None
    return total


def quant_state_bytes(model, block: int) -> int:
    """Bytes of the quantization state (scanner.memory.quantization_state_tensors), sized as the allocator would."""
    from scanner.memory import quantization_state_tensors
    from tunebench.planning.peak_rules import rounded

    seen, total = set(), 0
    for tensor in quantization_state_tensors(model):
        storage = tensor.untyped_storage()
        key = id(storage) if not hasattr(storage, "_cdata") else storage._cdata
        if key in seen:
            continue
        seen.add(key)
        total += rounded(storage.nbytes(), block)
    return total
