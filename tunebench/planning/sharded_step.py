"""FSDP in the fake step: the model sharded by accelerate's own FSDP preparation over a fake process group, so one
rank's step allocates what a real rank's does (its shards, the gathered layers, the reduce-scattered gradients),
without GPUs or a second process. FSDP2 (`fully_shard`) and FSDP1 (`FullyShardedDataParallel`, flat parameters)
alike.

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
        with sharding_propagation_unseen():
            # made before the fake tensor mode: the mesh reads real values
            yield init_device_mesh("cpu", (world,), mesh_dim_names=(MESH_DIM,))
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def sharding_propagation_unseen():
    """DTensor's sharding propagation without the step's tracker seeing it. DTensor works out an op's output shape
    by running the op on fake tensors of the global shapes (ShardingPropagator._propagate_tensor_meta_non_cached):
    on a GPU rank they are its own fake tensors and hold no memory. In the fake step they are made in the planner's
    fake tensor mode, under MemTracker, which counted them as allocated: at the optimizer step, the whole unsharded
    model's parameters, gradients and two AdamW states at once. Whether that happens in the measured step is torch's
    caching: torch 2.11's C++ dispatch cannot key an op with tensor-list arguments (the foreach norm and multiply of
    gradient clipping, fused AdamW) and propagates them again at every step (a 14B's FSDP2 plan at 2 ranks:
    312 GiB a rank instead of 105.87); torch 2.13 keys them, so only the first (warm-up) step propagates. The
    propagation here runs with every dispatch mode off but the step's own fake tensor mode, as on a GPU: the plan is
    the same on both."""
    from torch._guards import detect_fake_mode
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    from torch.utils._python_dispatch import _disable_current_modes

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def unseen(self, op_schema):
        fake_mode = detect_fake_mode()
        with _disable_current_modes(), fake_mode if fake_mode is not None else contextlib.nullcontext():
            return original(self, op_schema)

    ShardingPropagator._propagate_tensor_meta_non_cached = unseen
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original


def plugin_of(fsdp: Fsdp, mixed_precision: str):
    """accelerate's FSDP plugin as the Trainer makes it from `fsdp_config` (TrainingArguments._process_fsdp_args),
    with the Accelerator's mixed precision policy."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    common = {"fsdp_version": fsdp.version, "auto_wrap_policy": "transformer_based_wrap",
              "activation_checkpointing": fsdp.activation_checkpointing, "cpu_offload": fsdp.offload,
              "cpu_ram_efficient_loading": False, "state_dict_type": "FULL_STATE_DICT"}
    if fsdp.version == 2:
        plugin = FullyShardedDataParallelPlugin(**common, reshard_after_forward=fsdp.reshard_after_forward)
    else:  # FSDP1 with original parameters and the prefetch asked for (the Trainer's default: none). It also syncs
        # the module states from rank 0 at set-up, a broadcast that holds nothing during a step (and that
        # accelerate's plugin refuses to set up without a GPU): left out.
        plugin = FullyShardedDataParallelPlugin(**common, reshard_after_forward=fsdp.strategy,
                                                forward_prefetch=fsdp.forward_prefetch,
                                                backward_prefetch=fsdp.backward_prefetch, use_orig_params=True,
                                                sync_module_states=False)
    if mixed_precision != "no":
        plugin.set_mixed_precision(mixed_precision)
    return plugin


def shard(model, fsdp: Fsdp, mesh, mixed_precision: str):
    """The model as accelerate's Accelerator prepares it for FSDP (FSDP2: checkpointing first, then the units), on
    the fake ranks of `mesh`. Call inside the fake tensor mode, with the model's parameters fake."""
    import torch
    from accelerate.utils import fsdp_utils

    plugin = plugin_of(fsdp, mixed_precision)
    if fsdp.version == 1:
        _as_trainer_sets_up_peft(model, plugin)
        return _shard_flat(model, plugin, mixed_precision)
    # What fsdp2_prepare_model and fsdp2_apply_ac read of the Accelerator.
    accelerator = types.SimpleNamespace(
        state=types.SimpleNamespace(fsdp_plugin=plugin), torch_device_mesh=mesh,
        parallelism_config=types.SimpleNamespace(fsdp_dim_names=(MESH_DIM,)), mixed_precision=mixed_precision,
        is_main_process=True, device=torch.device("cpu"))
    _as_accelerate_sees_4bit(model, plugin, accelerator)
    with _plain_logging(fsdp_utils), _no_state_dict(model):
        plugin.set_auto_wrap_policy(model)
        if fsdp.activation_checkpointing:
            model = fsdp_utils.fsdp2_apply_ac(accelerator, model)
        return fsdp_utils.fsdp2_prepare_model(accelerator, model)


