"""torch.compile measured: each compilation's seconds and the optimizer step it fell in, from dynamo's own
compile callbacks (a forward frame, and the lazily compiled backward), so that compilation is a column of its
own, recompilations are counted, and no step that compiled is a steady step."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

# A compile id is "<frame>/<attempt>" (dynamo's CompileId; compiled autograd prefixes "!<n>/"): attempt 0 is the
# frame's first compilation, every later attempt a recompilation (a guard failed: a new shape, dtype, ...).
_COMPILE_ID = re.compile(r"(\d+)/(\d+)$")


@dataclass
class CompileEvent:
    step: int  # the optimizer step (1-based) it happened in
    seconds: float
    trigger: str  # "DYNAMO" (a forward frame) or "LAZY_BACKWARD"
    recompile: bool


@dataclass
class CompileWatch(TrainerCallback):
    """Records every compilation while training; `columns()` summarises them, `compiled_steps` are excluded
    from the steady statistics by the caller."""

    events: list[CompileEvent] = field(default_factory=list)
    _step: int = 1
    _started: dict = field(default_factory=dict)
    _installed: bool = False

    def install(self) -> CompileWatch:
        from torch._dynamo.callback import callback_handler

        callback_handler.register_start_callback(self._start)
        callback_handler.register_end_callback(self._end)
        self._installed = True
        return self

    def remove(self) -> None:
        if not self._installed:
            return
        from torch._dynamo.callback import callback_handler

        callback_handler.remove_start_callback(self._start)
        callback_handler.remove_end_callback(self._end)
        self._installed = False

    def on_step_begin(self, args, state, control, **kwargs):
        self._step = state.global_step + 1

    def on_train_end(self, args, state, control, **kwargs):
        self.remove()

    def _start(self, callback_args=None) -> None:
        self._started[_key(callback_args)] = time.perf_counter()

    def _end(self, callback_args=None) -> None:
        started = self._started.pop(_key(callback_args), None)
        if started is None:
            return
        compile_id = str(getattr(callback_args, "compile_id", "") or "")
        match = _COMPILE_ID.search(compile_id)
        trigger = getattr(getattr(callback_args, "callback_trigger", None), "name", "DYNAMO")
        self.events.append(CompileEvent(self._step, time.perf_counter() - started, trigger,
                                        bool(match and int(match.group(2)) > 0)))

    @property
    def compiled_steps(self) -> set[int]:
        return {event.step for event in self.events}

    def columns(self, warmup_steps: int) -> dict:
        """compile_* columns; a compilation after the warm-up (a step the steady window would have held) is a
        measurement warning: the shapes vary (padding) or a guard fails, and the step time includes it."""
        late = sorted({e.step for e in self.events if e.step > warmup_steps})
        row = {
            "compile_seconds": sum(e.seconds for e in self.events),
            "compile_count": len(self.events),
            "compile_recompiles": sum(e.recompile for e in self.events),
            "compile_last_step": max((e.step for e in self.events), default=None),
            "compile_steady_recompiles": sum(1 for e in self.events if e.step > warmup_steps),
        }
        if late:
            row["measurement_warning"] = (
                f"torch.compile compiled again in step(s) {_ranges(late)}, after the warm-up: those steps are left "
                "out of the steady statistics (varying shapes recompile: fixed-length rows or pad_to_multiple_of "
                "avoid it)")
        return row


def _key(callback_args) -> tuple:
    return (str(getattr(callback_args, "compile_id", "")), str(getattr(callback_args, "callback_trigger", "")))


def _ranges(steps: list[int]) -> str:
    return ", ".join(str(s) for s in steps[:8]) + (f" (+{len(steps) - 8} more)" if len(steps) > 8 else "")
