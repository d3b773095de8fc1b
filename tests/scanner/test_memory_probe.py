"""Exact parameter / gradient / optimizer bytes and activation scaling, checked against analytic sizes."""

import pytest
import torch

from scanner import Scanner
from tests.fixtures.scanner import lm_dataset, numel_bytes, tiny_llama, train


def _scan(model, **kw):
    sc = Scanner(steps=kw.pop("steps", 2), output=None, log_to_trainer=False)
    trainer = train(model, sc, **kw)
    return sc.report.steps[0], trainer


def _adamw_bytes(trainer, trainable) -> int:
    """AdamW: exp_avg + exp_avg_sq of the parameter's dtype, plus a 0-dim `step` tensor per parameter."""
    opt = trainer.optimizer.optimizer
    steps = [s["step"] for s in opt.state.values()]
    # torch AdamW keeps `step` as a float32 0-dim tensor (on CPU here), one per parameter with state
    assert all(isinstance(s, torch.Tensor) and s.dtype == torch.float32 and s.dim() == 0 for s in steps)
    assert len(steps) == len(trainable)
    return 2 * numel_bytes(trainable) + 4 * len(trainable)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_full_finetune_exact_bytes(dtype):
    model = tiny_llama(dtype)
    r, trainer = _scan(model)
    params = list(model.parameters())
    assert r.mem_params == numel_bytes(params)
    assert r.mem_buffers == sum(b.numel() * b.element_size() for b in model.buffers())
    # every parameter is trainable, so at the end of backward one grad per parameter, same dtype
    assert r.mem_grads == numel_bytes(params)
    assert r.mem_optimizer == _adamw_bytes(trainer, params)
    if dtype == torch.float32:  # the brief's analytic form: two fp32 states per trainable parameter
        assert r.mem_optimizer == 2 * 4 * sum(p.numel() for p in params) + 4 * len(params)
    assert r.mem_temporaries is None and r.mem_peak_allocated is None  # allocator-only: absent on CPU
    assert r.mem_activations > 0


def test_tied_embeddings_counted_once():
    model = tiny_llama(tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    r, _ = _scan(model)
    assert r.mem_params == numel_bytes(model.parameters())  # parameters() already yields the tie once


def test_lora_exact_bytes():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(
        tiny_llama(),
        peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    r, trainer = _scan(model)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    assert 0 < len(trainable) < len(params)
    assert r.mem_params == numel_bytes(params)  # frozen base + adapters
    assert r.mem_grads == numel_bytes(trainable)  # frozen weights have no grad
    assert r.mem_optimizer == _adamw_bytes(trainer, trainable)


def test_activations_scale_with_batch_and_sequence():
    a = {}
    for batch, seq in [(2, 32), (4, 32), (2, 64)]:
        r, _ = _scan(tiny_llama(), dataset=lm_dataset(seq=seq), per_device_train_batch_size=batch)
        a[batch, seq] = r.mem_activations
    # Everything saved for backward is per-token except the rotary cos/sin tables (shape 1 x seq x head_dim,
    # shared by the batch): doubling the batch doubles all but those few KiB (< 1% here); doubling the
    # sequence doubles everything, the tables included (SDPA keeps no seq^2 attention matrix).
    batch_ratio = a[4, 32] / a[2, 32]
    seq_ratio = a[2, 64] / a[2, 32]
    assert 1.99 <= batch_ratio <= 2.0, batch_ratio
    assert 1.995 <= seq_ratio <= 2.005, seq_ratio
    rotary = 2 * 32 * 16 * 4  # cos + sin, fp32, head_dim 16
    assert 2 * a[2, 32] - a[4, 32] >= rotary


def test_gradient_checkpointing_reports_fewer_activations():
    r_plain, _ = _scan(tiny_llama(), dataset=lm_dataset(seq=64))
    r_gc, _ = _scan(tiny_llama(), dataset=lm_dataset(seq=64), gradient_checkpointing=True)
    assert r_gc.micro_batches == 1 and r_gc.time_backward > 0
    # checkpointed layers keep only their inputs (counted) instead of every intermediate
    assert 0 < r_gc.mem_activations < r_plain.mem_activations / 2


def test_weights_made_during_the_step_are_not_activations():
    """FSDP2 all-gathers each weight into a new nn.Parameter before use and frees it after forward; autograd
    saves views of it (`weight.t()`). Mimic that on the untied lm_head: the saved weight view must not count
    as an activation (the parameter set the scanner took at the start does not contain it)."""

    def regather(module, args):
        module.weight = torch.nn.Parameter(module.weight.detach().clone())

    plain, _ = _scan(tiny_llama(tie_word_embeddings=False))
    model = tiny_llama(tie_word_embeddings=False)
    model.lm_head.register_forward_pre_hook(regather)
    fresh, _ = _scan(model)
    assert model.lm_head.weight.numel() * 4 == 256 * 64 * 4  # the 64 KiB a wrong count would add
    assert fresh.mem_activations == plain.mem_activations


def test_a_freed_weights_address_is_no_longer_excluded():
    """Saved tensors on a parameter's storage are not activations, told by the storage's address. A weight
    freed during the scan (the one `regather` above replaces) hands its address back to the allocator, which
    may give it to an activation (the logits, of its size, did in a busy test process: 64 KiB missing): the
    address stops being excluded when the last tensor on it dies, not before (a view keeps it)."""
    import gc

    from scanner.memory import storage_key
    from scanner.memory_probe import MemoryProbe

    model = tiny_llama(tie_word_embeddings=False)
    probe = MemoryProbe(model, None)
    try:
        old = model.lm_head.weight
        address = storage_key(old)[0]
        model.lm_head.weight = torch.nn.Parameter(old.detach().clone())
        view = old.t()
        del old
        gc.collect()
        assert address in probe._excluded  # the view holds the storage (and its base)
        del view
        gc.collect()
        assert address not in probe._excluded
        assert storage_key(model.lm_head.weight)[0] not in probe._excluded  # made after the scan began
        assert storage_key(model.model.embed_tokens.weight)[0] in probe._excluded
    finally:
        probe.remove()