def _as_trainer_sets_up_peft(model, plugin) -> None:
    """The Trainer's own FSDP set-up of a PEFT model (transformers' update_fsdp_plugin_peft), which it does where it
    makes the optimizer after the model is wrapped: FSDP1 only (FSDP2 makes it before). Every trainable leaf layer (a
    LoRA A or B) becomes a unit of its own beside the transformer layers, so a layer's flat parameter holds its
    frozen base only, which is neither upcast nor given a flat gradient; with a 4-bit base stored in a floating
    dtype, FSDP's mixed precision computes in that dtype."""
    from peft import PeftModel
    from transformers.integrations.fsdp import update_fsdp_plugin_peft

    if isinstance(model, PeftModel):
        update_fsdp_plugin_peft(model, types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=plugin)))


def _as_accelerate_sees_4bit(model, plugin, accelerator) -> None:
    """fsdp2_prepare_model tells bitsandbytes' 4-bit weights by their class (Params4bit), which a fake tensor cannot
    keep: what it does with them, done here by the weights' own flag (bnb_quantized). A model with 4-bit weights gets
    no float32 upcast of its trainable weights; uint8-stored ones (frozen, not floating) are left out of sharding,
    whole on every rank."""
    # the layers that own a 4-bit weight (not PEFT's wrappers, whose `weight` is their base layer's); a real
    # Params4bit accelerate sees itself
    quantized = [m for m in model.modules() if getattr(m._parameters.get("weight"), "bnb_quantized", False)
                 and type(m.weight).__name__ != "Params4bit"]
    if not quantized:
        return
    accelerator.mixed_precision = "no"  # (the policy's bf16 compute is the plugin's, set before)
    whole = [m for m in quantized if not m.weight.requires_grad and not m.weight.is_floating_point()]
    if whole:
        plugin.ignored_modules = whole


@contextlib.contextmanager
def _no_state_dict(model):
    """fsdp2_prepare_model takes the model's state dict for CPU-RAM-efficient loading, which the plan does not do;
    a quantized weight's state dict reads values (bitsandbytes' QuantState.as_dict), which fake tensors have not."""
    model.state_dict = lambda *args, **kwargs: {}
    try:
        yield
    finally:
        del model.state_dict


def _shard_flat(model, plugin, mixed_precision: str):
    """FSDP1 as accelerate's Accelerator.prepare_model wraps it (its FSDP branch, which is not a function of its own
    to call): FullyShardedDataParallel over the auto-wrap policy's units, FSDP's activation checkpointing after,
    and every trainable flat parameter upcast to float32 under mixed precision (accelerate's DeepSpeed-like
    master weights)."""
    import functools

    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    plugin.set_auto_wrap_policy(model)
    model = FullyShardedDataParallel(
        model, sharding_strategy=plugin.sharding_strategy or plugin.reshard_after_forward,
        cpu_offload=plugin.cpu_offload, auto_wrap_policy=plugin.auto_wrap_policy,
        mixed_precision=plugin.mixed_precision_policy, sync_module_states=plugin.sync_module_states,
        backward_prefetch=plugin.backward_prefetch, forward_prefetch=plugin.forward_prefetch,
        use_orig_params=plugin.use_orig_params, ignored_modules=plugin.ignored_modules,
        limit_all_gathers=plugin.limit_all_gathers, device_id=torch.device("cpu"))
    if plugin.activation_checkpointing:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl,
            apply_activation_checkpointing,
            checkpoint_wrapper,
        )

        apply_activation_checkpointing(model, auto_wrap_policy=plugin.auto_wrap_policy, checkpoint_wrapper_fn=
                                       functools.partial(checkpoint_wrapper,
                                                         checkpoint_impl=CheckpointImpl.NO_REENTRANT))
    if mixed_precision != "no":
        for unit in FullyShardedDataParallel.fsdp_modules(model):
            flat = getattr(unit, "_flat_param", None) if unit._has_params else None
            if flat is not None and flat.dtype != torch.float32 and flat.requires_grad:
                flat.data = flat.data.to(torch.float32)
                unit._handle._orig_param_dtype = torch.float32
    return model


