"""The project's error type: an error the user can fix, reported on one line.

It lives below every other module (``hparams`` re-exports it) so that ``files`` can raise
it for a write that the storage refuses.
"""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix (bad input, bad option, missing file, full disk).

    Scripts print ``error: <message>`` on one line and exit with ``status`` (2 unless
    said otherwise) instead of a traceback (``cli.run_main``); tracebacks are kept for
    bugs.
    """

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status
