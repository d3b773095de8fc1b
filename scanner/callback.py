"""The `Scanner` TrainerCallback: arms the memory probe and the time window, and emits the report."""

from __future__ import annotations

import inspect
import logging
import sys
import time
import weakref
from typing import Any

import torch
from transformers import TrainerCallback

from .memory import device_memory_used, host_rss, process_start_epoch
from .memory_probe import MemoryProbe
from .options import JSON_SUFFIXES, make_options
from .outputs import atomic_via_tmp, atomic_write, distributed_world, rank_path, rank_world
from .report import ScanReport, build_step_report, build_time_report
from .step_profiler import StepProfiler
from .time_window import TimeWindow

logger = logging.getLogger(__name__)


class Scanner(TrainerCallback):
    """Memory / time / throughput breakdown of optimizer step(s) of a transformers Trainer run.

    `steps` are 1-based optimizer steps: step N is the optimizer step after which `state.global_step == N`,
    with all its gradient-accumulation micro-batches. Its time window runs from the end of step N-1
    (`on_step_end`, or `on_epoch_begin` for an epoch's first step) to its own `on_step_end`, so data loading
    for step N, and any logging/saving/evaluation that followed step N-1, fall in its "other" phase.
    Memory is measured on `steps`; phase times on `time_steps` (default: five steps starting two after the
    memory-scanned ones), which carry only the light phase hooks. Outside both ranges the callback costs one
    integer compare per event.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        # The arguments are make_options's, declared there once (autoinject validates them there too, without
        # importing transformers): steps, output, log_to_trainer, memory_snapshot, profile_trace, all_ranks,
        # collectives, time_steps, kernels. help(Scanner) and inspect show that signature (below the class).
        self.options = make_options(*args, **kwargs)
        self.report: ScanReport | None = None
        self.trainer_ref: weakref.ref | None = None  # set by autoinject, else found at on_train_begin
        self._probe: MemoryProbe | None = None
        self._window: TimeWindow | None = None
        self._pending: ScanReport | None = None  # memory scanned, waiting for the time window
        self._records: list = []
        self._init_time: float | None = None
        self._saves: list = []
        self._saves_emitted = 0
        self._last_event = time.perf_counter()
        self._profiler: StepProfiler | None = None
        self._recording_history = False

    # ------------------------------------------------------------------ public helpers
    def flat_metrics(self) -> dict[str, Any]:
        """The last report's flat `scan_*` metrics ({} when no step was scanned)."""
        return self.report.flat_metrics() if self.report is not None else {}

    def close(self) -> None:
        """Remove any hooks still installed (also called at train end)."""
        if self._probe is not None:
            self._probe.remove()
            self._probe = None
        if self._window is not None:
            self._window.remove()
        self._stop_extras(write=False)

    # ------------------------------------------------------------------ trainer events
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.close()
        self._records, self._saves, self._saves_emitted, self._pending = [], [], 0, None
        opts = self.options
        self._window = TimeWindow(opts.time_first, opts.time_last) if opts.time_first is not None else None
        if self.trainer_ref is None:
            trainer = _find_trainer()
            self.trainer_ref = weakref.ref(trainer) if trainer is not None else None
        if state.global_step >= opts.first_step:
            logger.warning(
                "Scanner: training resumes at step %d, past the scanned step %d; nothing will be scanned",
                state.global_step,
                opts.first_step,
            )
        self._maybe_arm(state, model, optimizer)

    def on_epoch_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        probe = self._probe
        if probe is not None and probe.open_record is not None and probe.open_record.micro_batches == 0:
            probe.restart(None)  # the epoch's bookkeeping since the last step end is not step time
        elif not (self._window is not None and self._window.restart_if_idle()):
            self._maybe_arm(state, model, optimizer)

    def on_step_begin(self, args, state, control, **kwargs):
        if self._init_time is None:
            start = process_start_epoch()
            self._init_time = time.time() - start if start is not None else float("nan")

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._last_event = time.perf_counter()
        probe = self._probe
        if probe is not None and (probe.aborted or not probe.installed):
            self._abandon("the scanned step raised")
        elif probe is not None:
            rec = probe.open_record
            if rec is not None and rec.step == state.global_step:
                rec, end_mark = probe.end_step()
                self._records.append(rec)
                if state.global_step >= self.options.last_step:
                    self._finish_memory(args)
                else:
                    probe.begin_step(state.global_step + 1, end_mark)
        if self._window is not None:
            self._window.on_step_end(state.global_step)
        self._maybe_arm(state, model, optimizer)
        self._maybe_emit(args, state)

    def on_log(self, args, state, control, **kwargs):
        self._last_event = time.perf_counter()

    def on_evaluate(self, args, state, control, **kwargs):
        self._last_event = time.perf_counter()

    def on_save(self, args, state, control, **kwargs):
        # No callback fires before a save; the last event before it (step end, log or evaluate) bounds it.
        self._saves.append({"step": state.global_step, "seconds": time.perf_counter() - self._last_event})
        self._last_event = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):
        if self._probe is not None:
            done = len(self._records)
            if done and not self._probe.aborted:
                logger.warning("Scanner: training ended inside the scanned range; reporting %d step(s)", done)
                self._finish_memory(args)
            else:
                self._abandon(
                    f"training ended at step {state.global_step}, before step {self.options.first_step}"
                )
        elif self.report is None and self._pending is None:
            logger.warning(
                "Scanner: training ended at step %d, before the scanned step %d; no report",
                state.global_step,
                self.options.first_step,
            )
        if self._window is not None and not self._window.closed:
            self._window.close()
        if self._pending is not None and self._window is not None and not self._window.ready():
            self._window.clock.synchronize()  # training is over: a sync costs nothing now
        self._maybe_emit(args, state, train_ended=True)
        if self.report is not None and len(self._saves) > self._saves_emitted:
            self.report.checkpoint_saves = list(self._saves)
            self._write_files(self.report, args)  # refresh files with saves that came after the scan

    # ------------------------------------------------------------------ internals
    def _maybe_arm(self, state, model, optimizer) -> None:
        if self._window is not None:
            self._window.maybe_arm(state.global_step, model, optimizer)
        if self._probe is not None or state.global_step + 1 != self.options.first_step or model is None:
            return
        self._probe = MemoryProbe(model, optimizer, keep_stacks=bool(self.options.memory_snapshot))
        # No trainer callback follows a step that raised: the profiler and allocator history stop here.
        self._probe.on_abort = lambda: self._stop_extras(write=False)
        self._start_extras(self._probe)
        self._probe.begin_step(self.options.first_step)

    def _abandon(self, why: str) -> None:
        logger.warning("Scanner: %s; hooks removed, no report", why)
        if self._probe is not None:
            self._probe.remove()
            self._probe = None
        self._stop_extras(write=False)
        self._records = []

    def _finish_memory(self, args) -> None:
        """Resolve the memory-scanned steps (one host sync, on a step whose time is not reported)."""
        probe = self._probe
        snapshot_by_probe = None
        try:
            probe.clock.synchronize()  # resolves every event of the memory steps at once
            if probe.trace is not None:
                # the probe's allocator history doubles as the memory_viz snapshot when one is asked for
                snapshot_by_probe = self.options.memory_snapshot or None
                if snapshot_by_probe:
                    atomic_via_tmp(snapshot_by_probe, lambda tmp: probe.resolve(self._records, tmp))
                else:
                    probe.resolve(self._records)
            rss, nvml = host_rss(), device_memory_used(probe.device)
            steps = [build_step_report(r, probe, rss, nvml) for r in self._records]
        finally:
            probe.remove()
            self._probe = None
        rank, world = rank_world(args)
        collectives, attention, trace, snapshot, kernels = self._stop_extras(write=True)
        self._pending = ScanReport(
            steps=steps,
            rank=rank,
            world_size=world,
            device=str(probe.device),
            init_time=self._init_time,
            checkpoint_saves=list(self._saves),
            memory_snapshot=snapshot or snapshot_by_probe,
            profile_trace=trace,
            collectives=collectives,
            attention=attention,
            kernels=kernels,
            versions={"torch": torch.__version__, "transformers": _transformers_version()},
        )
        self._records = []

    def _maybe_emit(self, args, state, train_ended: bool = False) -> None:
        """Emit once memory is done and the time window is read (or can no longer happen)."""
        report, window = self._pending, self._window
        if report is None:
            return
        unreachable = window is not None and window.probe is None and not window.records and (
            0 < state.max_steps < window.first)  # training ends before the window: times from the memory steps
        if window is not None and not (train_ended or unreachable or window.ready()):
            return
        if window is not None:
            report.time_steps = [build_time_report(r, window.clock) for r in window.records] if window.records else []
        self._pending, self.report = None, report
        self._emit(report, args, state)

    def _emit(self, report: ScanReport, args, state) -> None:
        self._saves_emitted = len(self._saves)
        report.checkpoint_saves = list(self._saves)
        for out in self.options.outputs:
            if callable(out):
                out(report)
            elif out == "stdout" and (report.rank == 0 or self.options.all_ranks):
                print(report.to_text(), flush=True)
        self._write_files(report, args)
        if self.options.log_to_trainer:
            self._log_to_trainer(report, state)

    def _write_files(self, report: ScanReport, args) -> None:
        for out in self.options.outputs:
            if isinstance(out, str) and out != "stdout":
                path = rank_path(out, report.rank, report.world_size)
                text = report.to_json() if path.lower().endswith(JSON_SUFFIXES) else report.to_text() + "\n"
                atomic_write(path, text.encode())

    def _log_to_trainer(self, report: ScanReport, state) -> None:
        logs = {
            "scan/" + k[len("scan_") :]: v
            for k, v in report.flat_metrics().items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        trainer = self.trainer_ref() if self.trainer_ref is not None else None
        if trainer is not None and hasattr(trainer, "log"):
            trainer.log(logs)  # reaches log_history and every report_to tracker via on_log
        else:
            state.log_history.append({**logs, "step": state.global_step})

    def _start_extras(self, probe: MemoryProbe) -> None:
        device = probe.device
        if self.options.memory_snapshot and probe.trace is None:
            if device.type == "cuda":
                torch.cuda.memory._record_memory_history(max_entries=200_000)
                self._recording_history = True
            else:
                logger.warning("Scanner: memory_snapshot needs CUDA; skipped on %s", device)
        collectives = _record_collectives(self.options.collectives)
        trace_path = rank_path(self.options.profile_trace, *rank_world()) if self.options.profile_trace else None
        kernels = self.options.kernels
        rows_path = rank_path(kernels, *rank_world()) if isinstance(kernels, str) else None
        self._profiler = StepProfiler(device.type, collectives, trace_path, bool(kernels), rows_path)
        self._profiler.start()
        if kernels:  # phase markers in the trace (on CPU too: they cost a few microseconds a boundary)
            probe.listener = self._profiler.mark

    def _stop_extras(self, write: bool) -> tuple[dict | None, dict | None, str | None, str | None, dict | None]:
        """(collectives, attention, trace path, snapshot path, kernel split) of the memory-scanned step(s)."""
        collectives = attention = trace = snapshot = kernels = None
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            collectives, attention, trace, kernels = profiler.stop(rank_world()[1], write=write)
        if self._recording_history:
            self._recording_history = False
            if write:
                snapshot = self.options.memory_snapshot
                atomic_via_tmp(snapshot, torch.cuda.memory._dump_snapshot)
            torch.cuda.memory._record_memory_history(enabled=None)
        return collectives, attention, trace, snapshot, kernels


def _record_collectives(option) -> bool:
    return distributed_world() if option == "auto" else bool(option)


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _find_trainer():
    """The Trainer whose callback handler is calling us (found once per run, on the call stack)."""
    from transformers import Trainer

    frame = sys._getframe(1)
    while frame is not None:
        obj = frame.f_locals.get("self")
        if isinstance(obj, Trainer):
            return obj
        frame = frame.f_back
    return None


def _with_self(signature: inspect.Signature) -> inspect.Signature:
    """`signature` behind a `self` parameter: make_options's parameters as Scanner.__init__'s."""
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return signature.replace(
        parameters=[self, *signature.parameters.values()], return_annotation=inspect.Signature.empty
    )


Scanner.__init__.__signature__ = _with_self(inspect.signature(make_options))
