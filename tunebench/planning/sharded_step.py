"""FSDP2 in the fake step: the model sharded by accelerate's own FSDP2 preparation over a fake process group, so
one rank's step allocates what a real rank's does (its shards, the gathered layers, the reduce-scattered
gradients), without GPUs or a second process.

torch's `fake` backend is a process group whose collectives return at once and move nothing; under fake tensors
nothing needs to move. `fully_shard` then builds rank 0's DTensor shards (FSDP2 pads every rank's shard to the
same size), and its forward and backward hooks allocate and free the gathered parameters and the gradients to
reduce exactly as on a GPU rank. The sharding itself is accelerate's (`fsdp2_prepare_model`, `fsdp2_apply_ac`):
which modules become units, which stay whole between forward and backward (the tail: final norm and output
embedding), which weights are upcast to float32 master copies (trainable ones, unless the base is quantized),
and which 4-bit weights it leaves whole on every rank (uint8-stored ones). The FSDP plugin is built from the
run's `fsdp_config` as transformers' TrainingArguments builds it.
"""

from __future__ import annotations

import contextlib
import logging
import types

from tunebench.experiment.sharding import Fsdp

logger = logging.getLogger(__name__)

MESH_DIM = "dp_shard"


@contextlib.contextmanager
def fake_ranks(world: int):
    """A fake process group of `world` ranks (this process is rank 0) and its device mesh, for the block's
    duration. Refuses inside a process that already has a process group: it would be replaced."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("FSDP cannot be planned inside a process that already has a process group")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        # made before the fake tensor mode: the mesh reads real values
        yield init_device_mesh("cpu", (world,), mesh_dim_names=(MESH_DIM,))
    finally:
        dist.destroy_process_group()


def plugin_of(fsdp: Fsdp, mixed_precision: str):
    """accelerate's FSDP plugin as the Trainer makes it from `fsdp_config` (TrainingArguments._process_fsdp_args),
    with the Accelerator's mixed precision policy."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap", reshard_after_forward=fsdp.reshard_after_forward,
        activation_checkpointing=fsdp.activation_checkpointing, cpu_offload=fsdp.offload,
        cpu_ram_efficient_loading=False, state_dict_type="FULL_STATE_DICT")
    if mixed_precision != "no":
        plugin.set_mixed_precision(mixed_precision)
    return plugin


def shard(model, fsdp: Fsdp, mesh, mixed_precision: str):
    """The model as accelerate's Accelerator prepares it for FSDP2 (checkpointing first, then the units), on the
    fake ranks of `mesh`. Call inside the fake tensor mode, with the model's parameters fake."""
    import torch
    from accelerate.utils import fsdp_utils

    plugin = plugin_of(fsdp, mixed_precision)
    # What fsdp2_prepare_model and fsdp2_apply_ac read of the Accelerator.
    accelerator = types.SimpleNamespace(
        state=types.SimpleNamespace(fsdp_plugin=plugin), torch_device_mesh=mesh,
        parallelism_config=types.SimpleNamespace(fsdp_dim_names=(MESH_DIM,)), mixed_precision=mixed_precision,
        is_main_process=True, device=torch.device("cpu"))
    with _plain_logging(fsdp_utils):
        plugin.set_auto_wrap_policy(model)
        if fsdp.activation_checkpointing:
            model = fsdp_utils.fsdp2_apply_ac(accelerator, model)
        return fsdp_utils.fsdp2_prepare_model(accelerator, model)


@contextlib.contextmanager
def _plain_logging(module):
    """accelerate's logger refuses to log before an Accelerator exists in the process; the plan has none. What it
    says (which weights it upcasts, each by name) is the run's to log, not the plan's: debug level here."""
    original = module.logger
    module.logger = logging.getLogger(f"{__name__}.accelerate")
    module.logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        module.logger = original


def local(tensor):
    """What this rank holds of a tensor: a DTensor's local shard, else the tensor."""
    inner = getattr(tensor, "_local_tensor", None)
    return inner if inner is not None else tensor
