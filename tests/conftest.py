"""Shared pytest fixtures and the GPU skip logic."""
import signal

import pytest
import torch

# Two pytest-xdist workers: who shares a worker, who runs alone (tests/fixtures/parallel.py).
pytest_plugins = ["tests.fixtures.parallel"]


def pytest_collection_modifyitems(config, items):
    # GPU tests are skipped where CUDA is absent (CI), never silently passed. By their marks, not their keywords:
    # a folder named gpu (docs/evidence/gpu/'s tests) is a keyword of every test in it.
    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if item.get_closest_marker("gpu") and ngpu == 0:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if item.get_closest_marker("multigpu") and ngpu < 2:
            item.add_marker(pytest.mark.skip(reason="needs 2+ CUDA GPUs"))


# The suite's own watchdog (tunebench.lifetime.orphan_watchdog, in its `always` mode): every process a test starts
# carries the session's token, and however the session ends (a normal end, Ctrl-C, SIGTERM from a timeout, a
# SIGKILL) the watchdog freezes and kills what is left of them: the session's process tree and every process
# holding the token, such as the ranks of a torchrun whose launcher died before them.
SESSION_ENV = "TUNEBENCH_TEST_SESSION"
_session_guardian = None


def pytest_configure(config):
    global _session_guardian
    from tunebench.lifetime.orphan_watchdog import Guardian

    # A suite started as a background job of a script (`cmd &`, nohup) inherits SIGINT ignored, and so would every
    # harness a test starts: the tests that stop one with Ctrl-C's SIGINT would wait on it for minutes while it
    # trains on. A Python handler, unlike SIG_IGN, is not inherited: the processes the tests start get the default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    _session_guardian = Guardian(SESSION_ENV, always=True).__enter__()


def pytest_unconfigure(config):
    global _session_guardian
    if _session_guardian is not None:
        _session_guardian.__exit__(None, None, None)
        _session_guardian = None
