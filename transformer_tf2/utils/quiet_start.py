"""A quiet start on a machine without a GPU: TensorFlow's C++ start-up lines, some printed
before its logging starts (so ``TF_CPP_MIN_LOG_LEVEL`` cannot hide them), dropped from this
process's standard error by a forked child that copies the rest at once. Only the lines of
:data:`NOISE` are filtered; ``cli.start`` turns it on unless ``--verbose``.
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import signal
import sys
import time

# TensorFlow's C++ start-up lines on a machine without a GPU; some are printed before its
# logging starts, so TF_CPP_MIN_LOG_LEVEL cannot hide them. Only these are filtered.
NOISE = re.compile(
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IWE]\d{4} [\d:.]+ +\d+ \w+\.cc:\d+\] (?:oneDNN custom operations are on"
    rb"|Could not find cuda drivers on your machine|failed call to cuInit"
    rb"|This TensorFlow binary is optimized to use available CPU instructions).*"
    rb"|To enable the following instructions: .* rebuild TensorFlow with the appropriate "
    rb"compiler flags\."
)
NOISE_HEADS = (b"WARNING: All log messages", b"To enable the following instructions")


def gpu_present() -> bool:
    """An NVIDIA device file or CUDA_VISIBLE_DEVICES: then nothing is filtered."""
    return bool(glob.glob("/dev/nvidia*")) or "CUDA_VISIBLE_DEVICES" in os.environ


def is_noise(line: bytes) -> bool:
    return NOISE.fullmatch(line.rstrip(b"\r\n")) is not None


def _may_become_noise(partial: bytes) -> bool:
    """Whether an unfinished line could still turn out to be a NOISE line."""
    if re.match(rb"[IWE]\d{0,4}$|[IWE]\d{4} ", partial):
        return True
    return any(h.startswith(partial) or partial.startswith(h) for h in NOISE_HEADS)


def filter_stream(read_fd: int, write_fd: int) -> None:
    """Copy read_fd to write_fd until EOF, dropping NOISE lines; an unfinished line that
    cannot be noise (a progress bar) passes at once. A failing write (a closed pipe)
    stops the copying, not the draining."""
    pending, writable = b"", True
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        out = b"".join(line + b"\n" for line in lines if not is_noise(line))
        if pending and not _may_become_noise(pending):
            out, pending = out + pending, b""
        if out and writable:
            try:
                os.write(write_fd, out)
            except OSError:
                writable = False
    if pending and writable and not is_noise(pending):
        try:
            os.write(write_fd, pending)
        except OSError:
            pass


def quiet_stderr() -> None:
    """Route this process's standard error (fd 2, C++ writes included) through a child
    process that drops the NOISE lines. The child outlives a crash of this process, so no
    last words are lost; it ignores Ctrl-C and ends when the pipe closes."""
    if os.isatty(2):  # progress bars size themselves from these once stderr is a pipe
        size = os.get_terminal_size(2)
        os.environ.setdefault("COLUMNS", str(size.columns))
        os.environ.setdefault("LINES", str(size.lines))
    read_fd, write_fd = os.pipe()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the filter
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.close(write_fd)
            os.close(0)
            os.close(1)
            filter_stream(read_fd, 2)
        finally:
            os._exit(0)
    os.close(read_fd)
    real = os.dup(2)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    atexit.register(_end_filter, real, pid)


def _end_filter(real: int, pid: int) -> None:
    """At exit: close the pipe and wait (at most 5 s) for the filter to copy the rest."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(real, 2)
    os.close(real)
    deadline = time.time() + 5
    while time.time() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.01)
