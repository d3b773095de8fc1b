"""User-input errors: each names the file, the key and the fix; the CLI prints them all and exits 2."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputProblem:
    source: str  # file (or "command line")
    key: str  # dotted key path, e.g. "scenarios[1].arguments.max_steps"
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.source}: {self.key}: {self.message}"
        return f"{text} (fix: {self.fix})" if self.fix else text


class InputError(Exception):
    """One or more problems in user input, reported together before anything runs."""

    def __init__(self, problems: list[InputProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

    def __reduce__(self):
        # It crosses processes (a fork of the preload server checks the inputs): rebuilt with its class and its
        # problems, whatever a subclass's own __init__ takes.
        return _input_error_of, (type(self), self.problems), self.__dict__


def _input_error_of(kind: type[InputError], problems: list[InputProblem]) -> InputError:
    error = kind.__new__(kind)
    InputError.__init__(error, problems)
    return error
