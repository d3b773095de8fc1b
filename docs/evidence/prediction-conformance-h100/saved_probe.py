"""What one training step of a model saves for backward, op by op, on a real GPU or under the CPU fake step.

Diffing the two lists finds where the memory prediction takes a different path from the GPU (issue L):
    python3 docs/evidence/prediction-conformance-h100/saved_probe.py --device cuda --out gpu.json MODEL...  # GPU
    python3 docs/evidence/prediction-conformance-h100/saved_probe.py --device fake --out fake.json MODEL...  # here
MODEL is a preset or a config.json folder; --layers overrides the layer count (keeps the run small).
"""

from __future__ import annotations

import argparse
import collections
import json

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class LastOp(TorchDispatchMode):
    """Remembers the newest aten op, so a saved tensor can be named by the op that made it."""

    def __init__(self):
        super().__init__()
        self.name = ""
        self.made: dict[int, str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.name = func.__name__
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.made.setdefault(_key(t), func.__name__)
        return out


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _build(model_name: str, layers: int | None, device: str, checkpointing: bool):
    from transformers import AutoModelForCausalLM

    from tunebench.experiment.models import load_config

    config = load_config(model_name)
    if layers:
        for name in ("num_hidden_layers", "n_layer"):
            if hasattr(config, name):
                setattr(config, name, layers)
    with torch.device("meta" if device == "fake" else device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    model.train()
    return model, config


def probe(model_name: str, layers: int | None, device: str, batch: int, seq: int, checkpointing: bool,
          mask: bool, autocast: bool) -> dict:
    model, config = _build(model_name, layers, device, checkpointing)
    params = {_key(p) for p in model.parameters()} | {_key(b) for b in model.buffers()}
    saved: dict[int, dict] = {}
    ops = LastOp()
    module_stack: list[str] = []
    names = {id(m): n for n, m in model.named_modules()}

    def enter(module, args):
        module_stack.append(names[id(module)])

    def leave(module, args, output):
        module_stack.pop()

    hooks = [m.register_forward_pre_hook(enter) for m in model.modules()]
    hooks += [m.register_forward_hook(leave) for m in model.modules()]

    def pack(t):
        k = _key(t)
        if k not in params and not isinstance(t, torch.nn.Parameter) and k not in saved:
            saved[k] = dict(module=module_stack[-1] if module_stack else "", op=ops.made.get(k, "?"),
                            shape=list(t.shape), dtype=str(t.dtype), view=t._base is not None,
                            storage=t.untyped_storage().nbytes())
        return t

    def step():
        ids = torch.randint(3, config.vocab_size, (batch, seq), device="cpu" if device == "fake" else device)
        amp = torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=autocast)
        with ops, amp, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids) if mask else None, labels=ids,
                         use_cache=False).loss
        loss.backward()

    if device == "fake":
        from torch._subclasses.fake_tensor import FakeTensorMode

        from tunebench.planning.attention_kernels import gpu_attention
        from tunebench.planning.cuda_semantics import applied
        from tunebench.planning.fake_model import to_fake as _to_fake

        with FakeTensorMode(allow_non_fake_inputs=True), applied(True):
            _to_fake(model)
            params = {_key(p) for p in model.parameters()} | {_key(b) for b in model.buffers()}
            with gpu_attention(90, []):
                step()
        peak = None
    else:
        torch.cuda.reset_peak_memory_stats()
        step()
        peak = torch.cuda.max_memory_allocated()
    for h in hooks:
        h.remove()
    by_op = collections.Counter()
    for entry in saved.values():
        by_op[f"{entry['op']} {entry['dtype']}"] += entry["storage"]
    return dict(model=model_name, saved_total=sum(e["storage"] for e in saved.values()), by_op=dict(by_op),
                saved=list(saved.values()), peak=peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--device", choices=["cuda", "fake"], required=True)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--mask", action="store_true", help="pass an all-ones attention mask, as TRL's collator does")
    parser.add_argument("--autocast", action="store_true", help="bf16 autocast, as the Trainer with bf16 runs")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results = [probe(m, args.layers, args.device, args.batch, args.seq, args.checkpointing,
                     args.mask, args.autocast) for m in args.models]
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)
    for r in results:
        print(r["model"], r["saved_total"], r["peak"])


if __name__ == "__main__":
    main()
