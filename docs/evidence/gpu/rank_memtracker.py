"""Per-rank scanner vs torch MemTracker / FSDPMemTracker over the same optimizer step (DDP or FSDP2).

Usage (CUDA, one GPU per process; Llama-3.2-1B shape, bf16, seq 1024, micro-batch 8):
    torchrun --nproc_per_node 2 docs/evidence/gpu/rank_memtracker.py --mode fsdp2 [--lora] --out out/rmt-fsdp2
    accelerate launch --num_processes 2 docs/evidence/gpu/rank_memtracker.py --mode ddp --out out/rmt-ddp
CPU smoke test (gloo, tiny Llama, seq 64):
    torchrun --nproc_per_node 2 docs/evidence/gpu/rank_memtracker.py --mode ddp --tiny --out /tmp/rmt-ddp
Every rank writes DIR/rank{r}.json with its scanner StepReport of optimizer step --step; rank 0 (every rank
with --tracker-ranks all) also runs torch's MemTracker (FSDPMemTracker for an FSDP2 model) over that same
step, adds its peak breakdown and a category comparison to its rank{r}.json, and writes DIR/compare.md
(rank 0) or DIR/compare.rank{r}.md. On CPU the scanner has no allocator peak, so
only params / buffers / grads / optimizer are comparable there.
--tracker picks rank 0's reference: auto (FSDPMemTracker for an FSDP2 model, else MemTracker), fsdp (the
same, named), or plain (torch's plain MemTracker with track_external(model, optimizer) even for an FSDP2
model: it returns NotImplemented for DTensor ops, so it sees the local shards and the ops they desugar to).
Every rank arms faulthandler: a traceback of all threads on SIGTERM (e.g. from `timeout`) and once after
RMT_HANG_DUMP_S seconds (default 150), so a hang shows where each rank is stuck.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import torch
from torch.distributed.fsdp import FSDPModule

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_common import CASES, TINY_MODEL, dataset, other_vs_untracked, rel  # noqa: E402
from fidelity_common import CATEGORY_MAP as MEMTRACKER_MAP  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from scanner import Scanner  # noqa: E402
from scanner.record import unwrap_optimizer  # noqa: E402
from tunebench.planning.peak_rules import ignore_frozen_parameters  # noqa: E402

logger = logging.getLogger("rank_memtracker")

LLAMA_1B = CASES["a"]["model"]  # the Llama-3.2-1B shape of the fidelity script
# scanner field -> reference categories, by tracker. Names are the enum values of the installed torch
# (torch/distributed/_tools: mem_tracker._MemRefType, fsdp2_mem_tracker._FSDPRefType; note "Optstate" vs
# "OptState"). The scanner counts as params only the storages behind model.parameters(), i.e. this rank's
# local shards under FSDP2, and its grads are the .grad of those parameters; FSDP2's all-gathered unsharded
# params/grads and its all-gather / reduce-scatter buffers are transient allocations, which the scanner files
# under temporaries (peak allocated minus the named categories). FSDPMemTracker has no "Other" (its
# track_external is a no-op); "Inputs" is only filled by track_inputs, which the Trainer gives us no hook for,
# so the batch shows up as Activation (or not at all when it was moved to the device before entry).
FSDP_TEMPS = ("Temp", "Unsharded Param", "Unsharded Grad", "All Gather", "Reduce Scatter", "Inputs")
FSDP_MAP = dict(MEMTRACKER_MAP, mem_params=("Sharded Param",), mem_grads=("Sharded Grad",))
FSDP_MAP |= {"mem_optimizer": ("OptState",), "mem_temporaries": FSDP_TEMPS}
CATEGORY_MAP = {"MemTracker": MEMTRACKER_MAP, "FSDPMemTracker": FSDP_MAP}
# the `fsdp2` entry of framework_configs.yaml
FSDP2_CONFIG = {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "reshard_after_forward": True}


class MemTrackerStep(TrainerCallback):
    """torch's MemTracker over exactly optimizer step `step` (the same window as the scanner's).

    When it runs on rank 0 only it must not change the number or order of collectives: this callback itself
    calls none (no barrier, all_reduce, broadcast, gather_object), only local CUDA synchronize / peak
    counters and the tracker's own hooks and dispatch mode. FSDPMemTracker, however, replaces FSDP2's own
    forward/backward hooks, which changes when its all-gathers are issued: on one rank only that hung in
    backward (rank-memtracker/fsdp2-fsdp/fsdp.log), hence --tracker-ranks all, which instruments every rank
    the same way so the collective order stays identical across ranks.
    """

    def __init__(self, step: int, trainer_ref: list, tracker: str = "auto", peak_context: bool = False):
        self.step, self.trainer_ref = step, trainer_ref  # trainer_ref[0] is set once the Trainer exists
        self.tracker_arg = tracker  # auto | fsdp | plain
        self.mt = self.tracker = self.fallback_reason = None
        self.peak = self.max_allocated = self.seconds = self.device = None
        self.want_context, self.peak_context = peak_context, None
        self.shard_ptrs: set | None = None  # FSDP2 + plain MemTracker: storages of this rank's local shards

    def _watch_peak(self, mt) -> None:
        """Keep, at each new peak, where the tracker was and which live storages it filed as what.

        Evidence-only and O(tracked storages) per new peak: it answers "at which op was MemTracker's peak, and
        which tensors make up its Activation there", which its totals alone cannot.
        """
        update = mt._update_peak_stats

        def watched(peak_state):
            before = dict(mt._peak_mem)
            update(peak_state)
            if mt._peak_mem != before:
                func = sys._getframe(1).f_locals.get("func")  # the op __torch_dispatch__ is running
                by_type: dict = {}
                unsharded = 0
                for st, (winfo, _) in mt._WINFO.items():
                    key = getattr(winfo.reftype, "value", str(winfo.reftype))
                    sizes = by_type.setdefault(key, {})
                    sizes[winfo.mem_consumed] = sizes.get(winfo.mem_consumed, 0) + 1
                    if (
                        self.shard_ptrs is not None
                        and key == "Parameter"
                        and st.data_ptr() not in self.shard_ptrs
                    ):
                        unsharded += winfo.mem_consumed  # an all-gathered (unsharded) parameter, not a shard
                self.peak_context = {
                    "op": str(func),
                    "modules": sorted(mt._mod_tracker.parents),
                    "is_bw": mt._mod_tracker.is_bw,
                    "in_ac": mt._in_ac,
                    "unsharded_params": unsharded if self.shard_ptrs is not None else None,
                    "storages_by_type": {  # reftype -> [[bytes, count], ...], largest first
                        k: sorted(([b, n] for b, n in v.items() if b), reverse=True)
                        for k, v in by_type.items()
                    },
                }

        mt._update_peak_stats = watched

    def _make_tracker(self):
        from torch.distributed._tools.mem_tracker import MemTracker

        trainer = self.trainer_ref[0]
        wrapped = trainer.model_wrapped  # DDP(model), or the model itself (FSDP2 shards in place)
        # DDP's gradient buckets are allocated at wrap time, before entry: MemTracker never sees them (the
        # scanner counts them in temporaries), so expect its Total to fall short of max_allocated under DDP.
        model = wrapped.module if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel) else wrapped
        optimizer = unwrap_optimizer(trainer.optimizer)  # the torch optimizer behind AcceleratedOptimizer
        if self.tracker_arg == "fsdp" and not isinstance(model, FSDPModule):
            self.fallback_reason = "--tracker fsdp but the model is not an FSDP2 module"
            logger.warning("%s; using MemTracker", self.fallback_reason)
        if self.tracker_arg != "plain" and isinstance(model, FSDPModule):
            try:
                from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

                # It hooks the FSDP states and the optimizer itself and records the sharded params/grads
                # at __enter__, so it needs no track_external (a no-op there).
                mt = FSDPMemTracker(model, optimizer)
                try:
                    mt.__enter__()
                except Exception:
                    # __enter__ swaps FSDP's forward hooks for its own: put back what it had swapped
                    mt._deregister_module_and_optimizer_hooks()
                    mt._restore_resize()
                    raise
                self.tracker = "FSDPMemTracker"
                return mt
            except Exception as e:  # keep the run going with the generic tracker, and say why
                self.fallback_reason = f"FSDPMemTracker unusable with the Trainer-built model: {e!r}"
                logger.warning("%s; falling back to MemTracker", self.fallback_reason)
        # plain: for an FSDP2 model, model.parameters() are DTensors; track_external records their local shards
        # (get_untyped_storages flattens the subclass) and the dispatch mode skips DTensor-level ops.
        mt = MemTracker()
        ignore_frozen_parameters(mt, model)
        mt.track_external(model, optimizer)  # params/buffers/opt state created before entry
        if isinstance(model, FSDPModule):
            # MemTracker files the all-gathered parameters a module holds in forward as Parameter too, where
            # FSDPMemTracker would say "Unsharded Param": split them off by storage at its peak.
            local = (getattr(p, "_local_tensor", p) for p in model.parameters())
            self.shard_ptrs = {t.untyped_storage().data_ptr() for t in local}
            self.want_context = True
        if self.want_context:
            self._watch_peak(mt)
        mt.__enter__()
        self.tracker = "MemTracker"
        return mt

    def on_substep_end(self, args, state, control, **kw):
        if self.mt is not None:
            self.mt.reset_mod_stats()  # the next micro-batch's forward is not a "second iteration"

    def _fold_peak(self, device=None) -> None:
        self.max_allocated = max(self.max_allocated or 0, torch.cuda.max_memory_allocated(device))

    def _reset_peak(self, device=None) -> None:
        # The scanner resets the allocator's peak counter at each phase boundary of the step, so a plain
        # max_memory_allocated() at exit would cover only the last phase: fold each peak in before a reset.
        self._fold_peak(device)
        self._orig_reset(device)

    def on_step_end(self, args, state, control, **kw):
        if state.global_step == self.step - 1 and self.mt is None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                self._orig_reset = torch.cuda.reset_peak_memory_stats
                torch.cuda.reset_peak_memory_stats = self._reset_peak
            self.mt = self._make_tracker()
            self.t0 = time.perf_counter()
        elif state.global_step == self.step and self.mt is not None:
            self.mt.__exit__(None, None, None)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats = self._orig_reset
                self._fold_peak()
            self.seconds = time.perf_counter() - self.t0
            snap = self.mt.get_tracker_snapshot("peak")
            # the peak snapshot is per device; the CPU entry (AdamW `step` counters) is not the GPU's peak
            dev = next((d for d in snap if d.type == ("cuda" if torch.cuda.is_available() else "cpu")), None)
            self.device = str(dev)
            self.peak = {getattr(k, "value", str(k)): int(v) for k, v in snap.get(dev, {}).items()}
            self.mt = None


def build_model(tiny: bool, lora: bool, local_rank: int):
    cuda = torch.cuda.is_available()
    cfg = LlamaConfig(
        **(TINY_MODEL if tiny else LLAMA_1B), max_position_embeddings=4096, attn_implementation="sdpa"
    )
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16 if cuda else torch.float32)
    try:
        # built straight on this rank's GPU: no host copy, and every rank holds the same seed-0 weights
        with torch.device(f"cuda:{local_rank}" if cuda else "cpu"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    if lora:
        import peft

        targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
        cfg = peft.LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM", target_modules=targets)
        model = peft.get_peft_model(model, cfg)
    return model


def compare(report: dict, mt: MemTrackerStep) -> dict:
    rows = {}
    unsharded = (mt.peak_context or {}).get("unsharded_params")
    for field, refs in CATEGORY_MAP[mt.tracker].items():
        ref = sum(mt.peak.get(r, 0) for r in refs) if mt.peak is not None else None
        refs = list(refs)
        if unsharded is not None and ref is not None and field in ("mem_params", "mem_temporaries"):
            # the scanner's params are the local shards; gathered copies are transient (temporaries)
            sign = -1 if field == "mem_params" else 1
            ref += sign * unsharded
            refs.append(("- " if sign < 0 else "+ ") + "unsharded Parameter storages at its peak")
        row = {"scanner": report[field], "memtracker": ref, "memtracker_categories": refs}
        rows[field] = row | {"rel_error": rel(report[field], ref)}
    other = other_vs_untracked(report, mt.peak, mt.max_allocated)
    if other is not None:
        rows["mem_other"] = other | {"memtracker_categories": ["max_allocated - Total"]}
    return rows


def to_markdown(res: dict) -> str:
    mt = res["memtracker"]
    lines = [
        f"# Scanner vs {mt['tracker']} ({res['mode']}{' + LoRA' if res['lora'] else ''}, rank {res['rank']} of "
        f"{res['world_size']}, step {res['step']}, {res['device']}, --tracker {res['tracker_arg']}, "
        f"--tracker-ranks {res['tracker_ranks']})",
        "",
        "| scanner field | scanner | MemTracker categories | MemTracker | rel. error |",
        "|---|---:|---|---:|---:|",
    ]
    for f, c in res["comparison"].items():
        err = "n/a" if c["rel_error"] is None else f"{100 * c['rel_error']:.2f}%"
        cats = " ".join(
            x if i == 0 or x[:2] in ("+ ", "- ") else "+ " + x
            for i, x in enumerate(c["memtracker_categories"])
        )
        lines.append(f"| {f} | {c['scanner']} | {cats} | {c['memtracker']} | {err} |")
    lines.append("")
    for k in ("memtracker_total_vs_max_allocated", "scanner_peak_vs_max_allocated"):
        if res.get(k) is not None:
            lines.append(f"- {k}: {100 * res[k]:.3f}%")
    lines.append(f"- MemTracker peak Total: {mt['peak'].get('Total') if mt['peak'] else None}")
    lines.append(f"- torch.cuda.max_memory_allocated (same step): {mt['max_allocated_same_step']}")
    if res["mode"] == "fsdp2" and not res["fsdp2_active"]:
        lines.append(f"- WARNING: FSDP2 was not applied by the Trainer; the run was {res['wrapper']}")
    if mt.get("fallback_reason"):
        lines.append(f"- fallback: {mt['fallback_reason']}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["ddp", "fsdp2"], required=True)
    ap.add_argument("--lora", action="store_true", help="peft LoRA r=16 on q/k/v/o_proj")
    ap.add_argument("--out", required=True, help="directory for rank{r}.json and compare.md")
    ap.add_argument("--tiny", action="store_true", help="tiny Llama on CPU/gloo when no CUDA (smoke test)")
    ap.add_argument("--step", type=int, default=3, help="the optimizer step to scan (>= 2)")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default 1024, --tiny 64)")
    ap.add_argument("--mb", type=int, default=None, help="per-device micro-batch (default 8, --tiny 2)")
    ap.add_argument(
        "--tracker",
        choices=["auto", "fsdp", "plain"],
        default="auto",
        help="rank 0's reference: auto/fsdp = FSDPMemTracker for an FSDP2 model (else MemTracker); "
        "plain = MemTracker + track_external(model, optimizer) even under FSDP2",
    )
    ap.add_argument(
        "--tracker-ranks",
        choices=["0", "all"],
        default="0",
        help="ranks that run the reference tracker: 0, or all (needed for FSDPMemTracker, which re-orders "
        "FSDP2's all-gathers on the ranks it instruments)",
    )
    a = ap.parse_args(argv)
    # a hang (e.g. a collective that only some ranks reached) leaves a traceback of every thread in the log
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    faulthandler.dump_traceback_later(float(os.environ.get("RMT_HANG_DUMP_S", "150")), exit=False)
    if a.step < 2:
        ap.error("--step must be >= 2 (step 1 allocates the optimizer state lazily)")
    cuda = torch.cuda.is_available()
    if not a.tiny and not cuda:
        ap.error("full size needs CUDA; use --tiny for a CPU smoke test")
    seq = a.seq or (64 if a.tiny else 1024)
    mb = a.mb or (2 if a.tiny else 8)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    logging.basicConfig(level=logging.INFO, format=f"[rank{os.environ.get('RANK', '0')}] %(message)s")
    if cuda:
        torch.cuda.set_device(local_rank)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    model = build_model(a.tiny, a.lora, local_rank)
    extra = {"ddp_find_unused_parameters": False}
    if a.mode == "fsdp2":  # with bf16, accelerate upcasts trainable params to fp32 before fully_shard
        extra = {"fsdp": "full_shard auto_wrap", "fsdp_config": dict(FSDP2_CONFIG)}
    max_steps = a.step + 2
    args = TrainingArguments(
        output_dir=str(out / "trainer"),
        max_steps=max_steps,
        per_device_train_batch_size=mb,
        bf16=cuda,
        use_cpu=not cuda,
        optim="adamw_torch",
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
        **extra,
    )
    rank = args.process_index
    scanner = Scanner(steps=a.step, output=None, log_to_trainer=False, collectives=False)
    trainer_ref: list = [None]
    tracked = rank == 0 or a.tracker_ranks == "all"
    mt = MemTrackerStep(a.step, trainer_ref, a.tracker) if tracked else None
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=dataset(max_steps * mb * args.world_size, seq, model.config.vocab_size),
        callbacks=[scanner] + ([mt] if mt is not None else []),  # scanner first: it arms before MemTracker
    )
    trainer_ref[0] = trainer
    trainer.train()
    faulthandler.cancel_dump_traceback_later()
    # accelerate enables FSDP only for multi-accelerator runs (DistributedType.MULTI_GPU etc.): on CPU/gloo
    # (MULTI_CPU) the fsdp arguments are ignored and the Trainer silently runs DDP instead.
    fsdp_active = isinstance(trainer.model, FSDPModule)
    if a.mode == "fsdp2" and not fsdp_active:
        logger.warning("--mode fsdp2 but the Trainer did not shard the model (CPU/gloo?): this run is DDP")

    report = scanner.report.steps[0].to_dict()
    report.pop("boundaries", None)
    res = {"mode": a.mode, "lora": a.lora, "tiny": a.tiny, "rank": rank, "world_size": args.world_size}
    res |= {"step": a.step, "seq": seq, "micro_batch": mb, "device": scanner.report.device}
    res |= {"fsdp2_active": fsdp_active, "wrapper": type(trainer.model_wrapped).__name__}
    res |= {"torch": torch.__version__, "tracker_arg": a.tracker, "tracker_ranks": a.tracker_ranks}
    res["scanner"] = report
    if mt is not None:
        m = {"tracker": mt.tracker, "fallback_reason": mt.fallback_reason, "device": mt.device}
        m |= {"peak": mt.peak, "max_allocated_same_step": mt.max_allocated, "seconds": mt.seconds}
        m["peak_context"] = mt.peak_context
        res["memtracker"] = m
        res["comparison"] = compare(report, mt)
        if mt.peak and mt.max_allocated:
            res["memtracker_total_vs_max_allocated"] = rel(mt.peak.get("Total"), mt.max_allocated)
        if report.get("mem_peak_allocated") is not None and mt.max_allocated:
            # both are the allocator peak of this same step (scanner: its own window; here: reset at entry)
            res["scanner_peak_vs_max_allocated"] = rel(report["mem_peak_allocated"], mt.max_allocated)
    (out / f"rank{rank}.json").write_text(json.dumps(res, indent=2, default=str))
    if mt is not None:
        md = to_markdown(res)
        (out / ("compare.md" if rank == 0 else f"compare.rank{rank}.md")).write_text(md)
        print(md, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
