"""A failed run's error as one line: the exception's class and message, without progress bars or colour codes."""

from __future__ import annotations

import logging
import re

logger = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# A tqdm bar: "<desc>: 40%|████      | 4/10 [00:01<00:02, 3.1it/s]" (the bracket part may be cut off by a crash).
_BAR = re.compile(r"[^\r\n|]*?\d{1,3}%\|[^|\r\n]*\|[^\[\r\n]*(?:\[[^\]\r\n]*\]?)?")
# An exception line: a dotted class name ending as Python's do, then its message.
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning))(?::\s*(.*))?$")
MAX_CHARS = 200


def _visible(text: str) -> list[str]:
    """The lines a terminal would end up showing: colour codes gone, each line the text after its last carriage
    return (tqdm redraws a bar in place), bars removed, blank lines dropped."""
    lines = []
    for raw in _ANSI.sub("", text).split("\n"):
        segments = [_BAR.sub("", s).strip() for s in raw.split("\r")]
        kept = [s for s in segments if s]
        if kept:
            lines.append(kept[-1])
    return lines


def one_line(text: object, limit: int = MAX_CHARS) -> str:
    """`Class: message` of the last exception in `text`, else its first visible line; at most `limit` chars."""
    if not isinstance(text, str) or not text.strip():
        return ""
    lines = _visible(text)
    if not lines:
        return ""
    found = next((line for line in reversed(lines) if _EXCEPTION.match(line)), lines[0])
    return found if len(found) <= limit else found[: limit - 1] + "…"
