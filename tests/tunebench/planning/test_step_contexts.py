"""The fake step's contexts against a real step: a last-bit band run's hooks (step_contexts.band_noise)."""

from __future__ import annotations

import pytest
import torch

from tunebench.planning.fake_step import StepShape, predict_step


def _real_peak(last_bit: bool) -> int:
    """MemTracker's peak over a real CPU training step (after a warm-up step) of a random llama-small in float32,
    the band's hooks registered as the trainer registers them."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import AutoModelForCausalLM

    from tunebench.experiment.last_bit import LastBitNoise
    from tunebench.experiment.models import load_config

    config = load_config("preset:llama-small")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    if last_bit:
        LastBitNoise(model, seed=1)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, fused=True)
    ids = torch.randint(3, config.vocab_size, (2, 64))

    def step() -> None:
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        step()
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    return int(peak["Total"])


@pytest.mark.parametrize("last_bit", [False, True])
def test_a_last_bit_band_run_is_planned_with_its_hooks_to_the_byte(last_bit):
    """The band's hooks allocate a draw, a moved copy and a new output at every linear layer: the plan of the step
    with them equals a real step's peak to the byte (and without them too), and is above the plan without them."""
    shape = StepShape(model="preset:llama-small", dtype="float32", micro_batch=2, seq_len=64, padded=False,
                      last_bit=last_bit)
    planned = predict_step(shape, round_to_cuda_blocks=False)["peak"]  # CPU semantics, storages as they are
    assert planned == _real_peak(last_bit)
    if last_bit:
        plain = StepShape(model="preset:llama-small", dtype="float32", micro_batch=2, seq_len=64, padded=False)
        assert planned > predict_step(plain, round_to_cuda_blocks=False)["peak"]
