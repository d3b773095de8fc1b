"""A measured steady step on another GPU, phase by phase: the GPU's busy time scales kernel by kernel, the rest stays.

Per phase p (forward, backward, clip, optimizer, other) the measured row gives the phase's time T_p (the
scanner's timed median step) and the kernel split of the memory-scanned step gives its GPU busy time B_p (the
union of its kernels) and its kernels' summed durations K_p, which kernel_model turns into K'_p on the target.
  * gap_p = max(0, T_p − B_p): the GPU waited for the host (launches, Python, data): host time, kept as measured
    (× the hosts' ratio, project.host_ratio);
  * B'_p = B_p × K'_p / K_p: the busy time scales as its kernels do (overlap between streams kept);
  * T'_p = gap_p + B'_p; where a phase's kernels took longer than its time (B_p > T_p: the scanned step ran
    slower kernels), T'_p = T_p × K'_p / K_p.
The step is the steady median scaled by Σ T'_p / Σ T_p, so the projection onto the measured GPU returns the
measurement exactly. Known bias: in a host-bound stretch a faster GPU waits longer instead of finishing sooner,
so the model over-states gains (and losses) there by up to the busy time that the host hid. Where the scanned
step's kernel rows exist, host_replay.py gives the step instead and these phases are scaled to it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

PHASES = ("forward", "backward", "clip", "optimizer", "other")


@dataclass(frozen=True)
class Measured:
    """What the projection reads of one measured row (seconds, tokens)."""

    step_time: float  # steady_step_time_median
    tokens_per_step: float  # steady tokens/s × step time (mean tokens of a steady step)
    nonpad_tokens_per_step: float
    phase_time: dict  # phase → T_p of the timed step
    busy: dict  # phase → B_p of the scanned step


@dataclass(frozen=True)
class Projected:
    step_time: float
    phase_time: dict  # phase → projected time, scaled to sum to step_time
    busy_time: float  # projected GPU busy time of a step
    gap_time: float  # host gap kept
    clamped: tuple  # phases whose kernels outlasted the phase (scaled whole)


def project_step(measured: Measured, kernel_times: dict[str, tuple[float, float]],
                 host_ratio: float = 1.0) -> Projected:
    """The step on the target. `kernel_times`: phase → (K_p, K'_p) per step (kernel_model)."""
    phase_new, busy_new, gaps, clamped = {}, 0.0, 0.0, []
    for phase in PHASES:
        t = float(measured.phase_time.get(phase) or 0.0)
        k, k_new = kernel_times.get(phase, (0.0, 0.0))
        ratio = k_new / k if k > 0 else 1.0
        b = float(measured.busy.get(phase) or 0.0)
        if b > t:
            phase_new[phase] = t * ratio
            busy_new += t * ratio
            if b > t * 1.02:
                clamped.append(phase)
        else:
            phase_new[phase] = (t - b) * host_ratio + b * ratio
            busy_new += b * ratio
            gaps += (t - b) * host_ratio
    total = sum(float(measured.phase_time.get(p) or 0.0) for p in PHASES)
    scale = measured.step_time / total if total > 0 else 1.0
    step = sum(phase_new.values()) * scale if total > 0 else measured.step_time
    return Projected(step, {p: v * scale for p, v in phase_new.items()}, busy_new * scale, gaps * scale,
                     tuple(clamped))
