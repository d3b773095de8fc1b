"""tunebench.experiment.fms.gptq: round-to-nearest GPTQ packing against fms's own QuantLinear.pack (bit for bit) and
its dequantization (the Triton kernel's arithmetic), and the checkpoint fms's loader reads."""

from __future__ import annotations

import json

import pytest
import torch

from tunebench.experiment.fms.compat import installed
from tunebench.experiment.fms.gptq import (
    GptqLayout,
    gptq_method,
    is_gptq_folder,
    pack_linear,
    pack_rows,
    quantize_linear,
    round_to_nearest,
)

needs_fms = pytest.mark.skipif(not installed("fms_acceleration_peft"), reason="fms-acceleration-peft is not installed "
                               "(python scripts/install_deps.py --fms)")
V1_TO_V2 = 0b00010001000100010001000100010001  # fms's convert_gptq_v1_to_v2_format, 4 bits


@pytest.fixture(scope="module")
def quant_linear():
    """fms's QuantLinear, imported the way the seam imports fms (other fms plugins stay out of this process)."""
    from tests.fixtures.fms_cpu import install_cpu_gptq

    install_cpu_gptq()
    from fms_acceleration_peft.gptqmodel.nn_modules.qlinear.qlinear_tritonv2 import QuantLinear

    return QuantLinear


@needs_fms
@pytest.mark.parametrize(("out_features", "in_features", "group"), [(64, 128, 32), (96, 256, 128), (32, 64, -1)])
def test_packing_equals_fms_quantlinear_pack(quant_linear, out_features, in_features, group):
    """fms's QuantLinear.pack (v2 zeros) given the same scales and codes writes the same int32 words; v1 keeps every
    zero point minus one (fms adds 0x11111111 back on load)."""
    layout = GptqLayout(4, group)
    torch.manual_seed(out_features)
    weight = torch.randn(out_features, in_features) * 0.02
    codes, scales, zero = round_to_nearest(weight, layout)
    g = layout.group(in_features)
    exact = scales.float().t().repeat_interleave(g, dim=1) * (codes.float() - zero)  # what the codes stand for
    linear = torch.nn.Linear(in_features, out_features, bias=False)
    linear.weight.data = exact
    reference = quant_linear(4, group, in_features, out_features, bias=False)
    reference.pack(linear, scales.float().t().contiguous(), torch.full((out_features, in_features // g), zero),
                   g_idx=torch.arange(in_features, dtype=torch.int32) // g)
    mine = pack_linear(codes, scales, zero, layout)
    assert torch.equal(mine["qweight"], reference.qweight)
    assert torch.equal(mine["qzeros"] + V1_TO_V2, reference.qzeros)
    assert torch.equal(mine["scales"], reference.scales)
    assert torch.equal(mine["g_idx"], reference.g_idx)


@needs_fms
def test_dequantized_weight_is_the_nearest_code(quant_linear):
    """fms's dequantization of the packed tensors gives scale * (code - zero): within half a step of the weight (the
    largest positive weight of a group sits half a step above the grid's top, 7 steps for 4 bits: clamped there)."""
    from tests.fixtures.fms_cpu import dequant_torch

    layout = GptqLayout(4, 64)
    torch.manual_seed(1)
    weight = torch.randn(128, 256) * 0.02
    packed = quantize_linear(weight, layout)
    restored = dequant_torch(packed["qweight"], packed["scales"], packed["qzeros"] + V1_TO_V2, packed["g_idx"], 4)
    step = packed["scales"].float().repeat_interleave(64, dim=0)  # [in, out]
    error = (restored.float() - weight.t()).abs()
    assert (error <= 0.51 * step).all()
    assert error.max() > 0  # a 4-bit grid never holds random weights exactly


def test_pack_rows_puts_row_i_at_bits_4i():
    codes = torch.tensor([[1], [2], [3], [4], [5], [6], [7], [15]], dtype=torch.int32)
    assert pack_rows(codes, GptqLayout(4, 8)).item() == int("f7654321", 16) - 2 ** 32


def test_rtn_of_an_all_zero_group_is_zero():
    codes, scales, zero = round_to_nearest(torch.zeros(32, 32), GptqLayout(4, 32))
    assert (codes == zero).all() and (scales > 0).all()


def test_gptq_folder_and_method(tmp_path):
    assert not is_gptq_folder(tmp_path)
    (tmp_path / "quantize_config.json").write_text(json.dumps(GptqLayout().quantize_config()))
    assert is_gptq_folder(tmp_path) and gptq_method(tmp_path) == "rtn"
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq", "bits": 4}}))
    assert is_gptq_folder(other) and gptq_method(other) == "checkpoint"
