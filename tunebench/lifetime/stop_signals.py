"""SIGTERM and SIGHUP end the harness the way Ctrl-C does: running experiments killed, finished rows kept."""

from __future__ import annotations

import contextlib
import signal
import threading


class HarnessStopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached the harness: handled like Ctrl-C (running experiments killed, rows kept)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals(signals=(signal.SIGTERM, signal.SIGHUP)):
    """Turn SIGTERM/SIGHUP into HarnessStopped in the main thread, so the Ctrl-C path (kill every running
    experiment's process group, keep the finished rows) runs for them too."""

    def handler(signum, frame):
        raise HarnessStopped(signum)

    if threading.current_thread() is not threading.main_thread():  # Python lets only the main thread handle them
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
