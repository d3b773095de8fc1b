"""Registries of plugins chosen by name: the built-in ones and those other packages add through entry points.

A registry maps a name to `"module:attribute"` and imports it only when it is asked for (Ray, submitit and the
GPU pollers are heavy), so listing the names costs nothing. Another package adds a plugin with one entry point in
its own metadata, e.g. in its pyproject.toml:

    [project.entry-points."tunebench.trackers"]
    power_meter = "my_package.power:PowerMeterTracker"

Groups: `tunebench.executors`, `tunebench.launchers`, `tunebench.trackers`. A plugin of the same name as a
built-in does not replace it (a typo in another package must not swap out the local executor silently); it is
skipped with a warning.

Another package's plugin can be broken: raise when imported, call sys.exit there, raise when used. Each of those
is a PluginError (an InputError: exit 2) naming the plugin, its entry point and its error in one line, never a
traceback, a silent exit or a matrix of `error` rows; a built-in's failure in use stays the bug it is.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from tunebench.errors import InputError, InputProblem

logger = logging.getLogger(__name__)


class UnknownPlugin(ValueError):
    """A name no registry entry has; the message lists the names there are."""


def error_text(exc: BaseException) -> str:
    """An exception in one short line: its type and the first line of its message (a plugin's message may be
    anything, however long)."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({str(exc.code)[:80]!s})"
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


class PluginError(InputError):
    """A plugin that failed to import or failed in use, named with its entry point and its error."""

    def __init__(self, registry: Registry, name: str, doing: str, exc: BaseException):
        target = registry.targets().get(name, "?")
        fix = ("this is a tunebench bug: please report it" if name in registry.builtins else
               f"fix or uninstall the package that provides it (entry point group {registry.group}), or leave the "
               f"{registry.kind} out")
        super().__init__([InputProblem(f"{registry.kind} plugin {name!r}", target, f"failed {doing}: "
                                       f"{error_text(exc)}", fix)])


@dataclass
class Registry:
    """Named plugins of one kind: `builtins` (name → "module:attribute") plus the entry points of `group`."""

    kind: str  # "executor", "launcher", "tracker": how messages name a plugin
    group: str  # the entry point group other packages register in
    builtins: dict[str, str]
    _found: dict[str, str] | None = field(default=None, repr=False)
    broken: dict[str, PluginError] = field(default_factory=dict, repr=False)  # what try_load could not load

    def targets(self) -> dict[str, str]:
        """name → "module:attribute" of every plugin, the built-in ones first (read once)."""
        if self._found is None:
            found = dict(self.builtins)
            for point in entry_points(group=self.group):
                if point.name in self.builtins:
                    logger.warning("%s plugin %r from %s ignored: a built-in %s has that name", self.kind,
                                   point.name, point.value, self.kind)
                    continue
                found[point.name] = point.value
            self._found = found
        return self._found

    def names(self) -> list[str]:
        return list(self.targets())

    def load(self, name: str) -> Any:
        """The plugin called `name`, imported; UnknownPlugin when there is none, PluginError when it is broken
        (raises or calls sys.exit while imported, or lacks the attribute its entry point names)."""
        target = self.targets().get(name)
        if target is None:
            raise UnknownPlugin(f"unknown {self.kind} {name!r}; the {self.kind}s are: {', '.join(self.names())}")
        module, _, attribute = target.partition(":")
        with self.blame(name, "to load", builtins_too=True):
            loaded: Any = importlib.import_module(module)
            for part in attribute.split(".") if attribute else []:
                loaded = getattr(loaded, part)
        return loaded

    def try_load(self, name: str) -> Any | None:
        """The plugin, or None when it does not load (its PluginError kept in `broken`, for the command line to
        name once: as the error when the run names the plugin, else as a warning)."""
        try:
            return self.load(name)
        except PluginError as exc:
            self.broken[name] = exc
            logger.debug("%s", exc.problems[0])
            return None

    @contextlib.contextmanager
    def blame(self, name: str, doing: str, builtins_too: bool = False) -> Iterator[None]:
        """Around a call into the plugin `name`: what it raises (or a sys.exit) becomes a PluginError naming it
        and what it was `doing`. A built-in's exception is raised as it is (a tunebench bug, with its traceback)
        unless `builtins_too`."""
        try:
            yield
        except PluginError:
            raise
        except (Exception, SystemExit) as exc:
            if name in self.builtins and not builtins_too:
                raise
            raise PluginError(self, name, doing, exc) from exc

    @contextlib.contextmanager
    def entered(self, name: str, doing: str, manager: Any) -> Iterator[Any]:
        """The plugin's context manager `manager`, entered and left with its failures blamed on it (PluginError);
        what the body raises passes through it untouched."""
        with self.blame(name, doing):
            handle = manager.__enter__()
        try:
            yield handle
        except BaseException:
            if not manager.__exit__(*sys.exc_info()):
                raise
        else:
            with self.blame(name, doing):
                manager.__exit__(None, None, None)

    def forget(self) -> None:
        """Read the entry points again on the next look (after a package was installed in this process)."""
        self._found = None
        self.broken.clear()


def cli_option(flag: str, help: str, allowed: Any = None, read: Any = None, **argparse_kwargs: Any) -> dict[str, Any]:
    """A settings field's command-line face, kept in the field's metadata: its flag, help, range (a
    tunebench.bounds.Range, checked at the edge), `read(value, problems)` (turns what argparse parsed into the
    field's type, appending an InputProblem naming the flag when it cannot) and argparse's keywords (`type`,
    `choices`, `metavar`, `aliases`: more flags). benchmark.py builds one option group per plugin from these, so a
    plugin's options are declared once."""
    return {"option": flag, "help": help, "range": allowed, "read": read, "argparse": argparse_kwargs}


def settings_fields(settings_class: Any) -> list:
    """The dataclass fields of a plugin's settings that have a command-line face (cli_option)."""
    from dataclasses import fields, is_dataclass

    if settings_class is None or not is_dataclass(settings_class):
        return []
    return [f for f in fields(settings_class) if "option" in f.metadata]
