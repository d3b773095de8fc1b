"""Single-process experiments forked from a server that imported torch, transformers and TRL once per matrix.

Importing torch, transformers, TRL, PEFT and datasets is most of an experiment's start-up (12-17 s of 13-18 s
on the GPU machines measured; docs/evidence/throughput-h100): every experiment of a matrix paid it again.
multiprocessing's forkserver imports them once (`set_forkserver_preload`); each experiment is then a fork of
that server, in its own session (process group), with its own environment, working directory and log files,
running the same `tunebench.experiment.train.main` that `command.sh` runs. CUDA is never initialised in the
server, so every fork starts with a clean device and the CUDA_VISIBLE_DEVICES it is given.

Multi-process experiments keep their launcher (torchrun / accelerate launch starts its own processes).

The command line spawns the server as a run begins (`spawn`), before it reads the inputs, and the harness checks
its matrix and tokenises its data in forks of it (server_call.py): it never imports the training stack itself (it
once did, 6-10 s of CPU a run beside the server's own import of it). A run whose input is refused stops the server
with the rest; one whose command line is refused on sight (its results folder, its numeric options) spawns none.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import time

from tunebench.fileio import library_cache_environment
from tunebench.lifetime.parent_death import HARNESS_PID_ENV, PRELOADED_PROCESS_NAME, die_with_parent

logger = logging.getLogger(__name__)

# What the server imports once; an experiment's own imports then find them in sys.modules.
# The guard comes first: the server must die with the harness even while it is still importing the rest.
PRELOAD_MODULES = ["tunebench.lifetime.forkserver_setup", "tunebench.experiment.preloaded"]
NOT_PRELOADED_ENV = "TUNEBENCH_NOT_PRELOADED"  # set by a fork that had to start a new interpreter after all


_spawned_at: float | None = None  # when this process's server was spawned (monotonic), if it was


def context():
    """This process's forkserver context, its preload list set (multiprocessing keeps one server per process)."""
    os.environ[HARNESS_PID_ENV] = str(os.getpid())  # the server inherits it: whom to die with
    os.environ.update(library_cache_environment())  # its imports write no cache into the temporary directory
    _short_socket_folder()
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD_MODULES)
    return context


def spawn() -> None:
    """Start the server now without waiting for it: its imports run while this process does other work."""
    global _spawned_at
    if _spawned_at is None:
        context()
        from multiprocessing import forkserver

        forkserver.ensure_running()
        _spawned_at = time.monotonic()


def spawned_early() -> bool:
    """Whether `spawn` started this process's server."""
    return _spawned_at is not None


def running_server_pid() -> int | None:
    """The pid of this process's server, started now if it is not running: the parent its forks check for."""
    from multiprocessing import forkserver

    forkserver.ensure_running()
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


class PreloadServer:
    """The run's preload server: started (its imports paid) once by `warm`, then every `start` is a fork of it.

    multiprocessing keeps one forkserver per Python process, so every PreloadServer of a process forks from the
    same one; the object holds what this run knows of it (the start-up it paid), and tune keeps one for all the
    batches of a search.
    """

    def __init__(self):
        self._context = None
        self.warm_seconds: float | None = None  # what starting it cost this run (None: not started yet)

    def _server(self):
        if self._context is None:
            self._context = context()
        return self._context

    def warm(self) -> float:
        """Start the server (it imports the modules) once, or wait for the one `spawn` started; how long this run
        waited for it, in seconds (a server spawned early did part or all of its imports beside other work)."""
        if self.warm_seconds is None:
            started = time.monotonic()
            process = self._server().Process(target=_noop, daemon=False, name=f"{PRELOADED_PROCESS_NAME}-warm")
            process.start()
            process.join()
            self.warm_seconds = time.monotonic() - started
            if _spawned_at is not None and _spawned_at < started:
                logger.info("the preload server was spawned %.1f s before the first experiment needed it",
                            started - _spawned_at)
        return self.warm_seconds

    def start(self, argv: list[str], env: dict[str, str], cwd: str, stdout_path: str, stderr_path: str):
        """Fork the training entry from the server; returns the multiprocessing Process (pid = its group id)."""
        context = self._server()
        server_pid = running_server_pid()  # the fork's parent-to-be
        logs = (os.path.abspath(stdout_path), os.path.abspath(stderr_path))  # the fork opens them in `cwd`
        process = context.Process(target=_run_entry, args=(argv, env, cwd, *logs, server_pid),
                                  daemon=False, name=f"{PRELOADED_PROCESS_NAME}-experiment")
        process.start()
        return process


# An AF_UNIX address holds 108 bytes; the forkserver's is <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX (32 more).
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def _short_socket_folder(fallback: str = "/tmp") -> None:
    """multiprocessing's folder (where the forkserver listens), under `fallback` when the temporary directory's path
    is too long for a socket's address: a long TMPDIR (a Slurm job's, a test's) stopped every run with "AF_UNIX
    path too long" (Python 3.13 falls back so itself). multiprocessing removes the folder at exit, as always."""
    import tempfile
    from multiprocessing import util

    if len(os.fsencode(tempfile.gettempdir())) + SOCKET_SUFFIX <= SOCKET_PATH_MAX or not os.path.isdir(fallback):
        return
    previous, tempfile.tempdir = tempfile.tempdir, fallback
    try:
        folder = util.get_temp_dir()  # made now under the fallback, and kept for the process's sockets
    finally:
        tempfile.tempdir = previous
    logger.info("the temporary directory's path is too long for a socket: the preload server listens in %s", folder)


def _noop() -> None:
    pass


def settle_fork(env: dict[str, str], cwd: str, server_pid: int | None) -> None:
    """What a fork of the server does first, an experiment's and a `server_call`'s alike: a session (process group)
    of its own, which the harness kills whole; death with the server; the caller's environment and working
    directory; the signals' defaults, with Ctrl-C a KeyboardInterrupt as in `python`, not the server's SIG_IGN
    (which its children would keep)."""
    os.setsid()
    die_with_parent(expected_parent=server_pid)  # the server dies with the harness, and this with the server
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # A fork of the server inherits its start method (forkserver), so the locks tqdm and the data loader make here
    # were named semaphores registered with the harness's resource tracker: an experiment killed on Ctrl-C left
    # "leaked semaphore objects" warnings at the harness's exit. The platform's default, as `python -m` has.
    multiprocessing.set_start_method(None, force=True)


def _run_entry(argv: list[str], env: dict[str, str], cwd: str, stdout_path: str, stderr_path: str,
               server_pid: int | None = None) -> None:
    settle_fork(env, cwd, server_pid)  # first: the group the harness kills exists from here on
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    import torch

    if torch.cuda._is_in_bad_fork():
        # The server initialised CUDA after all (an import that reads the GPUs): a fork cannot use it. This
        # process becomes a new interpreter instead, with the same pid, group, files and environment.
        print("tunebench: the preload server initialised CUDA, so this fork cannot use it: starting the training "
              "entry in a new interpreter instead", file=sys.stderr, flush=True)
        os.environ[NOT_PRELOADED_ENV] = "1"  # the row then says startup_preloaded false
        os.execv(sys.executable, [sys.executable, "-m", "tunebench.experiment.train", *argv])
    threads = env.get("OMP_NUM_THREADS")
    if threads and threads.isdigit():  # the server's thread pool was sized for the whole machine
        torch.set_num_threads(int(threads))
    from tunebench.experiment.train import main

    sys.argv = ["tunebench.experiment.train", *argv]
    sys.exit(main(argv))  # multiprocessing turns SystemExit into the exit code, after normal clean-up
