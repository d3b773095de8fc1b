"""The fake step's peak, MemTracker's snapshot of it, in the scanner's categories (on a CUDA target the scanner's
own split of the same peak: planning.peak_rules)."""

from __future__ import annotations

import logging

from tunebench.planning.peak_rules import MEMTRACKER_TYPES, rounded

logger = logging.getLogger(__name__)

# prediction category -> MemTracker reference types: the scanner's, and the batch the fake step makes itself (the
# Trainer's batch is an input MemTracker files apart; in a real step it is a temporary of the scanner's)
CATEGORIES = {**MEMTRACKER_TYPES, "temporaries": (*MEMTRACKER_TYPES["temporaries"], "Input")}


def categories(snapshot: dict, optimizer, rules, block: int, params: int | None = None) -> dict:
    """The tracker's peak as the scanner's categories (the scanner's own split of it on a CUDA target); `params`:
    the parameters' own bytes where MemTracker's figure holds more (FSDP2's gathered layers: temporaries)."""
    device = next(iter(snapshot))
    peak = {getattr(k, "value", str(k)): int(v) for k, v in snapshot[device].items()}
    out = {name: sum(peak.get(r, 0) for r in refs) for name, refs in CATEGORIES.items()}
    if params is not None and params < out["params"]:
        out["temporaries"] += out["params"] - params
        out["params"] = params
    # MemTracker files what the optimizer step allocates under its optimizer state; the scanner's `optimizer`
    # is the state alone (every tensor in optimizer.state), the rest of the step's transients are temporaries.
    state = state_bytes(optimizer, block)
    out["temporaries"] += max(0, out["optimizer"] - state)
    out["optimizer"] = state
    out["peak"] = sum(out.values())
    if rules is not None and rules.ops:
        # the scanner's split of the same peak: saved storages (+ recompute) and accumulated gradients at its interval
        activations, grads = rules.best_state
        named = out["params"] + out["buffers"] + out["optimizer"]
        out["activations"], out["grads"] = activations, grads
        out["temporaries"] = max(0, out["peak"] - named - activations - grads)
    return out


def state_bytes(optimizer, block: int) -> int:
    import torch

    from tunebench.planning.sharded_step import local

    return sum(rounded(local(t).untyped_storage().nbytes(), block)
               for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor))
