"""Scanner options: one validated dataclass, so bad options fail at construction, not mid-training."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

TEXT_SUFFIXES = (".txt", ".log")
# `time_steps="auto"`: this many timed steps, starting this many steps after the last memory-scanned step (the
# step right after it pays for the scan's end-of-step host work and sync, so it is left out).
AUTO_TIME_STEPS = 5
AUTO_TIME_GAP = 2
JSON_SUFFIXES = (".json",)


@dataclass(frozen=True)
class ScanOptions:
    """first_step..last_step (1-based optimizer steps, i.e. `state.global_step` after the step), inclusive."""

    first_step: int = 5
    last_step: int = 5
    outputs: tuple = ("stdout",)  # "stdout", a .txt/.log path, a .json path, or a callable(report)
    log_to_trainer: bool = True
    memory_snapshot: str | None = None  # .pickle for pytorch.org/memory_viz (CUDA only)
    profile_trace: str | None = None  # chrome-trace .json of the scanned step(s)
    all_ranks: bool = False  # print to stdout on every rank, not only rank 0
    collectives: str | bool = "auto"  # collective accounting; "auto" = when torch.distributed has >1 rank
    time_first: int | None = None  # timed steps (phase hooks only); None = times come from the memory steps
    time_last: int | None = None
    kernels: str | bool = False  # kernel split of the scanned step (CUDA): True, or a .csv.gz path for its rows
    extra: dict = field(default_factory=dict)

    @property
    def steps(self) -> range:
        return range(self.first_step, self.last_step + 1)

    @property
    def time_window(self) -> range | None:
        return range(self.time_first, self.time_last + 1) if self.time_first is not None else None


def parse_steps(steps: Any, where: str = "Scanner(steps=...)") -> tuple[int, int]:
    """Accept 5, "5", "5-7", (5, 7), [5, 6, 7] or range(5, 8); return (first, last)."""
    if isinstance(steps, bool):
        raise ValueError(f"{where}: got a bool; give an optimizer step number such as 5 or a range '5-7'")
    if isinstance(steps, int):
        first = last = steps
    elif isinstance(steps, str):
        parts = steps.replace("..", "-").split("-")
        try:
            nums = [int(p.strip()) for p in parts]
        except ValueError:
            raise ValueError(f"{where}: cannot parse {steps!r}; use '5' or '5-7'") from None
        if len(nums) not in (1, 2):
            raise ValueError(f"{where}: cannot parse {steps!r}; use '5' or '5-7'")
        first, last = nums[0], nums[-1]
    elif isinstance(steps, range):
        if steps.step != 1 or len(steps) == 0:
            raise ValueError(f"{where}: {steps!r} must be a non-empty contiguous range")
        first, last = steps.start, steps.stop - 1
    elif isinstance(steps, Iterable):
        nums = list(steps)
        if not nums or not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
            raise ValueError(f"{where}: {steps!r} must hold integers")
        if len(nums) == 2 and nums[1] >= nums[0]:
            first, last = nums
        elif nums == list(range(nums[0], nums[0] + len(nums))):
            first, last = nums[0], nums[-1]
        else:
            raise ValueError(
                f"{where}: {steps!r} is not contiguous; hooks stay installed across the scanned range, so "
                "give one contiguous range such as '5-7'"
            )
    else:
        raise ValueError(f"{where}: unsupported type {type(steps).__name__}; use 5 or '5-7'")
    if first < 1:
        raise ValueError(f"{where}: steps are 1-based optimizer steps; got {first}")
    if last < first:
        raise ValueError(f"{where}: range end {last} is before its start {first}")
    return first, last


def _check_path(option: str, value: Any, suffixes: tuple[str, ...]) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"Scanner({option}=...): expected a file path, got {type(value).__name__}")
    path = os.fspath(value)
    if not path.lower().endswith(suffixes):
        raise ValueError(
            f"Scanner({option}={path!r}): the file name must end with one of {', '.join(suffixes)}"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ValueError(f"Scanner({option}={path!r}): {parent} exists and is not a directory")
    return path


def parse_outputs(output: Any) -> tuple:
    """Normalise `output` to a tuple of "stdout", text paths, json paths and callables."""
    if output is None:
        return ()
    items = list(output) if isinstance(output, (list, tuple)) else [output]
    out: list[str | Callable] = []
    for item in items:
        if callable(item):
            out.append(item)
        elif item == "stdout":
            out.append("stdout")
        else:
            out.append(_check_path("output", item, TEXT_SUFFIXES + JSON_SUFFIXES))
    return tuple(out)


def parse_time_steps(time_steps: Any, memory_first: int, memory_last: int) -> tuple[int | None, int | None]:
    """"auto" (AUTO_TIME_STEPS steps from the last memory step + AUTO_TIME_GAP), None/"off", or steps as in
    `parse_steps`, which must not overlap the memory-scanned steps."""
    if time_steps is None or time_steps is False or time_steps == "off":
        return None, None
    if time_steps == "auto":
        first = memory_last + AUTO_TIME_GAP
        return first, first + AUTO_TIME_STEPS - 1
    first, last = parse_steps(time_steps, "Scanner(time_steps=...)")
    if first <= memory_last and last >= memory_first:
        raise ValueError(
            f"Scanner(time_steps=...): {first}-{last} overlaps the memory-scanned steps {memory_first}-{memory_last};"
            " timed steps must carry no memory hooks, so give steps outside that range (or 'auto')"
        )
    return first, last


def make_options(
    steps: Any = 5,
    output: Any = "stdout",
    log_to_trainer: bool = True,
    memory_snapshot: Any = None,
    profile_trace: Any = None,
    all_ranks: bool = False,
    collectives: Any = "auto",
    time_steps: Any = "auto",
    kernels: Any = False,
) -> ScanOptions:
    first, last = parse_steps(steps)
    time_first, time_last = parse_time_steps(time_steps, first, last)
    if collectives not in ("auto", True, False):
        raise ValueError(f"Scanner(collectives=...): expected 'auto', True or False, got {collectives!r}")
    for name, flag in (("log_to_trainer", log_to_trainer), ("all_ranks", all_ranks)):
        if not isinstance(flag, bool):
            raise ValueError(f"Scanner({name}=...): expected True or False, got {flag!r}")
    if not isinstance(kernels, bool):
        kernels = _check_path("kernels", kernels, (".csv.gz",))
    snap = _check_path("memory_snapshot", memory_snapshot, (".pickle", ".pkl")) if memory_snapshot else None
    trace = _check_path("profile_trace", profile_trace, (".json",)) if profile_trace else None
    return ScanOptions(
        first_step=first,
        last_step=last,
        outputs=parse_outputs(output),
        log_to_trainer=log_to_trainer,
        memory_snapshot=snap,
        profile_trace=trace,
        collectives=collectives,
        all_ranks=all_ranks,
        time_first=time_first,
        time_last=time_last,
        kernels=kernels,
    )
