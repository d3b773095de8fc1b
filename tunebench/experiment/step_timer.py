"""Times every optimizer step at no measurable cost and, in `auto` mode, stops once the median is known.

Step N's time runs from the end of step N-1 to the end of step N (the scanner's convention), so data loading
and whatever followed the previous step (logging, saving) belong to it. On CUDA each boundary is a CUDA
event recorded on the current stream: it marks when the GPU got there, costs a few microseconds of host time
and needs no host sync until the end; on CPU it is `perf_counter`. Register this callback after the
Scanner, so that host work a scan does at a step end falls into the scanned step, not the next one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from transformers import TrainerCallback

from tunebench.experiment.steady import SteadyPolicy, median_ci_pct, median_is_known, median_rank_interval, steady_steps

logger = logging.getLogger(__name__)

# In auto mode with several ranks, the stop decision is broadcast from rank 0 every this many steps (a host
# sync); the step after each such sync is left out of the steady window.
DISTRIBUTED_CHECK_EVERY = 5


@dataclass
class StepTime:
    step: int
    seconds: float
    end_unix: float  # wall-clock time at which the device finished the step (for power integration)


class StepTimer(TrainerCallback):
    """Boundary marks at train begin and at every step end; `finish()` resolves them after one sync."""

    def __init__(self, device, policy: SteadyPolicy, auto: bool = False, earliest_stop: int = 0,
                 token_counter=None, host_clock=time.perf_counter):
        import torch

        self.cuda = device.type == "cuda"
        self.device = device
        self.policy = policy
        self.auto = auto
        if auto:  # the median's interval needs scipy.special: imported now, not inside the first step it judges
            median_rank_interval(policy.min_steps)
        self.earliest_stop = earliest_stop  # e.g. the scanner's last step: never stop before it
        self.tokens = token_counter
        self.excluded: set[int] = set()  # steps that must not count as steady (scans, post-sync steps)
        self.stopped_early = False
        self.train_begin_unix: float | None = None  # when the first step began (start-up ends here)
        self._marks: list = []  # marks[0] = train begin, marks[i] = end of step i
        self._resolved: list[float] = []  # seconds of steps 1..len, resolved without a host sync (auto mode)
        self._torch = torch
        self._host_clock = host_clock  # CPU marks (tests give a scripted clock)

    # ---------------------------------------------------------------- marks
    def _mark(self):
        if self.cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record(self._torch.cuda.current_stream(self.device))
            return event
        return self._host_clock()

    def _seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start

    # ---------------------------------------------------------------- trainer events
    def on_train_begin(self, args, state, control, **kwargs):
        self.train_begin_unix = time.time()
        self._marks = [self._mark()]
        self._resolved = []

    def on_step_end(self, args, state, control, **kwargs):
        self._marks.append(self._mark())
        if self.tokens is not None:
            self.tokens.end_step()
        if self.auto and state.global_step >= max(self.earliest_stop, self.policy.warmup_steps + self.policy.min_steps):
            if self._should_stop(state.global_step):
                control.should_training_stop = True
                self.stopped_early = state.global_step < state.max_steps
                times = self._steady_resolved()
                logger.info("steady state: median step time known to ±%.2f %% (target ±%.2f %%) from %d steady "
                            "steps after %d of at most %d steps; stopping", median_ci_pct(times) or float("nan"),
                            self.policy.target_ci_pct, len(times), state.global_step, state.max_steps)

    # ---------------------------------------------------------------- auto mode
    def _resolve_completed(self) -> None:
        """Turn marks the device has already passed into seconds (event.query() never blocks)."""
        while len(self._resolved) < len(self._marks) - 1:
            start, end = self._marks[len(self._resolved)], self._marks[len(self._resolved) + 1]
            if self.cuda and not end.query():
                return
            self._resolved.append(self._seconds(start, end))

    def _steady_resolved(self) -> list[float]:
        steps = steady_steps(len(self._resolved), self.policy, self.excluded)
        return [self._resolved[s - 1] for s in steps]

    def _should_stop(self, step: int) -> bool:
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if not distributed:
            self._resolve_completed()
            return median_is_known(self._steady_resolved(), self.policy)
        if step % DISTRIBUTED_CHECK_EVERY:
            return False
        # Every rank must stop at the same step, or the others hang in their next collective: rank 0 decides
        # from its own times and broadcasts. The broadcast's result is read on the host (a sync), so the next
        # step starts with an idle device and is kept out of the steady window.
        self._resolve_completed()
        decision = self._torch.tensor([1 if median_is_known(self._steady_resolved(), self.policy) else 0],
                                      device=self.device if dist.get_backend() == "nccl" else "cpu")
        dist.broadcast(decision, src=0)
        self.excluded.add(step + 1)
        return bool(decision.item())

    # ---------------------------------------------------------------- results
    def finish(self) -> list[StepTime]:
        """Every step's time and wall-clock end, after one synchronisation."""
        if len(self._marks) < 2:
            return []
        anchor = self._mark()
        if self.cuda:
            self._torch.cuda.synchronize(self.device)
        now = time.time()
        out = []
        for step in range(1, len(self._marks)):
            seconds = self._seconds(self._marks[step - 1], self._marks[step])
            end_unix = now - self._seconds(self._marks[step], anchor)
            out.append(StepTime(step=step, seconds=seconds, end_unix=end_unix))
        return out
