"""Issue X, on a GPU: where a run's whole-run memory peak is. One experiment (its spec.json, as the harness wrote
it) runs under torch's allocator history; the blocks alive at the peak are grouped by the Python frames that
allocated them. For torch.compile's max-autotune, whose step 1 compiles and benchmarks matmul choices while the
step's own tensors are alive, this says which benchmark buffers set the peak.

Usage: python docs/evidence/acceleration-memory-h100/memory_history.py OUT_JSON SPEC_JSON [--entries N]
"""

from __future__ import annotations

import argparse
import collections
import json
import runpy
import sys

import torch

# Frames that say nothing about who allocated (wrappers, dispatch, context managers).
_NOISE = ("torch/utils/_contextlib", "torch/_ops.py", "torch/utils/_python_dispatch", "contextlib.py",
          "torch/_tensor.py", "torch/nn/modules/module.py", "functools.py", "torch/_compile.py")


def _short(frame: dict) -> str:
    name = frame.get("filename", "?")
    for marker in ("site-packages/", "/work/main/"):
        if marker in name:
            name = name.split(marker, 1)[1]
    return f"{name}:{frame.get('line', 0)}:{frame.get('name', '?')}"


def _stack(frames: list[dict], depth: int = 14) -> list[str]:
    kept = [_short(f) for f in frames if not any(n in f.get("filename", "") for n in _NOISE)]
    return kept[:depth]


def analyse(snapshot: dict, top: int = 30) -> dict:
    """The peak of the allocated bytes the trace saw and the blocks alive there, grouped by allocating stack."""
    events = snapshot["device_traces"][0] if snapshot.get("device_traces") else []
    live: dict[int, tuple[int, int]] = {}
    total = peak = peak_at = 0
    for i, event in enumerate(events):
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], i)
            total += event["size"]
            if total > peak:
                peak, peak_at = total, i
        elif event["action"] == "free_completed" and event["addr"] in live:
            total -= live.pop(event["addr"])[0]
    # replay to the peak: the blocks alive there
    alive: dict[int, int] = {}
    for i, event in enumerate(events[:peak_at + 1]):
        if event["action"] == "alloc":
            alive[event["addr"]] = i
        elif event["action"] == "free_completed":
            alive.pop(event["addr"], None)
    groups: dict[tuple, list[int]] = collections.defaultdict(lambda: [0, 0])
    for i in alive.values():
        key = tuple(_stack(events[i].get("frames", [])))
        groups[key][0] += events[i]["size"]
        groups[key][1] += 1
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]
    return {"events": len(events), "trace_peak_bytes": peak, "peak_event": peak_at,
            "peak_stack": _stack(events[peak_at].get("frames", []), 16) if events else [],
            "alive_at_peak": [{"bytes": b, "blocks": n, "stack": list(k)} for k, (b, n) in ranked]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("spec")
    parser.add_argument("--entries", type=int, default=5_000_000)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.memory._record_memory_history(max_entries=args.entries, stacks="python")
    sys.argv = ["tunebench.experiment.train", "--spec", args.spec]
    code: object = 0
    try:
        runpy.run_module("tunebench.experiment.train", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code
    except BaseException as error:  # interrupted (the call's budget): step 1's compile, the peak, is in the trace
        code = repr(error)
    summary: dict = {"exit": code, "spec": args.spec}
    if cuda:
        summary["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        try:
            summary.update(analyse(torch.cuda.memory._snapshot()))
        except Exception as error:  # the run's figures still come back
            summary["analysis_error"] = repr(error)
        torch.cuda.memory._record_memory_history(enabled=None)
    with open(args.out, "w") as handle:
        json.dump(summary, handle, indent=1)
    print(f"wrote {args.out}: max_memory_allocated {summary.get('max_memory_allocated')}, "
          f"trace peak {summary.get('trace_peak_bytes')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
