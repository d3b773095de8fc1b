"""GPU fidelity of the scanner: categories vs MemTracker, phases vs torch.profiler, overhead vs unscanned steps.

Usage (on a CUDA machine, torch >= 2.11):
    python docs/evidence/gpu/scanner_fidelity.py --case all --steps 3 --out out/fidelity
CPU smoke test of the whole pipeline with tiny shapes:
    python docs/evidence/gpu/scanner_fidelity.py --tiny --case all --out /tmp/fidelity
Writes fidelity.json and fidelity.md under --out.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_common import (  # noqa: E402
    CASES,
    CATEGORY_MAP,
    MemTrackerStep,
    StepTimer,
    build_model,
    compare_categories,
    rel,
    run,
)

from scanner import Scanner  # noqa: E402

logger = logging.getLogger(__name__)


def profiler_phases(trace_path: str) -> dict | None:
    """Kernel spans by phase from a chrome trace: backward = kernels launched by the autograd thread."""
    with open(trace_path) as fh:
        events = json.load(fh).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if not kernels:
        return None
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    opt_ops = [
        e
        for e in events
        if e.get("cat") in ("cpu_op", "user_annotation")
        and str(e.get("name", "")).startswith("Optimizer.step#")
    ]
    main_tid = opt_ops[0]["tid"] if opt_ops else None
    labelled = []
    for k in sorted(kernels, key=lambda e: e["ts"]):
        launch = launches.get(k.get("args", {}).get("correlation"))
        if launch is None:
            continue
        if any(o["ts"] <= launch["ts"] <= o["ts"] + o["dur"] for o in opt_ops):
            label = "optimizer"
        elif main_tid is not None and launch["tid"] != main_tid:
            label = "backward"
        else:
            label = "main"
        labelled.append((label, k["ts"], k["ts"] + k["dur"], k["dur"]))
    segments = []  # consecutive kernels of one label: [label, start, end, busy]
    for label, s, e, d in labelled:
        if segments and segments[-1][0] == label:
            segments[-1][2] = max(segments[-1][2], e)
            segments[-1][3] += d
        else:
            segments.append([label, s, e, d])
    out = {"forward": 0.0, "backward": 0.0, "clip": 0.0, "optimizer": 0.0, "other_main": 0.0}
    for i, (label, s, e, _) in enumerate(segments):
        nxt = segments[i + 1][0] if i + 1 < len(segments) else None
        key = {"backward": "backward", "optimizer": "optimizer"}.get(label)
        if key is None:
            key = "forward" if nxt == "backward" else "clip" if nxt == "optimizer" else "other_main"
        out[key] += (e - s) / 1e6
    out["kernel_span"] = (labelled[-1][2] - labelled[0][1]) / 1e6
    out["kernel_busy"] = sum(d for *_, d in labelled) / 1e6
    return out


def run_same_run(key: str, tiny: bool, steps: int, out_dir: Path) -> dict:
    """The scanner and MemTracker over the same optimizer step of one run (one peak instant for both).

    MemTracker slows its step ~70x, so no timing is taken from this run; the scanner is the first callback, so
    it arms before MemTracker enters. MemTracker also records where its own peak was (op, modules, storages).
    """
    from tunebench.verify.memtracker_step import (
        MemTrackerStep as SameRunMemTracker,  # `benchmark.py verify`'s
    )

    case = CASES[key]
    model = build_model(case, tiny, "cuda" if torch.cuda.is_available() else "cpu")
    res: dict = {"case": key, "name": case["name"], "tiny": tiny, "scanned_step": steps, "same_run": True}
    run(model, case, tiny, 2, [], out_dir)  # warm-up, as in run_case
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    scanner = Scanner(steps=steps, time_steps="off", output=None, log_to_trainer=False)
    mt = SameRunMemTracker(steps)
    run(model, case, tiny, steps, [scanner, mt], out_dir)
    mt.max_allocated = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
    report = scanner.report.steps[0].to_dict()
    report.pop("boundaries", None)
    res["scanner"] = report
    res["memtracker"] = {"peak": mt.peak, "max_allocated_run": mt.max_allocated}
    res["category_vs_memtracker"] = compare_categories(report, mt.peak, mt.max_allocated)
    if torch.cuda.is_available():  # an independent size for "other": what dropping cuBLAS's workspaces frees
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch._C._cuda_clearCublasWorkspaces()
        res["cublas_workspaces_bytes"] = before - torch.cuda.memory_allocated()
    if mt.peak and mt.max_allocated:
        res["memtracker_total_vs_max_allocated"] = rel(mt.peak.get("Total"), mt.max_allocated)
    if report.get("mem_peak_allocated") is not None:
        parts = sum(report[f] or 0 for f in (*CATEGORY_MAP, "mem_other"))
        res["scanner_sum_vs_max_allocated"] = rel(parts, report["mem_peak_allocated"])
        res["scanner_peak_vs_memtracker_window_max_allocated"] = rel(
            report["mem_peak_allocated"], mt.max_allocated
        )
    del model
    gc.collect()
    return res


def run_case(key: str, tiny: bool, steps: int, out_dir: Path) -> dict:
    case = CASES[key]
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    model = build_model(case, tiny, device)
    total = steps + 8  # enough unscanned steps for a median and a run-throughput comparison
    res: dict = {"case": key, "name": case["name"], "tiny": tiny, "scanned_step": steps, "steps_run": total}

    run(model, case, tiny, 2, [], out_dir)  # warm-up (kernels, allocator) so both timed runs start equal
    timer_scan = StepTimer(cuda)
    scanner = Scanner(steps=steps, output=None, log_to_trainer=False)
    res["wall_with_scanner"] = run(model, case, tiny, total, [timer_scan, scanner], out_dir)
    timer_base = StepTimer(cuda)
    res["wall_without_scanner"] = run(model, case, tiny, total, [timer_base], out_dir)
    report = scanner.report.steps[0]
    res["scanner"] = report.to_dict()
    res["scanner"].pop("boundaries", None)

    t_scan, t_base = timer_scan.step_times(), timer_base.step_times()
    unscanned = [t for i, t in enumerate(t_scan, 1) if i not in (1, steps, steps + 1)]
    res["step_times_with_scanner"], res["step_times_without_scanner"] = t_scan, t_base
    res["overhead"] = {
        "scanned_step": t_scan[steps - 1],
        "median_unscanned_step": statistics.median(unscanned) if unscanned else None,
        "scanned_vs_median_unscanned": (t_scan[steps - 1] / statistics.median(unscanned) - 1)
        if unscanned
        else None,
        "step_after_scan": t_scan[steps] if len(t_scan) > steps else None,
        # throughput with / without scanner over the same steps (2..end), from the same step clock;
        # wall-clock of train() is reported too but includes Trainer setup noise
        "run_throughput_ratio": sum(t_base[1:]) / sum(t_scan[1:]),
        "wall_ratio": res["wall_without_scanner"] / res["wall_with_scanner"],
    }

    mt = MemTrackerStep(steps, cuda)
    run(model, case, tiny, steps, [mt], out_dir)
    res["memtracker"] = {"peak": mt.peak, "max_allocated_same_step": mt.max_allocated, "seconds": mt.seconds}
    res["category_vs_memtracker"] = compare_categories(report.to_dict(), mt.peak, mt.max_allocated)
    if mt.peak and mt.max_allocated:
        res["memtracker_total_vs_max_allocated"] = rel(mt.peak.get("Total"), mt.max_allocated)
    if report.mem_peak_allocated is not None:
        parts = sum(report.to_dict()[f] or 0 for f in (*CATEGORY_MAP, "mem_other"))
        res["scanner_sum_vs_max_allocated"] = rel(parts, report.mem_peak_allocated)

    if cuda:
        trace = str(out_dir / f"trace_{key}.json")
        snap = str(out_dir / f"snapshot_{key}.pickle")
        prof_scanner = Scanner(
            steps=steps, output=None, log_to_trainer=False, profile_trace=trace, memory_snapshot=snap
        )
        run(model, case, tiny, steps, [prof_scanner], out_dir)
        r = prof_scanner.report.steps[0]
        import pickle

        from peak_blocks import analyse

        with open(snap, "rb") as fh:
            res["peak_blocks"] = analyse(pickle.load(fh), torch.cuda.current_device())
        res["peak_blocks"]["scanner_same_run"] = {
            k: getattr(r, k)
            for k in ("mem_peak_allocated", "mem_activations", "mem_temporaries", "peak_phase")
        }
        os.remove(snap)
        res["profiler"] = {
            "trace_phases": profiler_phases(trace),
            "scanner_same_run": {
                k: getattr(r, k)
                for k in (
                    "time_step",
                    "time_forward",
                    "time_backward",
                    "time_clip",
                    "time_optimizer",
                    "time_other",
                )
            },
        }
        os.remove(trace)  # large; the numbers above are what the evidence needs
    del model
    gc.collect()
    return res


def to_markdown(results: dict) -> str:
    lines = [f"# Scanner fidelity ({results['device']})", "", f"Command: `{results['command']}`", ""]
    for res in results["cases"]:
        lines += [
            f"## Case {res['case']}: {res['name']}",
            "",
            "| category | scanner | MemTracker | rel. error |",
            "|---|---:|---:|---:|",
        ]
        for f, c in res["category_vs_memtracker"].items():
            err = "n/a" if c["rel_error"] is None else f"{100 * c['rel_error']:.2f}%"
            lines.append(f"| {f[4:]} | {c['scanner']} | {c['memtracker']} | {err} |")
        for k in (
            "memtracker_total_vs_max_allocated",
            "scanner_sum_vs_max_allocated",
            "cublas_workspaces_bytes",
        ):
            if res.get(k) is not None:
                lines.append(f"\n{k}: " + (f"{res[k]}" if k.endswith("bytes") else f"{100 * res[k]:.3f}%"))
        if res.get("overhead"):
            o = res["overhead"]
            lines += ["", "Overhead: " + ", ".join(f"{k}={v:.4f}" for k, v in o.items() if v is not None)]
        ctx = (res.get("memtracker") or {}).get("peak_context")
        if ctx:
            top = {k: v[:8] for k, v in ctx["storages_by_type"].items()}
            lines += ["", f"MemTracker's peak: op {ctx['op']}, backward={ctx['is_bw']}, in AC={ctx['in_ac']}"]
            lines += [f"modules: {ctx['modules']}", f"largest storages by type [bytes, count]: {top}"]
            lines += [f"scanner peak phase (same run): {res['scanner'].get('peak_phase')}"]
        if res.get("peak_blocks"):
            pb = res["peak_blocks"]
            lines += [
                "",
                "Blocks live at the allocator peak, allocated during the recorded steps (top sites):",
                "",
            ]
            lines += [
                f"- {x['bytes']:>14,d} B in {x['blocks']:>4d} blocks: {x['site']}" for x in pb["sites"][:15]
            ]
            lines += ["", f"peak entry: {pb['peak_entry']}; scanner (same run): {pb['scanner_same_run']}"]
        if res.get("profiler"):
            lines += [
                "",
                "Profiler (kernel spans) vs scanner (same run):",
                "```",
                json.dumps(res["profiler"], indent=1),
                "```",
            ]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["a", "b", "all"], default="all")
    ap.add_argument("--steps", type=int, default=3, help="the optimizer step to scan (>= 2)")
    ap.add_argument("--out", required=True, help="directory for fidelity.json and fidelity.md")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (CPU smoke test)")
    ap.add_argument(
        "--same-run",
        action="store_true",
        help="only the category comparison, with the scanner and MemTracker on the same step of one run",
    )
    a = ap.parse_args(argv)
    if a.steps < 2:
        ap.error("--steps must be >= 2 (step 1 allocates the optimizer state lazily)")
    if not a.tiny and not torch.cuda.is_available():
        ap.error("full-size cases need CUDA; use --tiny for a CPU smoke test")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "command": " ".join([sys.executable, *sys.argv]),
        "device": torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cases": [
            (run_same_run if a.same_run else run_case)(k, a.tiny, a.steps, out)
            for k in (["a", "b"] if a.case == "all" else [a.case])
        ],
    }
    (out / "fidelity.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "fidelity.md").write_text(to_markdown(results))
    print(to_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
