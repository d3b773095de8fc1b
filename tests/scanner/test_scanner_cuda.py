"""CUDA-only scanner checks (skipped without a GPU): exact sizes, additive categories, allocator agreement."""

import pytest
import torch
from scanner_testlib import lm_dataset, numel_bytes, tiny_llama, train

from scanner import Scanner

pytestmark = pytest.mark.gpu

BLOCK = 512  # the CUDA caching allocator rounds every block up to 512 bytes


def rounded(params) -> int:
    return sum(-(-p.numel() * p.element_size() // BLOCK) * BLOCK for p in {id(p): p for p in params}.values())


def test_cuda_categories_are_exact_and_add_up_to_the_allocator_peak(tmp_path):
    torch.cuda.reset_peak_memory_stats()
    model = tiny_llama(torch.float32).cuda()
    scanner = Scanner(steps=2, output=None)
    trainer = train(model, scanner, lm_dataset(seq=64), use_cpu=False, output_dir=str(tmp_path))
    step = scanner.report.steps[0]
    params = list(trainer.model.parameters())
    assert step.mem_params == rounded(params)
    assert numel_bytes(params) <= step.mem_params < numel_bytes(params) + BLOCK * len(params)
    parts = step.mem_params + step.mem_buffers + step.mem_grads + step.mem_optimizer + step.mem_activations
    assert parts + step.mem_temporaries == step.mem_peak_allocated  # additive by definition, temporaries >= 0
    assert step.mem_temporaries >= 0
    assert step.mem_peak_allocated <= torch.cuda.max_memory_allocated()
    assert step.mem_peak_reserved >= step.mem_peak_allocated and step.mem_fragmentation >= 0
    assert step.time_forward > 0 and step.time_backward > 0 and step.time_optimizer > 0
