"""SIGINT and SIGTERM while training: finish the step, checkpoint, exit 130 or 143."""

from __future__ import annotations

import contextlib
import os
import signal
import threading


class DevAbandoned(Exception):
    """Raised by :class:`Interrupt` when a signal arrives during the dev evaluation."""


class Interrupt:
    """SIGINT (Ctrl-C) and SIGTERM (a cluster scheduler, ``docker stop``) while training.

    The first signal lets the current step finish; the run then writes a checkpoint and
    :func:`train` returns with ``signal`` set (train.py exits with 128 + its number: 130,
    143). A dev evaluation in progress is abandoned at once (:class:`DevAbandoned`; it
    runs again on resume). A second signal exits at once without a checkpoint
    (``os._exit``): the newest complete checkpoint stays loadable, as after a SIGKILL.
    Handlers are installed only in the main thread, and the previous ones come back on exit.
    """

    def __init__(self):
        self.signum, self.abandonable, self.previous = None, False, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def _handle(self, signum, frame) -> None:
        # os.write: a print here could re-enter a write the main thread is in the middle of
        if self.signum is not None:
            name = signal.Signals(signum).name
            os.write(2, f"\ntrain: second {name}: exiting at once\n".encode())
            os._exit(128 + signum)
        self.signum = signum
        os.write(
            2,
            f"\ntrain: {self.name}: finishing the step and writing a checkpoint "
            f"(send it again to exit at once)\n".encode(),
        )
        if self.abandonable:
            raise DevAbandoned

    @contextlib.contextmanager
    def abandonable_region(self, allowed: bool = True):
        """Inside, a signal raises :class:`DevAbandoned` (when ``allowed``)."""
        self.abandonable = allowed
        try:
            yield
        finally:
            self.abandonable = False
