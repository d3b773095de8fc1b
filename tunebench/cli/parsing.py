"""What every subcommand's command line shares: defaults in `--help`, a usage error in one line (exit 2), and one
range check of numeric options that rules out NaN, infinities and absurd values, naming the option.

Subcommands declare `{option: Range}` beside their parser and call `option_problems`; `unranged` lists the
numeric options a parser declares without a range (a test keeps it empty for every subcommand).
"""

from __future__ import annotations

import argparse
import difflib
import logging

from tunebench.bounds import Range
from tunebench.errors import InputProblem

logger = logging.getLogger(__name__)

# The training entry's spellings of true and false (transformers' HfArgumentParser reads its booleans so): the
# matrix options answer to the same words. Spelt out here because importing transformers' parser imports torch,
# seconds of every command line's start-up (`--help` included).
TRUE_WORDS = ("yes", "true", "t", "y", "1")
FALSE_WORDS = ("no", "false", "f", "n", "0")


def text_to_bool(text: str | bool) -> bool:
    """A true/false word, case-insensitive, as the entry reads it; ArgumentTypeError naming the accepted ones."""
    if isinstance(text, bool):
        return text
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected one of yes/no, true/false, t/f, y/n, 1/0 (any case), got {text!r}")


def spellings(*names: str) -> list[str]:
    """An option's names and their dash spellings (`--num_gpus` answers to `--num-gpus` too)."""
    return [*names, *[name.replace("_", "-") for name in names if "_" in name.lstrip("-")]]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help plus each option's default, where it has one and its help does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS, []) or "default" in text.lower() or not \
                action.option_strings:
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line naming the option and where to look, exit 2; unknown
    options are all named at once, each with the option meant (a close spelling, or the command that takes it)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.elsewhere: dict[str, str] = {}  # option -> the command that takes it (this one does not)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (fix: see `{self.prog} --help`)\n")

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            problems = unknown_option_problems(self, extras)
            self.exit(2, f"{self.prog}: {len(problems)} problem(s) on the command line; nothing was run:\n" +
                      "".join(f"  - {problem}\n" for problem in problems))
        return parsed


def unknown_option_problems(parser: Parser, extras: list[str]) -> list[str]:
    """A line per argument `parser` does not take: an option of another command says which; a misspelt one the
    closest option; a stray value once."""
    known = [name for name in parser._option_string_actions if name.startswith("--")]
    problems, after_unknown = [], False
    for token in extras:
        name = token.split("=", 1)[0]
        if not name.startswith("-"):
            if not after_unknown:  # the value of a refused option is no problem of its own
                problems.append(f"{token!r}: unexpected argument (fix: see `{parser.prog} --help`)")
            continue
        after_unknown = True
        if name in parser.elsewhere:
            problems.append(f"{name}: an option of `{parser.elsewhere[name]}`, not of `{parser.prog}` (fix: drop it, "
                            f"or run `{parser.elsewhere[name]}`)")
            continue
        spellings = {k.replace("-", "_"): k for k in [*known, *parser.elsewhere] if k.startswith("--")}
        close = difflib.get_close_matches(name.replace("-", "_"), list(spellings), n=1, cutoff=0.75)
        meant = spellings[close[0]] if close else None
        if meant is None:
            fix = f"see `{parser.prog} --help`"
        elif meant in parser.elsewhere:
            fix = f"did you mean {meant}? It is an option of `{parser.elsewhere[meant]}`"
        else:
            fix = f"did you mean {meant}?"
        problems.append(f"{name}: unknown option (fix: {fix})")
    return problems


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace | int:
    """The parsed options, or the exit code argparse chose (`--help`: 0, a usage error: 2), returned instead of
    raised, so that a subcommand's `main` returns it like every other outcome."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _values(namespace: argparse.Namespace, option: str) -> list:
    value = getattr(namespace, option.lstrip("-").replace("-", "_"), None)
    return list(value) if isinstance(value, (list, tuple)) else [value]


def option_problems(namespace: argparse.Namespace, ranges: dict[str, Range],
                    source: str = "command line") -> list[InputProblem]:
    """One problem per numeric option (every value of a list option) outside its range: NaN and ±inf always are."""
    problems = []
    for option, allowed in ranges.items():
        for value in _values(namespace, option):
            if allowed.problem(value):
                problems.append(InputProblem(source, option, f"out of range: {value}",
                                             f"give a value {allowed.describe()}"))
                break
    return problems


def unranged(parser: argparse.ArgumentParser, ranges: dict[str, Range]) -> list[str]:
    """The parser's int/float options with no entry in `ranges`."""
    return [action.option_strings[0] for action in parser._actions
            if action.type in (int, float) and action.option_strings[0] not in ranges]
