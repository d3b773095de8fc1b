"""Debug aid (CUDA): the replayed allocator total at every scanner tag vs torch.cuda.memory_allocated().

Usage: python3 docs/evidence/gpu/debug_replay.py [gc]   (gc: gradient checkpointing + GA 2 on a tiny Llama)
"""

import collections
import sys
import threading
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import scanner.memory_probe as probe_mod  # noqa: E402
from scanner import Scanner  # noqa: E402
from tests.fixtures.scanner import lm_dataset, tiny_llama, train  # noqa: E402

true_at, threads, captured = {}, {}, {}
orig_sample = probe_mod.StepProbe._sample


def sample(self, claims_previous=False):
    n = len(self._states)
    orig_sample(self, claims_previous)
    if len(self._states) > n:
        tag = len(self._states) - 1
        true_at[tag] = torch.cuda.memory_allocated()
        threads[tag] = threading.get_ident()


probe_mod.StepProbe._sample = sample
orig_replay = probe_mod.replay


def rep(entries, start, first, last):
    captured["entries"], captured["start"], captured["first"] = entries, start, first
    r = orig_replay(entries, start, first, last)
    captured["rep"] = r
    return r


probe_mod.replay = rep
orig_sp = probe_mod.step_peak


def sp(states, phases, r, first, end):
    out = orig_sp(states, phases, r, first, end)
    captured["states"], captured["phases"], captured["sp"] = states, phases, out
    return out


probe_mod.step_peak = sp
gc_on = len(sys.argv) > 1 and sys.argv[1] == "gc"
model = tiny_llama(torch.float32).cuda()
s = Scanner(steps=2, output=None)
train(
    model,
    s,
    lm_dataset(seq=64),
    use_cpu=False,
    output_dir="/tmp/dbg",
    gradient_checkpointing=gc_on,
    gradient_accumulation_steps=2,
)
r = captured["rep"]
print("actions:", collections.Counter(e.get("action") for e in captured["entries"]))
print("stale:", r.stale, "before start:", r.before_start, "start:", captured["start"], "first tag:", captured["first"])
print("threads:", collections.Counter(threads.values()))
bad = 0
for tag in sorted(true_at):
    if tag < captured["first"] or tag not in r.start_allocated:
        continue
    d = r.start_allocated[tag] - true_at[tag]
    if d and bad < 15:
        st = captured["states"][tag]
        print(
            f"tag {tag} phase {st[0]} thread {threads[tag] % 1000} replay {r.start_allocated[tag]} true {true_at[tag]} "
            f"diff {d} state {st}"
        )
        bad += 1
print(
    "mismatching tags:",
    sum(1 for t in true_at if t in r.start_allocated and r.start_allocated[t] != true_at[t]),
)
p = captured["sp"]
print("peak", p.peak, "owner", p.owner, "phase", p.phase, "act", p.activations, "act_max", p.activations_max)
step = s.report.steps[0]
print("report act", step.mem_activations, "peak", step.mem_peak_allocated)
# the metadata values seen per action, around the first mismatch
meta = [e.get("user_metadata") for e in captured["entries"]]
print("first 10 metas:", meta[:10])
