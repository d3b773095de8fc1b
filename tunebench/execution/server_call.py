"""Work the harness hands to a fork of its preload server, which imported the training stack already, and the answer.

A run's harness checks and types its matrix against TRL's argument classes and tokenises its data; both need torch,
transformers and TRL, which the server imports anyway (6-10 s of CPU a run in the harness beside that, on a 2-core
machine). `call` runs the function in a fork of the server with the harness's environment, working directory and
log level, and hands back its result, or its exception with the chain of causes (hub_access reads them), and its log
records with their times. The fork has a process group of its own, so that what it starts (the fms probe's
interpreter) goes with it when the harness is stopped while it waits.
"""

from __future__ import annotations

import builtins
import logging
import os
import pickle
import signal
import sys
import traceback

from tunebench.execution import preload
from tunebench.lifetime.parent_death import PRELOADED_PROCESS_NAME

logger = logging.getLogger(__name__)


class ServerUnavailable(RuntimeError):
    """The preload server could not answer (it could not fork, or its fork died): the caller does the work itself."""


def serves(module: str) -> bool:
    """Whether to hand work needing `module` to the server: it was spawned for this run, and this process has not
    imported `module` itself (where it has, as in a test or a Python script, the work is cheaper here)."""
    return preload.spawned_early() and module not in sys.modules


def run_in_server(module: str, doing: str, function, *args):
    """`function(*args)` in a fork of the server where it `serves(module)`, else (or when the fork cannot answer,
    said in a warning that begins with `doing`) here."""
    if serves(module):
        try:
            return call(function, *args)
        except ServerUnavailable as exc:
            logger.warning("%s here instead: %s", doing, exc)
    return function(*args)


def call(function, *args):
    """`function(*args)` in a fork of the server: its result, or its exception raised here (ServerUnavailable if the
    fork could not start or died without answering). What it logged is logged here first."""
    try:
        context = preload.context()
        receiver, sender = context.Pipe(duplex=False)
        # not a daemon: a daemon may not start processes, and datasets' map(num_proc) does
        process = context.Process(target=_answer, name=f"{PRELOADED_PROCESS_NAME}-call", daemon=False,
                                  args=(function, args, dict(os.environ), os.getcwd(), logging.getLogger().level,
                                        preload.running_server_pid(), sender))
        process.start()
    except (OSError, EOFError) as exc:
        raise ServerUnavailable(f"the preload server could not fork ({exc})") from None
    sender.close()
    answered = False
    try:
        outcome, records = receiver.recv()
        answered = True
    except EOFError:
        pass
    finally:
        receiver.close()
        if not answered:  # Ctrl-C or a stop signal here, or a dead fork: nothing of it is left, nothing waited for
            _kill(process)
    process.join()
    if not answered:
        raise ServerUnavailable(f"the fork of the preload server exited with {process.exitcode} before answering")
    for record in records:
        logging.getLogger(record["name"]).handle(logging.makeLogRecord(record))
    raised, value = outcome
    if raised:
        raise _relinked(value)
    return value


def _kill(process) -> None:
    for kill in (lambda: os.killpg(process.pid, signal.SIGKILL), process.kill):
        try:  # its group (what it started too), and itself if it had no group of its own yet
            kill()
        except (OSError, ValueError, AttributeError):
            pass
    process.join()


class _Records(logging.Handler):
    """What the fork logs, as LogRecord attributes that pickle (its message formatted, its traceback as text)."""

    def __init__(self):
        super().__init__()
        self.records: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        attributes = dict(vars(record), msg=record.getMessage(), args=None, exc_info=None)
        if record.exc_info:
            attributes["exc_text"] = logging.Formatter().formatException(record.exc_info)
        self.records.append(attributes)


def _answer(function, args, env: dict[str, str], cwd: str, level: int, server_pid: int | None, sender) -> None:
    preload.settle_fork(env, cwd, server_pid)  # its own group: the harness decides, and kills the group (call)
    records = _Records()
    root = logging.getLogger()
    root.handlers[:] = [records]
    root.setLevel(level)
    try:
        outcome = (False, function(*args))
    except BaseException as exc:  # noqa: BLE001 - raised again in the caller, a SystemExit included
        outcome = (True, _chain(exc))
    try:
        sender.send((outcome, records.records))
    except Exception:  # noqa: BLE001 - an answer that does not pickle: said as text
        sender.send(((True, [(RuntimeError("a fork of the preload server could not send its answer:\n"
                                           + traceback.format_exc()), None)]), records.records))
    sender.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # nothing of the server's exit handlers: the answer is sent


def _chain(exc: BaseException) -> list[tuple[BaseException, str | None]]:
    """The exception and its causes, each as one that pickles, with how it links to the next (`cause`, `context`)."""
    where = "".join(traceback.format_exception(exc))
    if hasattr(exc, "add_note"):
        exc.add_note(f"raised in a fork of the preload server:\n{where}")
    chain, seen, current = [], set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        link = "cause" if current.__cause__ is not None else "context" if current.__context__ is not None else None
        chain.append((_crossing(current), link))
        current = current.__cause__ or current.__context__
    return chain


def _crossing(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else its nearest built-in class with its arguments (an OSError stays an
    OSError, which the command line reports in one line), else with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - a class that cannot be rebuilt from its arguments
        pass
    base = next(kind for kind in type(exc).__mro__ if getattr(builtins, kind.__name__, None) is kind)
    for arguments in (exc.args, (str(exc),)):
        try:
            substitute = base(*arguments)
            pickle.dumps(substitute)
            return substitute
        except Exception:  # noqa: BLE001 - the next, simpler form
            continue
    return RuntimeError(str(exc))


def _relinked(chain: list[tuple[BaseException, str | None]]) -> BaseException:
    for (exc, link), (following, _) in zip(chain, chain[1:], strict=False):
        if link == "cause":
            exc.__cause__ = following
        else:
            exc.__context__ = following
    return chain[0][0]
