"""FSDP2 plans the same on every torch (issue AB: torch 2.11 on the GPU image, 2.13 on CPU hosts): the cause pinned."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tunebench.experiment.sharding import Fsdp
from tunebench.planning import peak_rules
from tunebench.planning.fake_step import StepShape, predict_step
from tunebench.planning.sharded_step import fake_ranks


def _tracked_peak(tracker) -> int:
    from torch.distributed._tools import mem_tracker

    return sum(snap[mem_tracker._TOTAL_KEY] for snap in tracker.get_tracker_snapshot("peak").values())


def test_dtensor_sharding_propagation_allocates_nothing_the_step_tracker_sees():
    """DTensor works an op's output shape out on global-shape fake tensors: no memory on a GPU, none in the plan.
    torch 2.11 runs this in every step for tensor-list ops (clipping's foreach norm, fused AdamW); called here
    directly, as 2.11 calls it, on a 1024 x 1024 float32 weight sharded over 2 ranks (4 MiB whole)."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor._op_schema import OpSchema

    with fake_ranks(2) as mesh, FakeTensorMode(allow_non_fake_inputs=True):
        weight = distribute_tensor(torch.empty(1024, 1024), mesh, [Shard(0)])
        propagator = weight._op_dispatcher.sharding_propagator
        schema = OpSchema(torch.ops.aten.mul.Tensor, (weight._spec, weight._spec), {})
        tracker = MemTracker()
        with tracker:
            before = _tracked_peak(tracker)
            meta = propagator._propagate_tensor_meta_non_cached(schema)
            assert _tracked_peak(tracker) == before  # without the fix: + 3 x 4 MiB (two inputs, the output)
    assert tuple(meta.shape) == (1024, 1024)  # the propagation itself still ran: the global shape


def test_an_fsdp2_plan_is_the_same_whether_or_not_dtensor_cached_its_propagation(monkeypatch):
    """torch 2.13 caches DTensor's propagation after the warm-up step, torch 2.11 does not for tensor-list ops: the
    same plan with every cache cleared just before the measured step (2.11's path for every op) as without."""
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    shape = StepShape(model="preset:llama-small", dtype="bfloat16", micro_batch=2, seq_len=128, padded=False,
                      autocast_bf16=True, fsdp=Fsdp(), world=2)
    cached = predict_step(shape, gpu_arch=90)
    original = peak_rules.ignore_frozen_parameters

    def cleared_then(tracker, model):  # called after the warm-up step, just before the tracker starts
        _clear_sharding_prop_cache()
        return original(tracker, model)

    monkeypatch.setattr(peak_rules, "ignore_frozen_parameters", cleared_then)
    uncached = predict_step(shape, gpu_arch=90)
    assert uncached == cached
    # the peak is in backward, before any gradient of this step: no gradient, the saved activations alive
    assert cached["grads"] == 0 and cached["activations"] > 0
