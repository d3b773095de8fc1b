"""The plugins' own options on benchmark.py's command line: one group per executor and tracker, made from the fields
of its `Settings` dataclass (tunebench.plugins.cli_option), and read back into a typed Settings object.

A plugin declares an option once, beside the code that reads it: this module never names one.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any

from tunebench.api.words import plugin_settings_classes
from tunebench.bounds import Range
from tunebench.cli.parsing import spellings
from tunebench.errors import InputProblem
from tunebench.plugins import settings_fields

logger = logging.getLogger(__name__)


def _destination(field: dataclasses.Field) -> str:
    return field.metadata["option"].lstrip("-").replace("-", "_")


def add_plugin_options(parser: argparse.ArgumentParser) -> None:
    """One argument group per plugin with options; every option also answers to its dash spelling."""
    for title, settings_class in plugin_settings_classes():
        group = parser.add_argument_group(title)
        for field in settings_fields(settings_class):
            keywords = dict(field.metadata["argparse"])
            names = spellings(field.metadata["option"], *keywords.pop("aliases", []))
            default = None if field.default is dataclasses.MISSING else field.default
            group.add_argument(*names, dest=_destination(field), default=default, help=field.metadata["help"],
                               **keywords)


def refuse_plugin_options(parser, command: str) -> None:
    """The plugins' options, on a parser of a command that does not take them: their defaults, and refused by name
    (`parser.elsewhere`: the command that takes them)."""
    for _, settings_class in plugin_settings_classes():
        for field in settings_fields(settings_class):
            names = [field.metadata["option"], *field.metadata["argparse"].get("aliases", [])]
            parser.elsewhere.update(dict.fromkeys(spellings(*names), command))
            default = None if field.default is dataclasses.MISSING else field.default
            parser.set_defaults(**{_destination(field): default})


def plugin_ranges() -> dict[str, Range]:
    """flag → the range its plugin declared, for the edge check and the options reference page."""
    return {field.metadata["option"]: field.metadata["range"] for _, settings_class in plugin_settings_classes()
            for field in settings_fields(settings_class) if field.metadata.get("range") is not None}


def read_plugin_settings(namespace: argparse.Namespace, problems: list[InputProblem]) -> tuple:
    """Every plugin's Settings as the command line gives them (a field's `read` turns its text into its type,
    naming its option in `problems`)."""
    made = []
    for _, settings_class in plugin_settings_classes():
        values: dict[str, Any] = {}
        for field in settings_fields(settings_class):
            value = getattr(namespace, _destination(field), None)
            read = field.metadata.get("read")
            if read is not None:
                value = read(value, problems)
            if value is not None:
                values[field.name] = value
        made.append(settings_class(**values))
    return tuple(made)
