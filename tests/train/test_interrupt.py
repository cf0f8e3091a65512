"""Ctrl-C during training (train/interrupt.py): the first SIGINT only asks the loop to stop after its step, a second
one stops at once; a caller that ignores SIGINT, or handles it its own way, keeps that."""

import os
import signal
import time

import pytest

from bertkit.train.interrupt import Interrupt


@pytest.fixture(autouse=True)
def _python_default():
    """SIGINT as Python sets it in a foreground process: a background job (a CI runner's `… &`) inherits it
    ignored, and the interrupt then rightly stays off."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs in the main thread between bytecodes: let it


def test_the_first_ctrl_c_is_a_request_and_the_second_stops_at_once():
    before = signal.getsignal(signal.SIGINT)
    assert before is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        with Interrupt(True) as interrupt:
            _sigint()
            assert interrupt.requested
            _sigint()  # the default again: raised where it lands
    assert signal.getsignal(signal.SIGINT) is before
    with Interrupt(True) as interrupt:  # no Ctrl-C: the handler is put back as it was
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before and not interrupt.requested


def test_an_ignored_or_handled_sigint_and_a_distributed_run_are_left_alone():
    """A script's `bertkit pretrain … &` ignores SIGINT (a Ctrl-C for the foreground job stopped the training); a
    caller's own handler was never called (a review, 2026-11-28); several processes would have to agree."""
    heard = []
    for handler in (signal.SIG_IGN, lambda signum, frame: heard.append(signum)):
        previous = signal.signal(signal.SIGINT, handler)
        try:
            with Interrupt(True) as interrupt:
                assert signal.getsignal(signal.SIGINT) is handler
                _sigint()
            assert not interrupt.requested and signal.getsignal(signal.SIGINT) is handler
        finally:
            signal.signal(signal.SIGINT, previous)
    assert heard == [signal.SIGINT]
    with Interrupt(False) as interrupt:
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and not interrupt.enabled
