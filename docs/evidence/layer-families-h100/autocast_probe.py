"""The dtype every ATen and functional op returns under CUDA's bf16 autocast, for the fake step's CUDA rules.

    python3 docs/evidence/layer-families-h100/autocast_probe.py docs/evidence/layer-families-h100/autocast_cuda.csv

The fake step runs CPU kernels and applies CUDA's autocast policy by the name of each Python call
(tunebench.planning.cuda_semantics). A name-based list misses ops that CUDA casts without being on the list
themselves: a composite op (e.g. `square`) decomposes into one that is (`pow`), and autocast sees the
decomposition. This probe asks CUDA instead of the list: every op of torch's ATen bindings, torch.special,
torch.linalg and torch.nn.functional is called with bf16 and float32 tensors in a few argument patterns under
`torch.autocast("cuda", torch.bfloat16)`, and the dtype of its first tensor output is written. The CPU test
(tests/tunebench/planning/test_cuda_semantics.py) replays every row on CPU under the fake step's rules and wants the
same dtype.
"""

from __future__ import annotations

import csv
import inspect
import sys
import warnings

import torch
import torch.nn.functional as F

# Calls that change global state or block (a tensor may be truthy enough to reach them), or are random
# number generators whose first argument is not data.
SKIP_PREFIXES = ("set_", "_", "manual_seed", "seed", "use_deterministic", "save", "load", "compile", "empty",
                 "from_", "sym_", "is_", "can_cast", "promote_types", "result_type", "get_", "wait", "vmap",
                 # samplers: a probability out of range is a device-side assert, which ends the CUDA context
                 "bernoulli", "multinomial", "poisson", "binomial", "normal", "rand")
PATTERNS = {  # name -> how the call is made with input x (the second tensor y has x's shape and dtype)
    "x": lambda f, x, y: f(x),
    "x,y": lambda f, x, y: f(x, y),
    "x,2": lambda f, x, y: f(x, 2),
    "x,-1": lambda f, x, y: f(x, -1),
    "x,dim=-1": lambda f, x, y: f(x, dim=-1),
}


def namespaces():
    yield "torch", torch._C._VariableFunctions
    yield "torch.special", torch.special
    yield "torch.linalg", torch.linalg
    yield "torch.nn.functional", F


def candidates():
    for prefix, space in namespaces():
        for name in sorted(dir(space)):
            if name.startswith(SKIP_PREFIXES) or name.endswith("_"):
                continue
            f = getattr(space, name, None)
            if callable(f) and not inspect.isclass(f):
                yield f"{prefix}.{name}", f


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for item in out:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def probe(device: str, autocast_device: str, skip: int = 0, progress=None):
    """Yields (op, pattern, input dtype, output dtype) of every call that succeeds, from the `skip`-th op on; each op's
    index is written to `progress` (a file object) before it is called."""
    for index, (op, f) in enumerate(candidates()):
        if index < skip:
            continue
        if progress is not None:
            progress.write(f"{index}\n")
            progress.flush()
        for dtype in (torch.bfloat16, torch.float32):
            gen = torch.Generator(device=device).manual_seed(0)
            # inside (0.05, 0.95): a valid probability, logarithm, square root and arcsine argument
            x = torch.rand(4, 8, device=device, dtype=dtype, generator=gen) * 0.9 + 0.05
            y = torch.rand(4, 8, device=device, dtype=dtype, generator=gen) * 0.9 + 0.05
            for pattern, call in PATTERNS.items():
                try:
                    with warnings.catch_warnings(), torch.autocast(autocast_device, dtype=torch.bfloat16):
                        warnings.simplefilter("ignore")
                        out = first_tensor(call(f, x.clone(), y.clone()))
                except Exception:  # noqa: BLE001 - most patterns do not fit most ops
                    continue
                if out is not None and out.is_floating_point():
                    yield op, pattern, str(dtype).removeprefix("torch."), str(out.dtype).removeprefix("torch.")
                    break  # the first pattern that fits is the op's probe
        if device == "cuda":
            torch.cuda.synchronize()  # a device-side assert surfaces here and ends the child: the driver skips the op


def child(out: str, skip: int) -> None:
    """Probe from op `skip` on, appending rows to `out` as they come (a crash keeps the rows so far)."""
    with open(out + ".progress", "w") as progress, open(out, "a", newline="") as fh:
        writer = csv.writer(fh)
        for row in probe("cuda", "cuda", skip, progress):
            writer.writerow(row)


def main() -> None:
    """Run the probe in child processes: an op that crashes the process (some do, on bad arguments) is
    skipped, and the next child goes on after it."""
    import subprocess

    out = sys.argv[1]
    if len(sys.argv) > 3 and sys.argv[2] == "--child":
        child(out, int(sys.argv[3]))
        return
    with open(out, "w", newline="") as fh:
        csv.writer(fh).writerow(["op", "pattern", "input_dtype", "cuda_dtype"])
    skip, crashed = 0, []
    while True:
        done = subprocess.run([sys.executable, __file__, out, "--child", str(skip)], check=False)
        if done.returncode == 0:
            break
        with open(out + ".progress") as fh:
            last = int(fh.read().split()[-1])
        crashed.append(last)
        skip = last + 1
    names = [op for op, _ in candidates()]
    print(f"{torch.__version__}, {torch.cuda.get_device_name()}: {out}; crashed (skipped): "
          f"{[names[i] for i in crashed]}")


if __name__ == "__main__":
    main()
