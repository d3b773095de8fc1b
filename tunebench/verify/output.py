"""What `benchmark.py verify` prints: a table with headers, what each percentage means, and a verdict line; the
libraries it runs kept quiet (their warnings and progress are not verify's output)."""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def quiet_libraries() -> None:
    """Silence what the libraries log on their own (bitsandbytes' and transformers' warnings), here and in the
    spawned memory run, before they are imported. Kineto's `USDT: profiler_start/stop` lines on stderr obey no
    setting of this torch build (KINETO_LOG_LEVEL included) and stay."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for name in ("bitsandbytes", "transformers", "accelerate", "peft", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _percent(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{100 * fraction:+.2f} %"


def report(result: dict, tolerance: float) -> tuple[str, bool]:
    """The printed report and whether every category is within `tolerance` (a fraction)."""
    rows = result["categories"]
    lines = [f"scanner vs MemTracker: memory by category on step {result['scan_step']} of {result['model']} "
             f"({result['device']})", ""]
    header = f"  {'category':<12} {'scanner bytes':>16} {'MemTracker bytes':>17} {'difference':>11}"
    lines += [header, "  " + "-" * (len(header) - 2)]
    for row in rows:
        lines.append(f"  {row['category']:<12} {row['scanner_bytes']:>16,} {row['memtracker_bytes']:>17,} "
                     f"{_percent(row['difference']):>11}")
    lines += ["", f"  difference = (scanner - MemTracker) / MemTracker: negative when the scanner reports less; "
                  f"accepted within ±{100 * tolerance:.2f} % (--tolerance {tolerance:g})", ""]
    lines.append(f"scan cost: the memory-scanned step took {_percent(result['memory_step_overhead'])} against the "
                 "median unscanned step (only that one step pays it)")
    if result.get("reported_step_vs_median") is not None:
        lines.append(f"reported step time: the scanner's (phase-timed) step is "
                     f"{_percent(result['reported_step_vs_median'])} "
                     "from the median step")
    bad = [r for r in rows if r["difference"] is None or abs(r["difference"]) > tolerance]
    if bad:
        named = ", ".join(f"{r['category']} {_percent(r['difference'])}" for r in bad)
        lines.append(f"verdict: FAIL: {named} beyond ±{100 * tolerance:.2f} % of MemTracker (exit 1)")
    else:
        lines.append(f"verdict: PASS: every category within ±{100 * tolerance:.2f} % of MemTracker")
    return "\n".join(lines), not bad
