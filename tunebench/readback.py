"""Files the harness reads back from disk (results.json, spec.json, steps.json, error_rank*.json, samples sidecars,
the lock), parsed in one place: bounded size and nesting, the JSON shape each must have, and one reason naming the
file and the key when it has not, never a traceback."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAX_BYTES = 256 * 2**20  # a 100 000-step steps.json is ~25 MB; more is not a file the harness wrote
MAX_DEPTH = 32  # the deepest file tunebench writes nests 4 levels; json and later walks recurse per level


class Unreadable(ValueError):
    """A file the harness wrote that cannot be used as it is: `str()` names the file, the key and the reason."""

    def __init__(self, path: str | Path, key: str, reason: str):
        self.path, self.key, self.reason = str(path), key, reason
        super().__init__(f"{path}: {key}: {reason}" if key else f"{path}: {reason}")


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion (a hostile file may nest a million levels)."""
    if not isinstance(value, (dict, list)):
        return 0
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        # only containers are walked: a 100 000-step steps.json is 700 000 numbers and 100 000 objects
        pending.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item)
                       if isinstance(child, (dict, list)))
    return deepest


def load_json(path: str | Path, expected: type | None = None) -> Any:
    """The parsed file; FileNotFoundError when absent, Unreadable for everything else that is wrong with it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise Unreadable(path, "", f"{size:,} bytes, more than the {MAX_BYTES:,} a file of tunebench holds")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as exc:
        raise Unreadable(path, "", f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise Unreadable(path, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise Unreadable(path, "", f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        raise Unreadable(path, "", f"not JSON ({exc})") from None
    if _depth(data) > MAX_DEPTH:
        raise Unreadable(path, "", f"nested more than {MAX_DEPTH} levels deep")
    if expected is not None and not isinstance(data, expected):
        raise Unreadable(path, "", f"expected a JSON {_KINDS.get(expected, expected.__name__)}, got "
                                   f"{_KINDS.get(type(data), type(data).__name__)}")
    return data


_KINDS = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "true/false",
          type(None): "null"}


# The identity every experiment file carries, and what each key must hold (absent keys are the writer's choice).
IDENTITY_CHECKS = {
    "experiment_id": ("a non-empty string", lambda v: isinstance(v, str) and bool(v)),
    "scenario": ("a string", lambda v: isinstance(v, str)),
    "repeat": ("a whole number >= 1", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1),
    "status": ("a string", lambda v: isinstance(v, str)),
    "num_gpus": ("a whole number >= 1", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1),
}


def identity_problem(data: dict, path: str | Path, required: tuple[str, ...] = ("experiment_id",)) -> Unreadable | None:
    """The first identity key of an experiment file that is missing (when required) or of the wrong type."""
    for key, (wanted, ok) in IDENTITY_CHECKS.items():
        if key not in data:
            if key in required:
                return Unreadable(path, key, "missing")
            continue
        if not ok(data[key]):
            return Unreadable(path, key, f"expected {wanted}, got {json.dumps(data[key], default=str)[:40]}")
    return None


def load_experiment_file(path: str | Path, required: tuple[str, ...] = ("experiment_id",)) -> dict:
    """An experiment's spec.json / results.json / config.json: an object whose identity keys are well typed (the
    training entry's own results.json has none yet: the harness adds them, `required=()`)."""
    data = load_json(path, dict)
    problem = identity_problem(data, path, required)
    if problem:
        raise problem
    return data


def read_tail(path: str | Path, limit: int = 2**20) -> str:
    """The last `limit` bytes of a log as text (a run that printed gigabytes is still classified in a moment)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
