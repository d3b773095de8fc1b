"""The test suite leaves nothing behind, whatever stops it (issue W2): stopping `tox -e test` (a timeout's SIGTERM,
Ctrl-C's SIGINT to the terminal's process group) left two tests/dist/collectives_worker.py ranks alive in their
own process groups, 70 s later. tests/conftest.py's session watchdog now takes every process of the session
along. Here a small pytest run that starts such ranks is stopped at a random moment, a few times, and no process
of its own may remain."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from tests.fixtures.harness import REPO

MARK = "TUNEBENCH_TEST_STOPPED_RUN"


def _holders(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment holds `marker`."""
    found = {}
    for process in psutil.process_iter(["pid", "status"]):
        if process.info["pid"] == os.getpid() or process.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            continue
        try:
            if process.environ().get(MARK) == marker:
                found[process.info["pid"]] = " ".join(process.cmdline())[:200]
        except psutil.Error:  # gone meanwhile, or not ours to read
            continue
    return found


def _stop_at_a_random_moment(signum: int, rng: random.Random, while_ranks_run: bool) -> dict[int, str]:
    """Start the small run, stop it (SIGINT to its process group as a terminal does, SIGTERM to pytest alone as
    a timeout does), and return what of it is still alive a moment after it ended."""
    marker = uuid.uuid4().hex
    env = {**os.environ, MARK: marker, "PYTHONPATH": str(REPO)}
    inner = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                              "tests/scanner/test_collectives.py", "-k", "ddp"], cwd=REPO, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        started = time.monotonic()
        if while_ranks_run:  # the moment the issue saw: the ranks are running
            while not any("collectives_worker" in c for c in _holders(marker).values()):
                assert inner.poll() is None and time.monotonic() - started < 240, "the ranks never started"
                time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 2.0) if while_ranks_run else rng.uniform(0.5, 20.0))
        if inner.poll() is None:
            os.killpg(inner.pid, signum) if signum == signal.SIGINT else inner.send_signal(signum)
        inner.wait(timeout=120)
        deadline = time.monotonic() + 15  # the watchdog's sweep: within a second or two of the end
        while (left := _holders(marker)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left
    finally:
        for pid in _holders(marker):  # whatever the outcome, this test leaves nothing either
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if inner.poll() is None:
            inner.kill()
            inner.wait()


@pytest.mark.slow
@pytest.mark.parametrize("trial", [(signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGTERM, False),
                                   (signal.SIGINT, False)], ids=["sigterm-ranks", "sigint-ranks", "sigterm-any",
                                                                 "sigint-any"])
def test_stopping_the_suite_at_a_random_moment_leaves_no_process_of_its_own(trial):
    signum, while_ranks_run = trial
    rng = random.Random()
    left = _stop_at_a_random_moment(signum, rng, while_ranks_run)
    assert left == {}, f"{signal.Signals(signum).name}: still alive: {left}"
