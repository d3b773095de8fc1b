"""A last-bit band run's noise (tunebench.experiment.last_bit): one unit in the last place, on about half of every
linear output's elements, the gradient's path untouched."""

import pytest
import torch

from tunebench.experiment.last_bit import LastBitNoise


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_linear_output_moves_by_one_unit_in_the_last_place_on_half_its_elements(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 96)).to(dtype)
    x = torch.randn(40, 64, dtype=dtype)
    plain = model[0](x)
    noise = LastBitNoise(model, seed=7)
    assert len(noise.handles) == 2
    moved = model[0](x)
    up = torch.nextafter(plain, torch.full_like(plain, float("inf")))
    down = torch.nextafter(plain, torch.full_like(plain, float("-inf")))
    assert bool(((moved == plain) | (moved == up) | (moved == down)).all())  # never more than one unit
    share = (moved != plain).float().mean().item()
    assert 0.45 < share < 0.55, share  # 5 120 elements, each moved with probability 1/2
    assert bool((moved == up).any()) and bool((moved == down).any())
    noise.remove()
    assert torch.equal(model[0](x), plain)


def test_the_gradient_passes_through_unchanged():
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16, requires_grad=True)
    weights = torch.randn(4, 8)
    (layer(x) * weights).sum().backward()
    plain = x.grad.clone(), layer.weight.grad.clone()
    x.grad = None
    layer.weight.grad = None
    LastBitNoise(layer, seed=1)
    (layer(x) * weights).sum().backward()
    assert torch.equal(x.grad, plain[0]) and torch.equal(layer.weight.grad, plain[1])
