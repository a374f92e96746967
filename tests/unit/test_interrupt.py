"""`StopAfterStep`: the first SIGINT is a request the loop answers after its step; a second one
stops at once, unless it is the first's copy (a sweep worker gets one from the terminal and one
forwarded by its launcher)."""

from __future__ import annotations

import os
import signal

import pytest

from rbctl.train.interrupt import MERGE_S, StopAfterStep


def _sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture(autouse=True)
def _default_sigint():
    """SIGINT as an interactive Python has it (a background shell's child inherits it ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_the_first_sigint_is_a_request_and_the_second_stops_at_once():
    said = []
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with StopAfterStep(log=said.append) as stop:
            _sigint()
            assert stop.requested and said == [
                "interrupt: finishing this step and writing its checkpoint (Ctrl-C again to stop at once)"]
            _sigint()
            pytest.fail("the second SIGINT did not stop")
    assert signal.getsignal(signal.SIGINT) is before  # the handler is the loop's only


def test_a_copy_within_the_merge_window_is_the_same_interrupt(monkeypatch):
    monkeypatch.setitem(MERGE_S, "s", 60.0)
    with StopAfterStep(log=lambda *a: None) as stop:
        _sigint()
        _sigint()  # the launcher's forwarded copy: merged, no KeyboardInterrupt
        assert stop.requested


def test_disabled_it_leaves_the_default_handler():
    with StopAfterStep(enabled=False) as stop, pytest.raises(KeyboardInterrupt):
        _sigint()
    assert not stop.requested


def test_an_ignored_sigint_stays_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job of a non-interactive shell
    with StopAfterStep(log=lambda *a: None) as stop:
        _sigint()
    assert not stop.requested and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
