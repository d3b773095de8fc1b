"""Where an experiment's start-up time goes: process start → imports → data → model → trainer → first step."""

from __future__ import annotations

import logging
import time

logger = logging.getLogger(__name__)

# (column, mark at which its interval ends); each interval starts where the previous one ended.
STAGES = (
    ("startup_imports_seconds", "imports"),  # interpreter start + torch/transformers/trl/peft imports
    ("startup_data_seconds", "data"),  # tokenizer + the preprocessed dataset (a cache read normally)
    ("startup_model_seconds", "model"),  # building or loading the model, on its device
    ("startup_trainer_seconds", "trainer"),  # SFTTrainer construction (PEFT wrap, dataset preparation)
    ("startup_train_setup_seconds", "train_begin"),  # train(): accelerator.prepare, optimizer, data loader
)


class Startup:
    """Wall-clock marks of the start-up stages; `columns()` turns them into seconds per stage."""

    def __init__(self, process_start: float | None):
        self.process_start = process_start if process_start is not None else time.time()
        self.marks: dict[str, float] = {}

    def mark(self, name: str, when: float | None = None) -> None:
        self.marks[name] = time.time() if when is None else when

    def columns(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        previous = self.process_start
        for column, mark in STAGES:
            at = self.marks.get(mark)
            out[column] = None if at is None or previous is None else at - previous
            previous = at
        begin = self.marks.get("train_begin")
        # Start-up = process start → the first optimizer step begins (its own time is first_step_seconds).
        out["startup_seconds"] = begin - self.process_start if begin is not None else None
        out["process_start_unix"] = self.process_start
        return out