@contextlib.contextmanager
def flat_storage_checks():
    """FSDP1 tells storages apart by their data pointers, which a fake tensor does not have (always 0): whether a flat
    parameter's storage is allocated (by its size instead), whether two tensors share a storage, and whether a unit
    is already resharded when backward ends (both by the storage itself), for the fake step's duration. Without the
    last, a unit whose parameters are all frozen and whose inputs need no gradient (the root of a LoRA model, whose
    trainable layers are units of their own) would stay gathered after backward, as it does not on a GPU."""
    from torch.distributed.fsdp import _flat_param, _runtime_utils

    originals = (_flat_param._data_ptr_allocated, _flat_param._same_storage, _runtime_utils._catch_all_reshard)
    _flat_param._data_ptr_allocated = lambda tensor: tensor.untyped_storage().size() > 0
    _flat_param._same_storage = lambda a, b: _storage_of(local(a)) == _storage_of(local(b))
    _runtime_utils._catch_all_reshard = _reshard_unless_sharded
    try:
        yield
    finally:
        _flat_param._data_ptr_allocated, _flat_param._same_storage, _runtime_utils._catch_all_reshard = originals


def _storage_of(tensor) -> int:
    return tensor.untyped_storage()._cdata


def _reshard_unless_sharded(state) -> None:
    """torch's catch-all reshard at the end of backward, its already-resharded check made by storage."""
    from torch.distributed.fsdp import _runtime_utils

    handle = state._handle
    if handle is None:
        return
    flat = handle.flat_param
    if _storage_of(flat) == _storage_of(flat._local_shard) and not handle._skipped_use_sharded_views:
        return
    _runtime_utils._reshard(state, handle, _runtime_utils._should_free_in_backward(state, handle))


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


def held_between_steps(model, block: int) -> int:
    """Bytes a rank keeps from one step to the next that are none of its parameters, gradients (as the model's
    parameters hold them) or optimizer state: FSDP1's sharded flat gradients (zero_grad clears the original
    parameters' views, not the flat parameter's own gradient). The scanner counts them as `other`."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    from tunebench.planning.peak_rules import rounded

    storages = {}
    for unit in FullyShardedDataParallel.fsdp_modules(model):
        grad = getattr(getattr(unit, "_flat_param", None), "grad", None)
        if grad is not None:
            storages[_storage_of(grad)] = rounded(grad.untyped_storage().nbytes(), block)
    return sum(storages.values())


def rank_holdings(model, block: int) -> tuple[int, int]:
    """(what the rank's parameters hold, what it keeps between steps besides them). The first is the scanner's
    `params`: MemTracker also files the layers gathered at the peak (registered as the modules' parameters while in
    use) as parameters, the scanner as temporaries. The second is its `other`: FSDP1's flat gradients, and a 4-bit
    layer's quantization state, which a sharded weight no longer carries."""
    from tunebench.planning.quantized import module_quant_state_bytes

    return shard_bytes(model, block), held_between_steps(model, block) + module_quant_state_bytes(model, block)


def shard_bytes(model, block: int) -> int:
    """Bytes of the model's parameters as this rank holds them (FSDP: its shards), each storage once."""
    from tunebench.planning.peak_rules import rounded

    storages = {}
    for p in model.parameters():
        storage = local(p).untyped_storage()
        storages[storage._cdata] = rounded(storage.nbytes(), block)
    return sum(storages.values())


def local(tensor):
    """What this rank holds of a tensor: a DTensor's local shard, else the tensor."""
    inner = getattr(tensor, "_local_tensor", None)
    return inner if inner is not None else tensor
