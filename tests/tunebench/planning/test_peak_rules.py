"""The prediction splits its peak by the scanner's rules (issue L): planning.peak_rules.ScannerRules against the
scanner's own replay (scanner.alloc_trace) on generated event sequences, and the CUDA semantics the fake step
applies for a GPU target (autocast's float32 ops, fused dropout) checked dtype by dtype."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scanner.alloc_trace import replay, resolve_phases, step_peak
from tunebench.planning.peak_rules import ScannerRules, StorageKeys

# One step's history: allocations and frees, tensors saved for backward (and released), gradients arriving,
# and the recompute of checkpointed layers (a layer begins, its children finish one by one).
EVENT = st.one_of(
    st.tuples(st.just("alloc"), st.integers(1, 64)),
    st.tuples(st.just("free"), st.integers(0, 50)),
    st.tuples(st.just("save"), st.integers(0, 50)),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("grad"), st.integers(1, 64)),
    st.tuples(st.just("layer"), st.just(0)),
    st.tuples(st.just("child"), st.just(0)),
)


def _run(events):
    """The same events through the scanner's tagged history + replay and through ScannerRules."""
    block = 512
    sizes, alive, saved = [], set(), set()
    total = 0
    # the scanner side: states (phase, saved, grads, optimizer, rc base tag, rc upto tag, claims) and tagged entries
    states, entries = [], []
    saved_bytes = grads = 0
    rc_base = rc_upto = None
    rules = ScannerRules(lambda: total, block=block)

    def sample(claims=False):
        states.append(("backward", saved_bytes, grads, 0, rc_base, rc_upto, claims))

    sample()
    for kind, value in events:
        tag = f"t:{len(states) - 1}"
        if kind in ("alloc", "grad"):
            size = value * block
            sizes.append(size)
            alive.add(len(sizes) - 1)
            total += size
            entries.append({"action": "alloc", "size": size, "user_metadata": tag})
            rules.after_op()
            if kind == "grad":
                grads += size

                def add(size=size):
                    rules.grads += size

                rules.event(add, claims_previous=True)
                sample(claims=True)
        elif kind == "free" and value in alive and value not in saved:
            alive.discard(value)
            total -= sizes[value]
            entries.append({"action": "free_requested", "size": sizes[value], "user_metadata": tag})
        elif kind == "save" and value in alive and value not in saved:
            saved.add(value)
            saved_bytes += sizes[value]
            rules.event(lambda v=saved_bytes: setattr(rules, "saved", v), claims_previous=True)
            sample(claims=True)
        elif kind == "release" and value in saved:
            saved.discard(value)
            saved_bytes -= sizes[value]
            rules.event(lambda v=saved_bytes: setattr(rules, "saved", v))
            sample()
        elif kind == "layer":
            rules.backward_open = True
            rules.recompute_pre(len(states))  # a new layer each time
            rc_base, rc_upto = len(states), None
            sample()
        elif kind == "child" and rc_base is not None:
            rules.recompute_post()
            rc_upto = len(states)
            sample(claims=True)
    rules.finish()
    sample()  # the step-end boundary
    rep = replay(entries, 0, 0, len(states) - 1, prefix="t:")
    peak = step_peak(states, resolve_phases(states, "after_backward", "clip", "optimizer", "other"), rep, 0,
                     len(states) - 1)
    return peak, rules


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENT, min_size=1, max_size=60))
def test_scanner_rules_split_the_peak_as_the_scanner_replays_it(events):
    peak, rules = _run(events)
    assert rules.best == peak.peak
    assert rules.best_state == (peak.activations, peak.grads)


def test_a_known_history():
    """A saved tensor made just before the peak counts as an activation there; a gradient arriving after it
    does not; a recomputed layer's growth counts until its children are done."""
    events = [("alloc", 4), ("save", 0), ("alloc", 8), ("layer", 0), ("alloc", 2), ("child", 0), ("alloc", 1),
              ("grad", 3)]
    peak, rules = _run(events)
    # peak: 4 + 8 + 2 + 1 + 3 blocks, after the gradient (which claims the interval it ended)
    assert rules.best == peak.peak == 18 * 512
    # activations: the saved 4 blocks + the recompute's 2 blocks (base at 12, last child at 14); grads 3 blocks
    assert rules.best_state == (peak.activations, peak.grads) == (6 * 512, 3 * 512)


# ------------------------------------------------------------------------------------------------ CUDA semantics
def _fake(*shape, dtype=torch.bfloat16, requires_grad=False):
    return torch.empty(shape, dtype=dtype, requires_grad=requires_grad)


