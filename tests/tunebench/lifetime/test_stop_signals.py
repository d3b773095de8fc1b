"""tunebench.lifetime.stop_signals: SIGTERM and SIGHUP raise HarnessStopped in the main thread, then the handlers
are put back."""

from __future__ import annotations

import os
import signal

import pytest

from tunebench.lifetime.stop_signals import HarnessStopped, stop_on_signals


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_is_a_keyboard_interrupt_naming_it(signum):
    before = signal.getsignal(signum)
    with pytest.raises(HarnessStopped) as stopped, stop_on_signals():
        os.kill(os.getpid(), signum)  # the handler runs before the next statement
    assert isinstance(stopped.value, KeyboardInterrupt) and stopped.value.signum == signum
    assert str(stopped.value) == signal.Signals(signum).name and signal.getsignal(signum) == before
