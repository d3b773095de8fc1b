"""An experiment's resolved arguments → typed values, once (HfArgumentParser), and typed values → the entry's objects.

The harness parses each experiment exactly once, in the parent, while it validates the matrix: `typed_values`
runs HfArgumentParser's type conversions (a YAML `2e-5` is a string until then) over the entry's groups and
TRL's SFTConfig and keeps the keys that were given. The typed values travel in the experiment's spec.json;
the child only builds its objects from them (`build`): nothing is parsed again.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import json
import logging
from typing import Any

from tunebench.experiment.arguments import ENTRY_GROUPS, training_class, training_fields

logger = logging.getLogger(__name__)

TRAINING = "training"  # the SFTConfig group
GROUPS = (*ENTRY_GROUPS, TRAINING)


class ArgumentError(ValueError):
    """An argument value that the entry's parser rejects (wrong type, unknown choice, unknown key)."""


def to_argv(arguments: dict[str, Any], bare: frozenset[str] = frozenset()) -> list[str]:
    """`{key: value}` → `--key value` in the form HfArgumentParser reads (bools as true/false, lists as separate
    values, dicts as JSON). `bare`: options whose true is the option alone (`fsdp`, a text whose bare flag means
    true: `--fsdp true` would be the word 'true'); their false is not passed (unset)."""
    argv: list[str] = []
    for key, value in arguments.items():
        if value is None or (key in bare and value is False):
            continue
        argv.append(f"--{key}")
        if key in bare and value is True:
            continue
        if isinstance(value, bool):
            argv.append("true" if value else "false")
        elif isinstance(value, (list, tuple)):
            argv.extend(str(v) for v in value)
        elif isinstance(value, dict):
            argv.append(json.dumps(value, sort_keys=True))
        else:
            argv.append(str(value))
    return argv


@functools.lru_cache(maxsize=1)
def checkpointing_renames() -> dict[str, str]:
    """transformers >= 5.2x renamed `gradient_checkpointing*` to `activation_checkpointing*` and warns on the old
    names (TRL's SFTConfig sets the old one by default, so every run warned). Users keep writing the familiar
    name; the harness passes it on under the name this transformers reads. {} on older versions."""
    names = training_fields().defaults.keys()
    if "activation_checkpointing" not in names:
        return {}
    return {"gradient_checkpointing": "activation_checkpointing",
            "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs"}


def quiet_renamed_checkpointing_warning() -> None:
    """PEFT (0.21) reads `model.is_gradient_checkpointing` when it wraps a model, which transformers >= 5.2x
    deprecated in favour of `is_activation_checkpointing`: a FutureWarning in every PEFT run that neither the
    user nor tunebench can act on. Only that message is silenced, and only where the rename exists."""
    if checkpointing_renames():
        import warnings

        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)


def checkpointing_on(training: dict[str, Any]) -> bool:
    """Whether a training group (typed values) turns activation (gradient) checkpointing on."""
    for name in ("activation_checkpointing", "gradient_checkpointing"):
        if training.get(name) is not None:
            return bool(training[name])
    return bool(training_fields().defaults["gradient_checkpointing"])


