"""The commands of README.md and of the docs pages, checked statically (issue AC): every `benchmark.py` command
parses with the parser it names (options known, values of the right type and choice), and every script, module,
tox env and input file a command names exists. Cheap enough for every run of the suite; running them as written,
in a fresh environment, is scripts/check_readme.py's job (CI runs it once, after the suite)."""

from __future__ import annotations

import argparse
import configparser
import contextlib
import importlib
import importlib.util
import io
import re
import shlex
import sys

import pytest

from tests.fixtures.harness import REPO

sys.path.insert(0, str(REPO / "scripts"))
import check_readme  # noqa: E402

PAGES = check_readme.doc_pages()
INPUT_SUFFIXES = (".yaml", ".yml", ".csv", ".json", ".py", ".sh")
OUTPUT_OPTIONS = {"--out", "--write_reference", "--parquet", "--results_output_path"}
SHELL_FENCES = {"sh", "shell", "console", "zsh", "bash-session", "shell-session"}


def _blocks(page) -> list[tuple[str, int, list[str]]]:
    """(info string, first line, lines) of every fenced block of a page."""
    blocks, current = [], None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("```"):
            if current is None:
                current = (line[3:].strip(), number + 1, [])
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current[2].append(line)
    return blocks


def _sketches(page) -> list[check_readme.Command]:
    """`python benchmark.py` lines of text and unlabelled blocks: synopses and sketches, checked for their options."""
    found = []
    for info, first, lines in _blocks(page):
        if info not in ("", "text"):
            continue
        pending = []
        for offset, line in enumerate(lines):
            if pending or line.startswith("python benchmark.py"):
                pending.append(line)
                if not line.rstrip().endswith("\\"):
                    found.append(check_readme.Command(first + offset - len(pending) + 1, "\n".join(pending), "",
                                                      check_readme.page_name(page)))
                    pending = []
    return found


COMMANDS = [c for page in PAGES for c in check_readme.readme_commands(page)]
SKETCHES = [c for page in PAGES for c in _sketches(page)]


def _segments(command: check_readme.Command) -> list[list[str]]:
    """The simple commands of a command line, environment assignments left off."""
    text = re.sub(r'"\$\([^)]*\)"', "SUBSTITUTED", command.bare)
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    segments, current = [], []
    for token in lexer:
        if token in ("&&", "||", ";", "|", "&"):
            segments.append(current)
            current = []
        else:
            current.append(token)
    segments.append(current)
    return [[t for i, t in enumerate(s) if not (re.fullmatch(r"[A-Z_]+=.*", t) and all(
        re.fullmatch(r"[A-Z_]+=.*", u) for u in s[:i + 1]))] for s in segments if s]


def _parsers(args: list[str]) -> list[tuple[argparse.ArgumentParser, list[str]]]:
    """The parser(s) benchmark.py would read these arguments with, and the arguments each reads."""
    from tunebench.cli import SUBCOMMANDS
    from tunebench.cli.options import build_parser

    if args and args[0] == "plan":
        return [(build_parser("benchmark.py plan"), args[1:])]
    if args and args[0] == "bisect":
        at = args.index("--") if "--" in args else len(args)
        module = importlib.import_module("tunebench.cli.bisect")
        return [(module.build_parser(), args[1:at]), (build_parser(), args[at + 1:])]
    if args and args[0] in SUBCOMMANDS:
        return [(importlib.import_module(f"tunebench.cli.{args[0]}").build_parser(), args[1:])]
    return [(build_parser(), args)]


def _option_names(parser: argparse.ArgumentParser) -> set[str]:
    names = set()
    for action in parser._actions:
        names.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                names |= _option_names(child)
    return names


def _benchmark_problems(args: list[str], sketch: bool) -> list[str]:
    problems = []
    for parser, part in _parsers(args):
        if sketch:  # placeholders (`<x>`, `[--out DIR]`, `...`): only the options it names must exist
            known = _option_names(parser)
            problems += [f"unknown option {name}" for token in part if token.lstrip("[").startswith("--")
                         and (name := token.lstrip("[").rstrip("]").split("=")[0]) not in known]
            continue
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            try:
                parser.parse_args(part)
            except SystemExit as exc:
                if exc.code:
                    problems.append(stderr.getvalue().strip() or f"exit {exc.code}")
    return problems


