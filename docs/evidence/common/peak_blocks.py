"""What is live at the allocator's peak: blocks allocated during a recorded window, grouped by call site.

Usage: python docs/evidence/common/peak_blocks.py SNAPSHOT.pickle [--top 25]
Reads a `torch.cuda.memory._snapshot()` pickle (e.g. the Scanner's `memory_snapshot`) recorded with Python
stacks, replays its alloc/free history, and lists the blocks alive at the peak that were allocated inside the
window, by the innermost model-code frame (transformers / peft / torch.nn / torch.utils.checkpoint).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections import defaultdict

INTERESTING = ("transformers/", "peft/", "torch/nn/", "torch/utils/checkpoint", "torch/autograd", "scanner/")


def site(frames: list[dict]) -> str:
    for f in frames:
        name = f.get("filename", "")
        if any(k in name for k in INTERESTING):
            return f"{name.split('site-packages/')[-1]}:{f.get('line')} {f.get('name')}"
    return frames[0].get("name", "?") if frames else "<no stack>"


def live_at_peak(entries: list[dict]) -> tuple[int, int, dict[int, dict]]:
    """Replay a device trace's alloc/free history: (peak bytes above the trace's start, the index of the entry
    that reached it, or -1 when nothing rose above the start; {address: alloc entry} of the blocks alive then)."""
    current = best = 0
    best_index = -1
    for i, e in enumerate(entries):
        if e["action"] == "alloc":
            current += e["size"]
        elif e["action"] == "free_requested":
            current -= e["size"]
        if current > best:
            best, best_index = current, i
    live: dict[int, dict] = {}
    for e in entries[: best_index + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    return best, best_index, live


def analyse(snapshot: dict, device: int = 0, top: int = 25) -> dict:
    entries = snapshot["device_traces"][device]
    best, best_index, live = live_at_peak(entries)
    groups: dict[str, list] = defaultdict(lambda: [0, 0])
    for e in live.values():
        g = groups[site(e.get("frames", []))]
        g[0] += e["size"]
        g[1] += 1
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]
    peak_entry = entries[best_index] if best_index >= 0 else {}
    return {
        "window_peak_delta": best,  # bytes above the allocated total at the start of the window
        "live_window_bytes": sum(e["size"] for e in live.values()),
        "peak_entry": {k: peak_entry.get(k) for k in ("action", "size", "user_metadata")}
        | {"site": site(peak_entry.get("frames", []))},
        "sites": [{"site": k, "bytes": v[0], "blocks": v[1]} for k, v in ranked],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args(argv)
    with open(a.snapshot, "rb") as fh:
        snap = pickle.load(fh)
    print(json.dumps(analyse(snap, a.device, a.top), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
