"""The API's words for what the pipeline names by command-line option.

The layers below the API (expansion, validation, the executors) name an option as the command line spells it
(`--effective_batch_size_matrix`, `--ray_address`). A Python caller never typed those: at the API's edge each
such problem is renamed to the field the caller set (`Matrix.from_yaml: effective_batch_size`,
`RaySettings: address`), its fix's `--option value` to `field=value`. The fields know their options
(tunebench.api.checks.checked_field; a plugin's Settings: tunebench.plugins.cli_option), so nothing is listed
twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections.abc import Iterator

from tunebench.errors import InputError, InputProblem
from tunebench.execution.executors import EXECUTORS
from tunebench.execution.launchers import LAUNCHERS
from tunebench.plugins import settings_fields
from tunebench.telemetry.trackers import TRACKERS

logger = logging.getLogger(__name__)

CLI = "command line"
_OPTION = re.compile(r"--(\w+)(?:[ =]([^\s,;()]+))?")


def plugin_settings_classes() -> list[tuple[str, type]]:
    """(group title, Settings class) of every registered executor and tracker that has options. A plugin that
    fails to import is left out (Registry.broken: another package's bug never stops benchmark.py unless the run
    names that plugin)."""
    found: list[tuple[str, type]] = []
    for registry in (EXECUTORS, TRACKERS):
        for name in registry.names():
            settings_class = getattr(registry.try_load(name), "Settings", None)
            # a plugin that subclasses a built-in shares its Settings: one option group for both
            if settings_fields(settings_class) and all(settings_class is not known for _, known in found):
                found.append((f"{name} {registry.kind}", settings_class))
    return found


def unnamed_broken_plugins(named: set[str]) -> list[InputProblem]:
    """The plugins that could not be loaded and that the run does not name (those it names are its errors)."""
    return [error.problems[0] for registry in (EXECUTORS, TRACKERS, LAUNCHERS)
            for name, error in registry.broken.items() if name not in named]


def option_names(*named: tuple[type, str]) -> dict[str, tuple[str, str]]:
    """`--option` → (source, field) for every field with an option of the options classes `named` ((class, the
    source its problems name)) and of the plugins' settings."""
    names: dict[str, tuple[str, str]] = {}
    for cls, source in (*named, *((c, c.__name__) for _, c in plugin_settings_classes())):
        for field in dataclasses.fields(cls):
            option = field.metadata.get("option")
            if option:
                names[option] = (source, field.name)
                names.update({alias: (source, field.name) for alias in
                              field.metadata.get("argparse", {}).get("aliases", [])})
    return names


def in_api_words(problems: list[InputProblem], names: dict[str, tuple[str, str]]) -> list[InputProblem]:
    """The command line's problems renamed to the API's fields (`names`: option → (source, field))."""
    def field_text(match: re.Match) -> str:
        known = names.get(f"--{match.group(1)}")
        if known is None:
            return match.group(0)
        return f"{known[1]}={match.group(2)}" if match.group(2) else known[1]

    renamed = []
    for problem in problems:
        option = problem.key.split()[0] if problem.key else ""
        if problem.source != CLI or option not in names:
            renamed.append(problem)
            continue
        source, field = names[option]
        renamed.append(InputProblem(source, field, _OPTION.sub(field_text, problem.message),
                                    _OPTION.sub(field_text, problem.fix)))
    return renamed


def in_cli_words(problems: list[InputProblem], *named: tuple[type, str]) -> list[InputProblem]:
    """The API's problems of the options classes `named` ((class, source)) and of the plugins' settings, renamed
    to the command line's options (a field with no option keeps its name)."""
    options: dict[tuple[str, str], str] = {}
    for option, where in option_names(*named).items():
        options.setdefault(where, option)  # the option's own flag, not an alias
    renamed = []
    for problem in problems:
        option = options.get((problem.source, problem.key))
        renamed.append(problem if option is None else InputProblem(
            CLI, option, problem.message, problem.fix.replace(f"e.g. {problem.key}=", f"e.g. {option} ")))
    return renamed


@contextlib.contextmanager
def api_words(*named: tuple[type, str], **arguments: str) -> Iterator[None]:
    """Within it, an InputError's command-line names become the API's: the fields of the options classes `named`
    ((class, source)) and of the plugins' settings, and `arguments` (an option spelt without dashes → the
    function whose argument of that name carries it, e.g. plan_device="plan", or `function.argument`)."""
    try:
        yield
    except InputError as exc:
        names = {**option_names(*named), **{f"--{option}": _argument(option, function)
                                            for option, function in arguments.items()}}
        raise InputError(in_api_words(exc.problems, names)) from None


def _argument(option: str, function: str) -> tuple[str, str]:
    name, _, argument = function.partition(".")
    return name, argument or option
