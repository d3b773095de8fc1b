"""The `Scanner` TrainerCallback: arms the probe for the scanned step(s) and emits the report."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import weakref
from typing import Any

import torch
from transformers import TrainerCallback

from .collectives import CollectiveRecorder
from .memory import device_memory_used, host_rss, process_start_epoch
from .options import JSON_SUFFIXES, make_options
from .probe import StepProbe
from .report import ScanReport, build_step_report

logger = logging.getLogger(__name__)


class Scanner(TrainerCallback):
    """Memory / time / throughput breakdown of optimizer step(s) of a transformers Trainer run.

    `steps` are 1-based optimizer steps: step N is the optimizer step after which `state.global_step == N`,
    with all its gradient-accumulation micro-batches. Its time window runs from the end of step N-1
    (`on_step_end`, or `on_epoch_begin` for an epoch's first step) to its own `on_step_end`, so data loading
    for step N, and any logging/saving/evaluation that followed step N-1, fall in its "other" phase.
    Outside the scanned range the callback costs one integer compare per event.
    """

    def __init__(
        self,
        steps: Any = 5,
        output: Any = "stdout",
        log_to_trainer: bool = True,
        memory_snapshot: Any = None,
        profile_trace: Any = None,
        all_ranks: bool = False,
        collectives: Any = "auto",
    ):
        self.options = make_options(
            steps, output, log_to_trainer, memory_snapshot, profile_trace, all_ranks, collectives
        )
        self.report: ScanReport | None = None
        self.trainer_ref: weakref.ref | None = None  # set by autoinject, else found at on_train_begin
        self._probe: StepProbe | None = None
        self._records: list = []
        self._init_time: float | None = None
        self._saves: list = []
        self._saves_emitted = 0
        self._last_event = time.perf_counter()
        self._profiler = None
        self._collectives: CollectiveRecorder | None = None
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
        self._stop_extras(write=False)

    # ------------------------------------------------------------------ trainer events
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.close()
        self._records = []
        self._saves = []
        self._saves_emitted = 0
        if self.trainer_ref is None:
            trainer = _find_trainer()
            self.trainer_ref = weakref.ref(trainer) if trainer is not None else None
        if state.global_step >= self.options.first_step:
            logger.warning(
                "Scanner: training resumes at step %d, past the scanned step %d; nothing will be scanned",
                state.global_step,
                self.options.first_step,
            )
        self._maybe_arm(state, model, optimizer)

    def on_epoch_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        probe = self._probe
        if probe is not None and probe._rec is not None and probe._rec.micro_batches == 0:
            probe.restart(None)  # the epoch's bookkeeping since the last step end is not step time
        else:
            self._maybe_arm(state, model, optimizer)

    def on_step_begin(self, args, state, control, **kwargs):
        if self._init_time is None:
            start = process_start_epoch()
            self._init_time = time.time() - start if start is not None else float("nan")

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._last_event = time.perf_counter()
        probe = self._probe
        if probe is None:
            self._maybe_arm(state, model, optimizer)
            return
        if probe.aborted or not probe.installed:
            self._abandon("the scanned step raised")
            return
        rec = probe._rec
        if rec is None or rec.step != state.global_step:
            return
        rec, end_mark = probe.end_step()
        self._records.append(rec)
        if state.global_step >= self.options.last_step:
            self._finish(args, state)
        else:
            probe.begin_step(state.global_step + 1, end_mark)

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
                self._probe.clock.synchronize()
                self._finish(args, state)
            else:
                self._abandon(
                    f"training ended at step {state.global_step}, before step {self.options.first_step}"
                )
        elif self.report is None:
            logger.warning(
                "Scanner: training ended at step %d, before the scanned step %d; no report",
                state.global_step,
                self.options.first_step,
            )
        if self.report is not None and len(self._saves) > self._saves_emitted:
            self.report.checkpoint_saves = list(self._saves)
            self._write_files(self.report, args)  # refresh files with saves that came after the scan

    # ------------------------------------------------------------------ internals
    def _maybe_arm(self, state, model, optimizer) -> None:
        if state.global_step + 1 != self.options.first_step or model is None:
            return
        self._probe = StepProbe(model, optimizer, keep_stacks=bool(self.options.memory_snapshot))
        self._start_extras(self._probe)
        self._probe.begin_step(self.options.first_step)

    def _abandon(self, why: str) -> None:
        logger.warning("Scanner: %s; hooks removed, no report", why)
        self.close()
        self._records = []

    def _finish(self, args, state) -> None:
        probe = self._probe
        snapshot_by_probe = None
        try:
            probe.clock.synchronize()  # the only host sync of the scan: resolves every event at once
            if probe.trace is not None:
                # the probe's allocator history doubles as the memory_viz snapshot when one is asked for
                snapshot_by_probe = self.options.memory_snapshot or None
                if snapshot_by_probe:
                    _atomic_via_tmp(snapshot_by_probe, lambda tmp: probe.resolve(self._records, tmp))
                else:
                    probe.resolve(self._records)
            rss, nvml = host_rss(), device_memory_used(probe.device)
            steps = [build_step_report(r, probe, rss, nvml) for r in self._records]
        finally:
            probe.remove()
            self._probe = None
        rank, world = _rank_world(args)
        collectives = self._collectives.stop(world) if self._collectives is not None else None
        self._collectives = None
        snapshot, trace = self._stop_extras(write=True)
        snapshot = snapshot or snapshot_by_probe
        if collectives is not None and self.options.profile_trace:
            trace = self.options.profile_trace
        self.report = ScanReport(
            steps=steps,
            rank=rank,
            world_size=world,
            device=str(probe.device),
            init_time=self._init_time,
            checkpoint_saves=list(self._saves),
            memory_snapshot=snapshot,
            profile_trace=trace,
            collectives=collectives,
            versions={"torch": torch.__version__, "transformers": _transformers_version()},
        )
        self._records = []
        self._emit(self.report, args, state)

    def _emit(self, report: ScanReport, args, state) -> None:
        self._saves_emitted = len(self._saves)
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
                path = _rank_path(out, report.rank, report.world_size)
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

    def _start_extras(self, probe: StepProbe) -> None:
        device = probe.device
        if self.options.memory_snapshot and probe.trace is None:
            if device.type == "cuda":
                torch.cuda.memory._record_memory_history(max_entries=200_000)
                self._recording_history = True
            else:
                logger.warning("Scanner: memory_snapshot needs CUDA; skipped on %s", device)
        if _record_collectives(self.options.collectives):
            # One profiler serves both: the collective counts and, if asked for, the trace file.
            trace_path = _rank_path(self.options.profile_trace, *_rank_world(None)) if self.options.profile_trace else None
            self._collectives = CollectiveRecorder(device.type, trace_path)
            self._collectives.start()
        elif self.options.profile_trace:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = torch.profiler.profile(activities=acts)
            self._profiler.start()

    def _stop_extras(self, write: bool) -> tuple[str | None, str | None]:
        snapshot = trace = None
        if self._collectives is not None:  # scan abandoned: stop profiling, keep nothing
            self._collectives.stop(1, write=False)
            self._collectives = None
        if self._recording_history:
            self._recording_history = False
            if write:
                snapshot = self.options.memory_snapshot
                _atomic_via_tmp(snapshot, torch.cuda.memory._dump_snapshot)
            torch.cuda.memory._record_memory_history(enabled=None)
        if self._profiler is not None:
            prof, self._profiler = self._profiler, None
            prof.stop()
            if write:
                trace = self.options.profile_trace
                _atomic_via_tmp(trace, prof.export_chrome_trace)
        return snapshot, trace


def atomic_write(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temp file in the same directory and os.replace."""
    _atomic_via_tmp(path, lambda tmp: open(tmp, "wb").write(data))


def _atomic_via_tmp(path: str, writer) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".scan-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    try:
        writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _rank_path(path: str, rank: int, world: int) -> str:
    if world <= 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def _record_collectives(option) -> bool:
    if option == "auto":
        return torch.distributed.is_available() and torch.distributed.is_initialized() and (
            torch.distributed.get_world_size() > 1
        )
    return bool(option)


def _rank_world(args) -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(getattr(args, "process_index", 0) or 0), int(getattr(args, "world_size", 1) or 1)


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
