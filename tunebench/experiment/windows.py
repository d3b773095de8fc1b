"""Which optimizer steps of a run are warm-up, memory-scanned, phase-timed, and steady.

The defaults place every perturbation inside the warm-up: the memory scan (saved-tensor hooks, per-parameter
gradient hooks, allocator history, a host sync and the history replay at its end) runs on the last warm-up
step but one, the step after it absorbs that end-of-scan host work, and the steady window starts clean. The
phase-timed steps carry only light hooks (a few CUDA events per step: no measurable cost, see
docs/explanations/scanner.md) and
are the whole steady window, so the step the scanner reports is the run's median step even when step times
scatter (host-bound runs); `scan_time_step_vs_median` checks its time against the step timer's median.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from scanner.options import parse_steps, parse_time_steps

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class StepWindows:
    warmup_steps: int
    memory: tuple[int, int] | None  # first, last memory-scanned step (inclusive)
    timed: tuple[int, int] | None  # first, last phase-timed step (inclusive)
    excluded: frozenset[int]  # steps after warm-up that are not steady (memory steps and the step after them)

    @property
    def scan_steps(self) -> str:
        return _text(self.memory)

    @property
    def time_steps(self) -> str:
        return _text(self.timed) if self.timed else "off"

    auto_timed: bool = False  # the timed window is every steady step so far (it ends when training ends)

    @property
    def earliest_stop(self) -> int:
        """The first step after which `steady_state: auto` may stop: the memory scan and the step that absorbs its
        end are done, and an explicit timed window is complete. The automatic window is every steady step so
        far: it never holds training back (the scanner reports the steps it timed)."""
        memory_done = (self.memory[1] + 1) if self.memory else 0
        timed_done = self.timed[1] if self.timed and not self.auto_timed else 0
        return max(memory_done, timed_done)


def _text(window: tuple[int, int] | None) -> str:
    if window is None:
        return ""
    return str(window[0]) if window[0] == window[1] else f"{window[0]}-{window[1]}"


def plan_windows(warmup_steps: int, max_steps: int, scan_steps: str = "auto", time_steps: str = "auto",
                 scanning: bool = True) -> StepWindows:
    """Resolve the `auto` values against the run length; raises ValueError on impossible requests."""
    if warmup_steps < 0:
        raise ValueError(f"steady_warmup_steps must be >= 0, got {warmup_steps}")
    memory = None
    if scanning:
        # The step texts are read once, here, by the scanner's own reader; the scanner then gets the numbers.
        memory = (max(1, warmup_steps - 1),) * 2 if scan_steps == "auto" else parse_steps(scan_steps, "scan_steps")
        if max_steps > 0 and memory[1] > max_steps:
            raise ValueError(f"scan_steps {_text(memory)} ends after max_steps {max_steps}")
    timed = None
    if scanning and time_steps != "off":
        if time_steps == "auto":  # every steady step (to the end of training)
            first = max(warmup_steps + 1, memory[1] + 2)
            last = max_steps if max_steps > 0 else 1 << 30
            timed = (first, last) if first <= last else None
        else:
            try:  # the scanner's own check: the timed steps must not overlap the memory-scanned ones
                timed = parse_time_steps(parse_steps(time_steps, "scan_time_steps"), *memory)
            except ValueError as exc:
                raise ValueError(f"scan_time_steps {time_steps}: {exc}") from None
    excluded: set[int] = set()
    if memory is not None:
        excluded.update(range(memory[0], memory[1] + 2))  # the scanned steps and the one that absorbs its end
    excluded = {s for s in excluded if s > warmup_steps}
    return StepWindows(warmup_steps, memory, timed, frozenset(excluded), auto_timed=time_steps == "auto")
