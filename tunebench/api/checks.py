"""One check of what a Python caller hands the API, in the API's own words: every value's type (read from the
annotations of the options dataclass or the function) and range (the field's metadata: the same `Range` and
choices the command line checks), each problem naming `Class: field` or `function: argument`.

The command line reads its text into these same dataclasses; a problem found here is renamed to its option there
(tunebench.api.words.in_cli_words), so both report one check. A value of the wrong type is a problem here, never a
TypeError or an AttributeError from deep inside the pipeline.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import types
import typing
from collections.abc import Iterable
from typing import Any

from tunebench.errors import InputError, InputProblem
from tunebench.user_files import shown

logger = logging.getLogger(__name__)

_SEQUENCES = (list, tuple, set, frozenset)
MAX_ITEMS = 4096  # values of one list option: more is a mistake (each value multiplies the matrix)


def checked_field(option: str | None = None, allowed: Any = None, choices: Any = None, example: str | None = None,
                  nonempty: bool = False, **field_keywords: Any) -> Any:
    """A dataclass field of the API's options with what `field_problems` checks beyond its type: its command-line
    `option` (how the command line names it), its range (`allowed`: a tunebench.bounds.Range, for a list every
    value's), its `choices` (names, or a function giving them), whether a list may be empty, and an `example`
    for the fix."""
    metadata = {key: value for key, value in (("option", option), ("range", allowed), ("choices", choices),
                                              ("example", example), ("nonempty", nonempty or None))
                if value is not None}
    return dataclasses.field(metadata=metadata, **field_keywords)


def cli_names(cls: type) -> dict[str, str]:
    """field → `--option` of every field of `cls` that has one."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(cls) if "option" in f.metadata}


def cli_ranges(cls: type) -> dict[str, Any]:
    """`--option` → range of every ranged field of `cls` that has an option (the command line's edge check)."""
    return {f.metadata["option"]: f.metadata["range"] for f in dataclasses.fields(cls)
            if "option" in f.metadata and "range" in f.metadata}


def short(value: Any) -> str:
    """A value as a problem shows it: its type and a repr cut while it is built (a huge or deeply nested value
    is never rendered whole)."""
    return f"{type(value).__name__} {shown(value)}"


def describe(hint: Any) -> str:
    """A type as the API's documentation says it: `float or None`, `list of int`, `one of 'a', 'b'`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in _SEQUENCES:
        return f"a list of {describe(args[0])}" if args else "a list"
    if origin is dict:
        return f"a dict of {describe(args[0])} to {describe(args[1])}" if args else "a dict"
    if hint is type(None):
        return "None"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    return getattr(hint, "__name__", str(hint))


def matches(value: Any, hint: Any) -> bool:
    """Whether `value` is of type `hint` (the forms the API's annotations use; a bool is no number, a str no
    list, a float a whole number only where one is expected)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint is type(None):
        return value is None
    if origin in _SEQUENCES or hint in _SEQUENCES:
        return isinstance(value, _SEQUENCES) and len(value) <= MAX_ITEMS and \
            (not args or all(matches(v, args[0]) for v in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict) and len(value) <= MAX_ITEMS and \
            (not args or all(matches(k, args[0]) and matches(v, args[1]) for k, v in value.items()))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, str) and value in {m.value for m in hint}
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a form the API does not use: not checked here


def _items(value: Any) -> list:
    return list(value) if isinstance(value, _SEQUENCES) else list(value.values()) if isinstance(value, dict) \
        else [value]


def value_problem(value: Any, hint: Any, metadata: dict) -> str | None:
    """Why `value` is no value of this field: its type, else the range or the choices its metadata names."""
    if not matches(value, hint):
        return f"expected {describe(hint)}, got {short(value)}"
    if metadata.get("nonempty") and isinstance(value, _SEQUENCES) and not value:
        return "an empty list: give at least one value"
    allowed = metadata.get("range")
    choices = metadata.get("choices") or metadata.get("argparse", {}).get("choices")
    for item in _items(value):
        if allowed is not None and (why := allowed.problem(item)):
            return why
        names = choices() if callable(choices) else choices
        if names is not None and item is not None and item not in names:
            return f"{short(item)} is none of: {', '.join(map(str, names))}"
    if isinstance(value, float) and not math.isfinite(value) and allowed is None:
        return f"{value} is not a finite number"
    return None


def fix_for(field: dataclasses.Field, hint: Any) -> str:
    """The fix of a problem of `field`: its own example (metadata `example`), else its default, else its type."""
    if "example" in field.metadata:
        return f"e.g. {field.name}={field.metadata['example']}"
    default = field.default if field.default is not dataclasses.MISSING else None
    if isinstance(default, enum.Enum):
        default = default.value
    return f"e.g. {field.name}={default!r}" if default is not None else f"give {field.name} as {describe(hint)}"


def field_problems(options: Any, source: str | None = None, skip: Iterable[str] = ()) -> list[InputProblem]:
    """Every field of the dataclass instance `options` checked against its annotation and metadata; each problem
    names `source` (default the class name) and the field."""
    cls = type(options)
    source = source or cls.__name__
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # a plugin's Settings whose annotations do not resolve here: its ranges are still checked
        hints = {}
    problems = []
    for field in dataclasses.fields(cls):
        if field.name in skip:
            continue
        hint = hints.get(field.name, Any)
        why = value_problem(getattr(options, field.name), hint, dict(field.metadata))
        if why:
            problems.append(InputProblem(source, field.name, why, fix_for(field, hint)))
    return problems


def argument_problem(function: str, name: str, value: Any, hint: Any, fix: str) -> InputProblem | None:
    """A function's argument of the wrong type, named `function: name`."""
    return None if matches(value, hint) else InputProblem(function, name, f"expected {describe(hint)}, got "
                                                                          f"{short(value)}", fix)


def raise_problems(problems: list[InputProblem | None]) -> None:
    """InputError with the problems found (None: no problem)."""
    found = [p for p in problems if p is not None]
    if found:
        raise InputError(found)
