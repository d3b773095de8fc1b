"""Scanner overhead on a GPU: whole-run throughput with vs without the Scanner, in alternating (ABBA) runs.

Usage: python docs/evidence/gpu/scanner_overhead.py --out DIR [--pairs 5] [--steps 40] [--scan-step 20] [--tiny]
Case (a) of scanner_fidelity.py (Llama-3.2-1B shape, full FT, bf16, seq 1024, micro-batch 8). One model is
built once; each run is a fresh Trainer of `--steps` steps. Reports, per run, the wall time of train(), the
sum of steady-state step times (steps 6..N) and, for scanned runs, the scanned step against the run's median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_common import CASES, StepTimer, build_model, run  # noqa: E402

from scanner import Scanner  # noqa: E402


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--scan-step", type=int, default=20)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    case = CASES["a"]
    model = build_model(case, args.tiny, "cuda" if cuda else "cpu")
    run(model, case, args.tiny, 6, [], out)  # warm-up: allocator, cuBLAS heuristics
    runs = []
    for pair in range(args.pairs):
        order = [False, True] if pair % 2 == 0 else [True, False]  # ABBA: drift hits both modes alike
        for scanned in order:
            timer = StepTimer(cuda)
            callbacks = [timer] + (
                [Scanner(steps=args.scan_step, output=None, log_to_trainer=False)] if scanned else []
            )
            wall = run(model, case, args.tiny, args.steps, callbacks, out)
            steps = timer.step_times()
            steady = steps[5:]
            record = {
                "scanned": scanned,
                "wall_s": wall,
                "steady_s": sum(steady),
                "median_step_s": statistics.median(steady),
            }
            h = timer.host
            record["host_s"] = {
                "train_begin_to_step5": h[5] - h[0],
                "step5_to_last_step": h[-1] - h[5],
                "last_step_to_train_end": timer.host_end - h[-1],
                "outside_train_callbacks": wall - (timer.host_end - h[0]),
            }
            record["step_times"] = steps
            if scanned:
                scan = steps[args.scan_step - 1]
                others = [t for i, t in enumerate(steps[5:], start=6) if i != args.scan_step]
                record["scanned_step_s"] = scan
                record["scanned_vs_median"] = scan / statistics.median(others) - 1
            runs.append(record)
            print(json.dumps(record), flush=True)
    on = [r for r in runs if r["scanned"]]
    off = [r for r in runs if not r["scanned"]]
    # Each ABBA pair's own ratio cancels slow drift (clocks, temperature) that a median over runs keeps.
    pairs = [(runs[2 * i], runs[2 * i + 1]) for i in range(len(runs) // 2)]
    pair_ratios = [
        (a if not a["scanned"] else b)["wall_s"] / (b if not a["scanned"] else a)["wall_s"] for a, b in pairs
    ]
    pair_ratios_steady = [
        (a if not a["scanned"] else b)["steady_s"] / (b if not a["scanned"] else a)["steady_s"] for a, b in pairs
    ]
    summary = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "runs": runs,
        "throughput_ratio_wall": median_of(off, "wall_s") / median_of(on, "wall_s"),
        "throughput_ratio_steady": median_of(off, "steady_s") / median_of(on, "steady_s"),
        "pair_ratios_wall": pair_ratios,
        "pair_ratio_wall_median": statistics.median(pair_ratios),
        "pair_ratios_steady": pair_ratios_steady,
        "pair_ratio_steady_median": statistics.median(pair_ratios_steady),
        "scanned_vs_median_unscanned": statistics.median(r["scanned_vs_median"] for r in on),
        "scanned_vs_median_each": [r["scanned_vs_median"] for r in on],
        "wall_spread_off": (max(r["wall_s"] for r in off) - min(r["wall_s"] for r in off)) / median_of(off, "wall_s"),
    }
    (out / "overhead.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