def _tox_envs() -> set[str]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    return {s.split(":", 1)[1] for s in tox.sections() if s.startswith("testenv:")}


def problems_of(command: check_readme.Command, sketch: bool = False) -> list[str]:
    """What is wrong with one command of a page, read statically; [] when nothing is."""
    problems = []
    for tokens in _segments(command):
        program, args = tokens[0], tokens[1:]
        if program in ("python", "python3") and args[:1] == ["-m"] and args[1].startswith(("tunebench", "scanner")):
            if importlib.util.find_spec(args[1]) is None:
                problems.append(f"no module {args[1]}")
        elif program in ("python", "python3") and args and args[0].endswith(".py"):
            if not (REPO / args[0]).is_file():
                problems.append(f"no script {args[0]}")
            elif args[0] == "benchmark.py":
                problems += _benchmark_problems(args[1:], sketch)
        elif program == "bash" and args and not (REPO / args[0]).is_file():
            problems.append(f"no script {args[0]}")
        elif program == "tox" and "-e" in args and args[args.index("-e") + 1] not in _tox_envs():
            problems.append(f"no tox env {args[args.index('-e') + 1]}")
        if sketch:
            continue
        for before, token in zip(["", *tokens[:-1]], tokens, strict=True):
            if (token.endswith(INPUT_SUFFIXES) and before not in OUTPUT_OPTIONS and not token.startswith("/")
                    and not any(c in token for c in "<*$") and not (REPO / token).exists()
                    and f"no script {token}" not in problems):
                problems.append(f"no file {token}")
    return problems


def test_the_pages_have_commands_to_check():
    names = {c.page for c in COMMANDS}
    assert {"README.md", "docs/guides/running.md", "docs/guides/history.md", "docs/guides/clusters.md"} <= names
    assert len(COMMANDS) >= 30 and not any("evidence" in page.parts for page in PAGES)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_every_command_parses_and_names_what_exists(command):
    assert problems_of(command) == [], command.text


@pytest.mark.parametrize("command", SKETCHES, ids=lambda c: c.where)
def test_every_sketch_names_known_options(command):
    assert problems_of(command, sketch=True) == [], command.text


def test_shell_blocks_are_bash_blocks_so_that_they_are_run():
    """A ```sh or ```console block would escape scripts/check_readme.py: the pages write shell as ```bash."""
    odd = [f"{check_readme.page_name(page)}:{first - 1}" for page in PAGES for info, first, _ in _blocks(page)
           if info in SHELL_FENCES]
    assert odd == []


def test_the_check_catches_what_a_page_gets_wrong():
    Command = check_readme.Command
    assert problems_of(Command(1, "python benchmark.py --no_such_option 1", "")) != []
    assert problems_of(Command(1, "python benchmark.py compare --reference refs/missing.csv --results out", "")) == [
        "no file refs/missing.csv"]
    assert problems_of(Command(1, "python benchmark.py plan --device gpu", "")) != []
    assert problems_of(Command(1, "tox -e no-such-env", "")) == ["no tox env no-such-env"]
    assert problems_of(Command(1, "python scripts/missing.py && bash scripts/run_benchmarks.sh", "")) == [
        "no script scripts/missing.py"]
    assert problems_of(Command(1, "python benchmark.py history add out --label \"$(git rev-parse HEAD)\"", "")) == []
    sketch = Command(1, "python benchmark.py tune --no_such [--results_output_path DIR] ...", "")
    assert problems_of(sketch, sketch=True) == ["unknown option --no_such"]


def test_the_tox_env_runs_the_script_the_guide_names():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    assert tox["testenv:run-benches"]["commands"].strip() == "bash scripts/run_benchmarks.sh {posargs}"
