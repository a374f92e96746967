"""Ctrl-C during training keeps the work: the first SIGINT asks the loop to stop after the step in
progress, with a checkpoint at that step (a save step or not), so that a resume redoes nothing and
equals the uninterrupted run; a second SIGINT stops at once (the last checkpoint is kept, as on a
kill). Only a single-process run's main thread installs the handler: under torchrun every rank would
have to stop at the same step (a collective checkpoint), so there the first SIGINT stops at once.
"""

from __future__ import annotations

import signal
import threading
import time

# A sweep's worker gets one Ctrl-C twice: from the terminal (the whole process group) and from the
# launcher, which forwards it (`rbctl.sweep.local`); a second SIGINT within this many seconds of the
# first is that copy, not a second Ctrl-C. The worker sets it; a lone `rbctl train` merges none.
MERGE_S = {"s": 0.0}


class StopAfterStep:
    """`with StopAfterStep(enabled, log) as stop:` around the training loop; the loop checks
    `stop.requested` after each step, writes the step's checkpoint and raises KeyboardInterrupt."""

    def __init__(self, enabled: bool = True, log=print):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.log = log
        self.at: float | None = None  # when the first SIGINT came
        self._old = None

    @property
    def requested(self) -> bool:
        return self.at is not None

    def _on_sigint(self, signum, frame) -> None:
        now = time.monotonic()
        if self.at is None:
            self.at = now
            self.log("interrupt: finishing this step and writing its checkpoint (Ctrl-C again to stop at once)")
        elif now - self.at >= MERGE_S["s"]:
            raise KeyboardInterrupt

    def __enter__(self) -> "StopAfterStep":
        # a process that inherited SIGINT ignored (a background job of a script) keeps ignoring it
        self.enabled = self.enabled and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        if self.enabled:
            self._old = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            signal.signal(signal.SIGINT, self._old)