@pytest.mark.parametrize("call, cuda_dtype", [
    (lambda x, w: torch.nn.functional.layer_norm(x, (8,), w), torch.float32),
    (lambda x, w: torch.nn.functional.softmax(x, dim=-1), torch.float32),
    (lambda x, w: x.softmax(-1), torch.float32),
    (lambda x, w: torch.exp(x), torch.float32),
    (lambda x, w: x.pow(2), torch.float32),
    (lambda x, w: x.sum(), torch.float32),
    (lambda x, w: torch.nn.functional.linear(x, w.expand(8, 8)), torch.bfloat16),  # lower precision on both
    (lambda x, w: torch.nn.functional.gelu(x), torch.bfloat16),  # on no list: the input's dtype
])
def test_cuda_autocast_policy_under_the_cpu_kernels(call, cuda_dtype):
    """torch's CUDA autocast lists (autocast_mode.cpp) on CPU fake tensors; the CPU policy alone keeps bf16."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tunebench.planning.cuda_semantics import applied

    with FakeTensorMode():
        x, w = _fake(4, 8), _fake(8, dtype=torch.float32)
        with torch.autocast("cpu", dtype=torch.bfloat16), applied(True):
            assert call(x, w).dtype == cuda_dtype
        with torch.autocast("cpu", dtype=torch.bfloat16), applied(False):
            assert call(x, w).dtype == torch.bfloat16
        with applied(True):
            assert call(x, w.bfloat16()).dtype == torch.bfloat16  # without autocast nothing is cast


@pytest.mark.parametrize("call, cuda_dtype", [
    (lambda x: x.sum(-1, True), torch.float32),  # input, dim, keepdim: sum's dtype is keyword-only
    (lambda x: torch.sum(x, -1, True), torch.float32),
    (lambda x: x.prod(-1, True), torch.float32),
    (lambda x: torch.softmax(x, -1, None), torch.float32),  # a positional None gives no dtype
    (lambda x: x.log_softmax(-1, torch.bfloat16), torch.bfloat16),  # an explicit positional dtype: left alone
    (lambda x: torch.softmax(x, -1, torch.float16), torch.float16),
    # (input, dim, _stacklevel, dtype)
    (lambda x: torch.nn.functional.softmax(x, -1, 3, torch.bfloat16), torch.bfloat16),
    (lambda x: x.sum(-1, True, dtype=torch.bfloat16), torch.bfloat16),
    (lambda x: x.norm(2, -1, True), torch.float32),
])
def test_cuda_set_dtype_ops_whatever_their_positional_arguments(call, cuda_dtype):
    """CUDA's fp32_set_opt_dtype policy: dtype float32 unless the call gives one, however many positional
    arguments it passes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tunebench.planning.cuda_semantics import applied

    with FakeTensorMode():
        x = _fake(4, 8)
        with torch.autocast("cpu", dtype=torch.bfloat16), applied(True):
            assert call(x).dtype == cuda_dtype


def test_cuda_dropout_keeps_a_one_byte_mask_and_follows_the_recompute():
    from torch.utils.checkpoint import checkpoint

    from tunebench.planning.cuda_semantics import applied, recompute_context

    saved = []

    def pack(t):
        saved.append(t.dtype)
        return t

    x = torch.randn(4, 8, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), applied(True):
        torch.nn.functional.dropout(x, 0.1, True)
    assert torch.bool in saved
    with applied(True):  # the recompute of a checkpointed block takes the same path (else: a metadata error)
        y = checkpoint(lambda t: torch.nn.functional.dropout(t, 0.1, True).sum(), x, use_reentrant=False,
                       context_fn=recompute_context)
    y.backward()
    assert x.grad is not None
    assert torch.nn.functional.dropout(x, 0.0, True) is x  # p = 0 is the identity on CUDA too


def test_a_checkpoint_input_dying_after_the_meter_is_removed_reaches_no_torn_down_tracker(monkeypatch):
    """verify's teardown (issue W): a checkpointed layer's input outlives the tracked step; its release must not
    ask the tracker (gone by then: `'NoneType' object has no attribute '_curr_mem_snap'`)."""
    import gc
    import sys

    from tunebench.planning.peak_rules import SavedTensorMeter

    layer = torch.nn.Linear(4, 4)
    layer.gradient_checkpointing = True
    model = torch.nn.Sequential(layer)
    tracker = {"alive": True}

    def current_total() -> int:
        if not tracker["alive"]:
            raise AttributeError("'NoneType' object has no attribute '_curr_mem_snap'")
        return 0

    raised = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: raised.append(info.exc_value))
    meter = SavedTensorMeter(model, ScannerRules(current_total, block=512), block=512)
    x = torch.randn(2, 4)
    with meter.hooks():
        model(x)
    assert meter.total == 512  # the input is held while the step runs
    meter.remove()
    tracker["alive"] = False
    del x
    gc.collect()
    assert raised == []
    assert meter.max == 512


def test_storage_keys_never_give_a_dead_storage_s_key_to_a_new_one():
    """Storages are told apart by address; the allocator reuses a dead storage's address (4 addresses for 20
    storages made one after the other here), so a key alone confused a new storage with a dead one, by chance."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    keys = StorageKeys()
    seen = []
    with FakeTensorMode():
        for size in range(100, 120):
            tensor = torch.empty(size)
            seen.append(keys(tensor.untyped_storage()))
            del tensor
    assert len(set(seen)) == 20
    alive = torch.empty(3)
    assert keys(alive.untyped_storage()) == keys(alive[1:].untyped_storage())  # one storage, one key
