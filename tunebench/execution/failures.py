"""Classify how an experiment ended (ok | oom | error | timeout | skipped) and extract the last traceback."""

from __future__ import annotations

import logging
import re
import signal
from pathlib import Path

from tunebench.readback import Unreadable, load_json
from tunebench.vocabulary import FAILED, Status

logger = logging.getLogger(__name__)

_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?", re.MULTILINE)
# torchrun's failure summary names the first rank that failed; a rank killed by a signal leaves no error file.
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
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


def _killed_rank(stderr_text: str, ranks_with_errors: set) -> str | None:
    """'rank N was killed by SIGx' when torchrun's root cause is a rank that died by a signal."""
    match = _ROOT_CAUSE.search(stderr_text)
    if not match:
        return None
    rank, code = int(match.group(1)), int(match.group(2))
    if code >= 0 or rank in ranks_with_errors:
        return None
    name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
    return f"rank {rank} was killed by signal {name} (first observed failure; a host OOM kill shows as SIGKILL)"


def is_oom(text: str) -> bool:
    return any(marker in text for marker in _OOM_MARKERS)


def classify(returncode: int | None, timed_out: bool, stderr_text: str, folder: Path) -> tuple[str, str]:
    """(status, error_messages) for a finished process whose results.json says nothing (or does not exist)."""
    rank_errors = []
    for path in sorted(folder.glob("error_rank*.json")):
        try:
            error = load_json(path, dict)
        except (OSError, Unreadable) as exc:
            logger.warning("%s: left out of the failure's cause", exc)
            continue
        # The keys read below, typed: a damaged file must not turn the classification into a traceback.
        rank_errors.append({"rank": error["rank"] if isinstance(error.get("rank"), int) else 0,
                            "status": Status(error["status"]) if error.get("status") in FAILED else Status.ERROR,
                            "error_messages": str(error.get("error_messages", ""))})
    if timed_out:
        return Status.TIMEOUT, "experiment exceeded its timeout and was killed\n" + last_traceback(stderr_text)[-1000:]
    killed = _killed_rank(stderr_text, {e.get("rank") for e in rank_errors})
    if killed and not any(e.get("status") == Status.OOM for e in rank_errors):
        # The killed rank is the cause; the others' errors (a peer vanished) are its consequence.
        consequence = (
            f"\n[rank{rank_errors[0].get('rank', 0)}] then: " + rank_errors[0].get("error_messages", "")[-1500:]
            if rank_errors
            else ""
        )
        return Status.ERROR, killed + consequence
    if rank_errors:
        first = next((e for e in rank_errors if e.get("status") == Status.OOM), rank_errors[0])
        return Status(first.get("status", Status.ERROR)), f"[rank{first.get('rank', 0)}] " + first.get(
            "error_messages", ""
        )
    trace = last_traceback(stderr_text)
    if is_oom(trace):
        return Status.OOM, trace
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        return Status.ERROR, f"killed by signal {name} (a host OOM kill shows as SIGKILL)\n{trace}"
    if returncode == 0:
        return Status.ERROR, "process exited 0 but wrote no results.json\n" + trace
    if not trace and not (folder / "stderr.log").exists():  # it failed before its logs were opened
        return Status.ERROR, (f"exit code {returncode} before the experiment opened its stderr.log: it failed while "
                              "starting (a fork of the preload server: the harness's own stderr shows why)")
    return Status.ERROR, trace or f"exit code {returncode}"