class EntryParser:
    """HfArgumentParser over the entry's groups and SFTConfig, raising ArgumentError instead of exiting."""

    def __init__(self):
        from transformers import HfArgumentParser

        self.types = {**ENTRY_GROUPS, TRAINING: training_class()}
        self.parser = HfArgumentParser(tuple(self.types.values()), exit_on_error=False)
        self.parser.error = self._raise  # argparse calls error() for bad choices/types and missing values
        self.fields = {
            group: {f.name for f in dataclasses.fields(kind) if f.init} for group, kind in self.types.items()
        }
        # Text options whose bare flag is true (transformers' `fsdp`: `nargs="?"`, `const=True`, type str; the
        # booleans are parsed that way too, but read `true`/`false` as given).
        self.bare = frozenset(a.dest for a in self.parser._actions if a.nargs == "?" and a.const is True
                              and a.type is str)

    @staticmethod
    def _raise(message: str):
        raise ArgumentError(message)

    def known_keys(self) -> set[str]:
        return set().union(*self.fields.values())

    def typed_values(self, arguments: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """{group: {key: typed value}} for the keys `arguments` gives (None values are not given)."""
        renames = checkpointing_renames()
        given: dict[str, Any] = {}
        for key, value in arguments.items():
            new = renames.get(key)
            given[new if new and new not in arguments else key] = value
        if renames and "activation_checkpointing" not in given:
            # TRL's default (True) under the new name, so neither the default nor the old name warns.
            given["activation_checkpointing"] = checkpointing_on({})
        given = {k: v for k, v in given.items() if v is not None}
        for key, value in given.items():
            action = self.parser._option_string_actions.get(f"--{key}")
            # a list for an option of one value would leave its tail as "unrecognised arguments", naming no key
            if isinstance(value, (list, tuple)) and len(value) != 1 and action is not None \
                    and action.nargs in (None, "?"):
                raise ArgumentError(f"argument --{key}: expected one value, got a list of {len(value)}")
        try:
            namespace, remaining = self.parser.parse_known_args(to_argv(given, self.bare))
        except argparse.ArgumentError as exc:
            raise ArgumentError(str(exc)) from exc
        if remaining:
            raise ArgumentError(f"unrecognised arguments: {' '.join(remaining)}")
        parsed = vars(namespace)
        return {group: {k: parsed[k] for k in given if k in keys} for group, keys in self.fields.items()}

    def typed_values_by_key(self, arguments: dict[str, Any]) -> tuple[dict[str, dict[str, Any]],
                                                                       dict[str, tuple[str, str]]]:
        """The typed values of the keys whose values parse, and {key: (why not, fix)} for each that does not: argparse
        stops at the first bad value, so a user with three would need three round trips."""
        try:
            return self.typed_values(arguments), {}
        except ArgumentError:
            pass
        refused = {}
        for key, value in arguments.items():  # rare (a matrix with a bad value): one parse per key
            try:
                self.typed_values({key: value})
            except ArgumentError as exc:
                refused[key] = self.in_key_words(key, value, str(exc))
        return self.typed_values({k: v for k, v in arguments.items() if k not in refused}), refused

    def in_key_words(self, key: str, value: Any, message: str) -> tuple[str, str]:
        """argparse's `argument --peft_method/--peft-method: invalid choice: ...` said of a key of a file or dict
        (no command-line flags), and its fix: the closest choice where there is one."""
        said = message.split(": ", 1)[1] if message.startswith("argument --") and ": " in message else message
        action = self.parser._option_string_actions.get(f"--{key}")
        if action is not None and action.choices and "invalid choice" in said:
            choices = {str(c).lower(): str(c) for c in action.choices}  # `LoRA` means `lora`
            close = difflib.get_close_matches(str(value).lower(), list(choices), n=1, cutoff=0.5)
            if close:
                return said, f"did you mean {choices[close[0]]!r}?"
        return said, "give a value of the expected type"



    def parse_argv(self, argv: list[str]) -> tuple:
        """`--key value ...` typed into the entry's objects: for running the entry by hand (the harness passes
        `--spec spec.json` instead)."""
        try:
            namespace, remaining = self.parser.parse_known_args(argv)
        except argparse.ArgumentError as exc:
            raise ArgumentError(str(exc)) from exc
        if remaining:
            raise ArgumentError(f"unrecognised arguments: {' '.join(remaining)}")
        given = {k: v for k, v in vars(namespace).items() if f"--{k}" in argv}
        return build_entry({group: {k: given[k] for k in given if k in keys} for group, keys in self.fields.items()})


@functools.lru_cache(maxsize=1)
def entry_parser() -> EntryParser:
    """One parser per process: building HfArgumentParser over SFTConfig's ~200 fields takes ~50 ms."""
    return EntryParser()


def build_entry(values: dict[str, dict[str, Any]]) -> tuple:
    """The entry's objects (ModelArguments, DataArguments, PeftArguments, BenchArguments, SFTConfig) from typed
    values: no parsing at all. SFTConfig's own checks (__post_init__) run here, on the machine that builds them."""
    types = {**ENTRY_GROUPS, TRAINING: training_class()}
    return tuple(kind(**values.get(group, {})) for group, kind in types.items())
