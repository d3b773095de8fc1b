"""torch 2.11's SDPA backend rules (planning.sdpa_rules), one check at a time: each case flips one property of a call
that a backend takes and names the backend torch then picks (its eligibility checks in sdp_utils.cpp, its order)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tunebench.planning import sdpa_rules
from tunebench.planning.sdpa_rules import SdpaCall, choose

H200, A100, RTX3090, RTX5090, V100, B200 = 90, 80, 86, 120, 70, 100


def call(heads=32, kv_heads=32, size=128, v_size=None, length=1024, k_length=None, dtype="bfloat16", **kw):
    query = (2, heads, length, size)
    key = (2, kv_heads, k_length or length, size)
    value = (2, kv_heads, k_length or length, v_size or size)
    return SdpaCall(query, key, value, (1, 1, 1), dtype, enable_gqa=kv_heads != heads, **kw)


CASES = [  # (case, GPU, backend torch picks)
    # the order: cuDNN first on sm_90 and sm_10x, flash first elsewhere (cuDNN after math: never)
    ("bf16, no mask, H200", call(), H200, "cudnn"),
    ("bf16, no mask, B200", call(), B200, "cudnn"),
    ("bf16, no mask, A100", call(), A100, "flash"),
    ("bf16, no mask, RTX 5090 (sm_120: cuDNN not first)", call(), RTX5090, "flash"),
    # masks: flash takes none, cuDNN and the memory-efficient kernel take them
    ("bf16, mask, H200", call(mask_dims=4), H200, "cudnn"),
    ("bf16, mask, A100", call(mask_dims=4), A100, "efficient"),
    ("bf16, 5-d mask, H200 (cuDNN takes 2 to 4)", call(mask_dims=5), H200, "efficient"),
    ("bf16, mask whose last dimension is strided", call(mask_dims=4, mask_last_stride=2), H200, "math"),
    # grouped-query heads: cuDNN and flash group them, torch 2.11's memory-efficient kernel does not
    ("float32, GQA, H200 (the known failure)", call(kv_heads=8, dtype="float32"), H200, "math"),
    ("float32, no GQA, H200", call(dtype="float32"), H200, "efficient"),
    ("bf16, GQA, H200", call(kv_heads=8), H200, "cudnn"),
    ("bf16, GQA, mask, A100", call(kv_heads=8, mask_dims=4), A100, "math"),
    ("bf16, GQA whose key heads do not divide the query's", call(heads=32, kv_heads=6), H200, "math"),
    ("bf16, 8 key heads without enable_gqa", dataclasses.replace(call(kv_heads=8), enable_gqa=False), H200, "math"),
    # dtypes: flash and cuDNN half precision only; bf16 from sm_80; the memory-efficient kernel float32 too
    ("float16, V100 (no flash, no cuDNN below sm_80)", call(dtype="float16"), V100, "efficient"),
    ("bf16, V100 (the memory-efficient kernel's bf16 from sm_80)", call(), V100, "math"),
    ("float64", call(dtype="float64"), H200, "math"),
    # head sizes: cuDNN multiples of 8 up to 256 on sm_90 (128 elsewhere); flash one size up to 256; the
    # memory-efficient kernel multiples of the GEMM alignment (8 half, 4 float32 on sm_80+), no upper limit
    ("bf16, head 256, H200", call(size=256), H200, "cudnn"),
    ("bf16, head 320, H200", call(size=320), H200, "efficient"),
    ("bf16, head 320, GQA, H200", call(size=320, kv_heads=8), H200, "math"),
    ("bf16, head 192 / value 128, H200 (MLA)", call(size=192, v_size=128), H200, "cudnn"),
    ("bf16, head 192 / value 128, mask, A100", call(size=192, v_size=128, mask_dims=4), A100, "efficient"),
    ("bf16, head 100 (not a multiple of 8), H200", call(size=100), H200, "flash"),
    ("bf16, head 100, mask, H200", call(size=100, mask_dims=4), H200, "math"),
    ("float32, head 100 (a multiple of 4)", call(size=100, dtype="float32"), H200, "efficient"),
    ("float32, head 98", call(size=98, dtype="float32"), H200, "math"),
    ("float32, head 98, V100 (no tensor-core alignment for float32 on sm_7x)", call(size=98, dtype="float32"),
     V100, "efficient"),
    # flash's training limit on sm_86..sm_89: head sizes in (192, 224], or (224, 256] with dropout
    ("bf16, head 208, training, RTX 3090", call(size=208), RTX3090, "efficient"),
    ("bf16, head 208, inference, RTX 3090", call(size=208, requires_grad=False), RTX3090, "flash"),
    ("bf16, head 256, dropout, training, RTX 3090", call(size=256, dropout=0.1), RTX3090, "efficient"),
    ("bf16, head 256, training, RTX 3090", call(size=256), RTX3090, "flash"),
    # lengths: flash's causal mask needs equal lengths; cuDNN no key length 1, nor query length 1 with dropout
    ("bf16, causal, query 1024 / key 512, A100", call(k_length=512, is_causal=True), A100, "efficient"),
    ("bf16, key length 1, H200", call(k_length=1), H200, "flash"),
    ("bf16, query length 1, dropout, H200", call(length=1, k_length=64, dropout=0.1), H200, "flash"),
    ("bf16, query length 1, H200", call(length=1, k_length=64), H200, "cudnn"),
    # the last dimension contiguous (every fused kernel)
    ("bf16, query's last dimension strided", dataclasses.replace(call(), strides=(2, 1, 1)), H200, "math"),
    ("bf16, batch sizes differ", dataclasses.replace(call(), key=(1, 32, 1024, 128)), H200, "math"),
]


@pytest.mark.parametrize("case, gpu, backend", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_rule_picks_what_torch_picks(case, gpu, backend):
    assert choose(case, gpu) == backend


def test_the_gemm_alignment_is_torchs_minimum_gemm_alignment():
    assert [sdpa_rules.gemm_alignment(d, a) for d, a in [("bfloat16", 90), ("float32", 90), ("float16", 75),
                                                         ("float32", 75), ("float16", 60)]] == [8, 4, 8, 1, 1]


def test_a_call_is_read_from_tensors_as_sdpa_receives_them():
    query = torch.empty(2, 8, 16, 64, dtype=torch.float32, device="meta", requires_grad=True)
    key = torch.empty(2, 2, 16, 64, dtype=torch.float32, device="meta").transpose(1, 2).contiguous().transpose(1, 2)
    mask = torch.empty(2, 1, 16, 16, dtype=torch.bool, device="meta")
    read = SdpaCall.of(query, key, key, mask, 0.1, False, True)
    assert read == SdpaCall((2, 8, 16, 64), (2, 2, 16, 64), (2, 2, 16, 64), (1, 1, 1), "float32", 4, 1, 0.1, False,
                            True, True)
