"""Classify how an experiment ended (ok | oom | error | timeout | skipped) and extract the last traceback."""

from __future__ import annotations

import json
import logging
import re
import signal
from pathlib import Path

logger = logging.getLogger(__name__)

_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?", re.MULTILINE)
_OOM_MARKERS = ("torch.OutOfMemoryError", "CUDA out of memory", "OutOfMemoryError", "out of memory")
MAX_ERROR_CHARS = 4000


def last_traceback(stderr_text: str) -> str:
    """The last Python traceback in a log, with torchrun's `[rankN]:` prefixes removed; else the tail."""
    text = _RANK_PREFIX.sub("", stderr_text)
    start = text.rfind("Traceback (most recent call last)")
    if start < 0:
        tail = "\n".join(line for line in text.strip().splitlines()[-20:])
        return tail[-MAX_ERROR_CHARS:]
    block = text[start:].splitlines()
    # A traceback ends at the first line after the frames that is not indented (the exception line).
    end = len(block)
    for i, line in enumerate(block[1:], start=1):
        if line and not line.startswith((" ", "\t")):
            end = i + 1
            break
    return "\n".join(block[:end])[-MAX_ERROR_CHARS:]


def is_oom(text: str) -> bool:
    return any(marker in text for marker in _OOM_MARKERS)


def classify(returncode: int | None, timed_out: bool, stderr_text: str, folder: Path) -> tuple[str, str]:
    """(status, error_messages) for a finished process whose results.json says nothing (or does not exist)."""
    rank_errors = []
    for path in sorted(folder.glob("error_rank*.json")):
        try:
            rank_errors.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    if timed_out:
        return "timeout", "experiment exceeded its timeout and was killed\n" + last_traceback(stderr_text)[-1000:]
    if rank_errors:
        first = next((e for e in rank_errors if e.get("status") == "oom"), rank_errors[0])
        return first.get("status", "error"), f"[rank{first.get('rank', 0)}] " + first.get("error_messages", "")
    trace = last_traceback(stderr_text)
    if is_oom(trace):
        return "oom", trace
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        return "error", f"killed by signal {name} (a host OOM kill shows as SIGKILL)\n{trace}"
    if returncode == 0:
        return "error", "process exited 0 but wrote no results.json\n" + trace
    return "error", trace or f"exit code {returncode}"
