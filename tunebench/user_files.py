"""Files a user hands tunebench (scenarios, defaults, framework configs, the accelerate config, a GPU table, a
reference or results CSV), read with their bounds checked before anything large is built: the size on disk before
parsing, the values a YAML document stands for once its aliases are expanded before it is walked, and every value a
problem shows cut while its text is built (a 600-byte file of nested anchors stands for more values than memory
holds: its `repr` alone took minutes and gigabytes).

YAML is read with `yaml.safe_load` only. A problem is an InputProblem naming the file; nothing here raises for
what is in a file.
"""

from __future__ import annotations

import logging
import reprlib
from pathlib import Path
from typing import Any

import yaml

from tunebench.errors import InputProblem

logger = logging.getLogger(__name__)

# Far above any real input (the shipped scenarios.yaml is 8 KB, gpus.yaml 9 KB), and what PyYAML's safe loader
# parses in about a second (1.2 MB took 7 s on the 2-core CI machine; a 50 MB GPU table did not finish in 580 s).
MAX_YAML_BYTES = 256 * 2**10
# A YAML file small on disk can stand for a huge document through aliases (`&a [*b, *b, ...]`): its values are
# copied into every experiment and hashed, so the expanded size is bounded.
MAX_YAML_VALUES = 200_000
MAX_CSV_BYTES = 256 * 2**20  # a results CSV of 10 000 experiments is ~60 MB

_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 40, 40, 4, 4, 4
_SHOWN.maxset, _SHOWN.maxfrozenset, _SHOWN.maxlevel, _SHOWN.maxlong = 4, 4, 2, 40


def shown(value: Any) -> str:
    """`value` as a problem shows it: a repr cut while it is built (a few levels, a few items, 40 characters of
    a string), whatever the value's size or nesting."""
    try:
        return _SHOWN.repr(value)
    except Exception:  # an object whose __repr__ raises
        return f"<{type(value).__name__}>"


def size_problem(path: str | Path, limit: int, what: str) -> InputProblem | None:
    """The file's size, checked before it is read: a problem when it is larger than `limit` bytes."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return None  # missing or unreadable: the reader names that
    if size <= limit:
        return None
    return InputProblem(str(path), "-", f"{size:,} bytes, more than the {limit:,} a {what} may hold",
                        "give the file tunebench expects (it is far smaller), not a dump or a log")


def expanded_size(value: Any, memo: dict[int, int], limit: int = MAX_YAML_VALUES) -> int:
    """How many values `value` stands for once every alias is expanded (shared nodes counted per use, each
    counted once thanks to `memo`); stops counting past `limit`."""
    if not isinstance(value, (dict, list)):
        return 1
    if id(value) in memo:
        return memo[id(value)]
    memo[id(value)] = limit + 1  # a node that contains itself expands without end
    items = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
    total = 1
    for key, item in items:
        total += (expanded_size(key, memo, limit) if key is not None else 0) + expanded_size(item, memo, limit)
        if total > limit:
            break
    memo[id(value)] = total
    return total


def read_yaml(path: str | Path, problems: list[InputProblem], max_bytes: int = MAX_YAML_BYTES,
              max_values: int = MAX_YAML_VALUES, what: str = "YAML input") -> Any:
    """A YAML file parsed (safe_load), or None with a problem appended: missing, too large, unreadable,
    malformed, nested too deep, or standing for more than `max_values` values."""
    path = Path(path)
    if not path.is_file():
        problems.append(InputProblem(str(path), "-", "file not found", "pass an existing file path"))
        return None
    if too_large := size_problem(path, max_bytes, what):
        problems.append(too_large)
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f"line {where.line + 1}, column {where.column + 1}" if where else "-"
        problems.append(InputProblem(str(path), line, f"malformed YAML: {str(getattr(exc, 'problem', exc))[:200]}",
                                     "fix the YAML syntax at that position"))
        return None
    except UnicodeDecodeError as exc:
        problems.append(InputProblem(str(path), f"byte {exc.start}", "not UTF-8 text", "save the file as UTF-8"))
        return None
    except RecursionError:
        problems.append(InputProblem(str(path), "-", "nested too deeply to read", "flatten the YAML"))
        return None
    except (OSError, ValueError) as exc:  # ValueError: a scalar PyYAML cannot construct (a date out of range)
        problems.append(InputProblem(str(path), "-", f"cannot read: {getattr(exc, 'strerror', None) or shown(exc)}",
                                     "check the file's permissions and contents"))
        return None
    try:
        too_many = expanded_size(data, {}, max_values) > max_values
    except RecursionError:
        too_many = True
    if too_many:
        problems.append(InputProblem(str(path), "-", f"expands to more than {max_values:,} values (aliases?)",
                                     "write the values out without deeply nested aliases"))
        return None
    return data
