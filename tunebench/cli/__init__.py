"""Command line of benchmark.py: read the options into the Python API's typed settings, call it, print, exit.

The command line is a thin client of tunebench.api: the options become a MatrixOptions and a RunSettings (each
plugin's options its own Settings: settings.py), and the API plans, runs and writes. What is wrong with the input is
one InputError, printed a line per problem with exit code 2.

One module per subcommand, named after it, each with its parser and `main(argv)`: compare.py, report.py, tune.py,
verify.py, history.py, bisect.py; `plan` (plan.py) and the run itself (run.py) share benchmark.py's parser
(options.py, each plugin's option group: plugin_options.py), its edge (settings.py) and this module's `main`.
parsing.py holds what every parser shares.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import sys

from tunebench.cli.options import build_parser
from tunebench.errors import InputError
from tunebench.fileio import library_cache_environment
from tunebench.lifetime.orphan_watchdog import Guardian
from tunebench.lifetime.stop_signals import HarnessStopped
from tunebench.plugins import PluginError

logger = logging.getLogger(__name__)

# Subcommands with a parser of their own: each runs tunebench.cli.<name>.main (imported only when used: start-up
# stays short).
SUBCOMMANDS = ("compare", "report", "tune", "verify", "history", "bisect")


def _input_error(exc: InputError) -> int:
    print(f"tunebench: {len(exc.problems)} problem(s) in the input; nothing was run:", file=sys.stderr)
    for problem in exc.problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def _environment_error(exc: OSError) -> int:
    """A fault of the machine (disk full, permissions, an unreachable hub) rather than of the input: one line, exit
    2."""
    from tunebench.api.diagnosis import environment_line

    print(environment_line(exc), file=sys.stderr)
    return 2


def _checked_run(options, planning_only: bool) -> int:
    if planning_only:
        from tunebench.cli.plan import plan

        return plan(options)
    from tunebench.cli.run import run

    return run(options)


def _spawn_preload_server(options) -> None:
    """A local run that will fork experiments spawns the preload server first: its imports (5-15 s) then overlap the
    harness's own reading of the inputs, and the harness types the matrix in a fork of it rather than import TRL.
    On the CPU the server's OpenMP threads sleep at barriers (OMP_WAIT_POLICY, as tunebench.api.running sets it
    for a CPU matrix): its forks inherit them."""
    if options.dry_run or options.no_preload or options.executor != "local" or options.launcher not in (
            None, "forkserver") or _refused_on_sight(options):
        return
    from tunebench.execution.launchers.base import CPU_WAIT_POLICY
    from tunebench.execution.preload import spawn

    if _on_the_cpu(options.device):
        os.environ.setdefault("OMP_WAIT_POLICY", CPU_WAIT_POLICY)
    spawn()


def _refused_on_sight(options) -> bool:
    """Whether the checks that need no library already refuse the run (its results folder, its numeric options): the
    full check then stops it with every problem, and a server spawned for it would import the stack for nothing
    (5-15 s of CPU). Never raises: a check that cannot tell leaves the decision to the full check."""
    from tunebench.cli.options import OPTION_RANGES
    from tunebench.cli.parsing import option_problems
    from tunebench.results import folder as results_folder

    try:
        return bool(results_folder.check(options.results_output_path) or option_problems(options, OPTION_RANGES))
    except Exception:  # noqa: BLE001 - the full check reports it, with the rest
        return False


def _on_the_cpu(device: str) -> bool:
    """Whether the matrix will run on the CPU, as tunebench.api.matrix decides it, without asking nvidia-smi twice
    (without GPUs to use, `auto` is the CPU; `CUDA_VISIBLE_DEVICES=` on a GPU machine is an input error there)."""
    if device != "auto":
        return device == "cpu"
    return shutil.which("nvidia-smi") is None or os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    os.environ.update(library_cache_environment())  # this process's imports leave no cache in the temp directory
    if argv and argv[0] in SUBCOMMANDS:
        from importlib import import_module

        return import_module(f"tunebench.cli.{argv[0]}").main(argv[1:])
    planning_only = bool(argv) and argv[0] == "plan"
    options = build_parser("benchmark.py plan" if planning_only else "benchmark.py").parse_args(
        argv[1:] if planning_only else argv)
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A run starts processes (Ray, the preload server, experiments): a watchdog takes them all along if the
    # harness is killed. A dry run and `plan` start none.
    watchdog = contextlib.nullcontext() if options.dry_run or planning_only else Guardian()
    try:
        with watchdog:
            if not planning_only:
                _spawn_preload_server(options)
            return _checked_run(options, planning_only)
    except PluginError as exc:  # a plugin that failed in use: the run stopped there
        print(f"tunebench: {exc.problems[0]}; the run stopped (the CSVs hold every experiment on disk)",
              file=sys.stderr)
        return 2
    except InputError as exc:
        return _input_error(exc)
    except HarnessStopped as exc:
        print(f"stopped by {exc}: every running experiment was stopped; the CSVs hold every experiment on disk "
              "(interrupted ones as error rows)", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("interrupted: every running experiment was stopped; the CSVs hold every experiment on disk "
              "(interrupted ones as error rows)", file=sys.stderr)
        return 130
    except OSError as exc:
        return _environment_error(exc)


def _exit_interrupted(*_) -> None:
    """Exit 130 at once. multiprocessing's temporary folder (where the preload server listened) goes first: its own
    exit function, which this cuts short or skips, would have removed it (CI once found it left behind)."""
    process = sys.modules.get("multiprocessing.process")
    folder = process.current_process()._config.get("tempdir") if process is not None else None
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
    os._exit(130)


_entered = False  # entry() ran: this process is the command, not a caller of main()


def _ignore_interrupts_from_here_on() -> None:
    """The last of the command's exit functions (registered when this module is imported, before multiprocessing's
    and Ray's, so it runs after theirs: a Ctrl-C in those still exits 130 at once). From here on there is nothing to
    stop. Python resets a handler of its own to the default as it finalizes, and a Ctrl-C in that last moment killed
    the command by the signal (-2, once in CI) after every file was written; an ignored signal it leaves ignored."""
    if _entered:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


atexit.register(_ignore_interrupts_from_here_on)


def entry() -> None:
    """benchmark.py and the installed `tunebench` command: main's exit code. Once the command is done and its files
    are written, a Ctrl-C while the interpreter shuts down (flushing stdout, multiprocessing joining the preload
    server, Ray's atexit) ends it with 130 at once, not a KeyboardInterrupt in a finalizer (-2)."""
    global _entered
    _entered = True
    try:
        code = main()
    except KeyboardInterrupt:  # between main's own handler and the next line: main had stopped already
        code = 130
    signal.signal(signal.SIGINT, _exit_interrupted)  # before the flush: CI once caught the signal inside it
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
