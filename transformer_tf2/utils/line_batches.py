"""Lines from a pipe or a terminal, in batches of whatever is waiting: what lets
translate.py answer each line as soon as it is decoded, without waiting for EOF, and still
decode many lines at once when they arrive together (fairseq-interactive's and
marian-decoder's behaviour).

A thread reads the stream line by line into a queue (:class:`LineReader`); :func:`batches`
takes the first waiting line, blocking, and every line already waiting behind it, up to
a batch size. With ``whole_documents`` a batch ends at a blank line (the end of a
document), so that a model with document context reads each document whole.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
from typing import BinaryIO, Iterator

from transformer_tf2.utils.files import not_utf8

_EOF = None  # what the reader puts in the queue at the end of the stream


def is_stream(stream) -> bool:
    """Whether ``stream`` is a pipe, a socket or a terminal (answered line by line), not a
    regular file (read whole, then decoded in length-sorted batches) nor an object
    without a file descriptor."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (AttributeError, OSError, ValueError):
        return False
    return not stat.S_ISREG(mode)


class LineReader:
    """The lines of a binary stream, read by a daemon thread as they arrive: decoded as
    UTF-8 (a leading byte-order mark dropped, CRLF ends fine), surrounding whitespace
    removed. Bytes that are not UTF-8 are one UserError naming ``name`` and the line,
    raised where the line is taken."""

    def __init__(self, stream: BinaryIO, name: str = "stdin"):
        self.name, self.queue = name, queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: BinaryIO) -> None:
        number = 0
        try:
            for raw in iter(stream.readline, b""):
                number += 1
                self.queue.put((number, raw))
        finally:
            self.queue.put(_EOF)

    def line(self, number: int, raw: bytes) -> str:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise not_utf8(self.name, number, raw[e.start]) from None
        if number == 1:
            text = text.removeprefix("\ufeff")
        return text.strip()

    def get(self, block: bool = True):
        """(number, text) of the next line, None at the end of the stream, or, with
        ``block`` False and nothing waiting, queue.Empty raised."""
        item = self.queue.get(block)
        if item is _EOF:
            self.queue.put(_EOF)  # the end stays the end for every later call
            return None
        return item[0], self.line(*item)


def batches(
    reader: LineReader, size: int, whole_documents: bool = False
) -> Iterator[tuple[int, list[str]]]:
    """(number of the first line, lines) of each batch: the first line waiting (the call
    blocks until one arrives) and every line already waiting behind it, at most ``size``.
    With ``whole_documents``, a batch ends after its last blank line; a document not yet
    ended waits for more lines (a document longer than ``size`` lines goes whole, as
    one batch, at its end) and the end of the stream ends the last one."""
    pending: list[str] = []
    first, ended = 1, False
    while pending or not ended:
        if not ended:
            item = reader.get(block=True)
            if item is None:
                ended = True
            else:
                pending.append(item[1])
            while not ended and (whole_documents or len(pending) < size):
                try:
                    item = reader.get(block=False)
                except queue.Empty:
                    break
                if item is None:
                    ended = True
                else:
                    pending.append(item[1])
        if not pending:
            continue
        cut = len(pending)
        if whole_documents and not ended:
            blanks = [i for i, line in enumerate(pending) if not line]
            if not blanks:
                continue  # the document has not ended: wait for more lines
            cut = blanks[-1] + 1
        elif not whole_documents:
            cut = min(cut, size)
        yield first, pending[:cut]
        first, pending = first + cut, pending[cut:]
