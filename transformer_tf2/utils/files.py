"""Atomic output: every file or folder the pipeline writes appears whole or not at all.

The one helper is :func:`atomic_path`; :func:`atomic_write` is its common case. A run
killed halfway leaves the previous version (or nothing) under the final name, never a
truncated file. A write that the storage refuses (a full disk, a file-size limit, a quota,
a read-only file system) or that this user may not make (a folder without write
permission) becomes one :class:`errors.UserError` line naming the file, the cause and what
to do (:func:`reporting`), also for the files TensorFlow writes (checkpoints, SavedModels,
TensorBoard events), and for stdout (:func:`print_text`). And the input side, which needs
no TensorFlow: its first checks (:func:`require_file`, :func:`check_text`) and reading a
text file, gzipped or not, as lines (:func:`read_lines`), bytes that are not UTF-8 one
line naming the file and the line.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import gzip
import os
import shutil
import sys

from transformer_tf2.utils.errors import UserError

# errno values meaning that the storage refused the bytes
STORAGE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS)
# errno values meaning that this user may not write there (EPERM: an immutable file)
PERMISSION_ERRNOS = (errno.EACCES, errno.EPERM)
REFUSED_ERRNOS = STORAGE_ERRNOS + PERMISSION_ERRNOS


def refused_errno(error: BaseException) -> int | None:
    """The errno of a write that ``error`` says was refused (:data:`REFUSED_ERRNOS`): an
    OSError's own, or the one whose C library text ('No space left on device',
    'Permission denied', ...) an error of TensorFlow's carries; else None."""
    if isinstance(error, OSError) and error.errno in REFUSED_ERRNOS:
        return error.errno
    text = str(error)
    return next((n for n in REFUSED_ERRNOS if os.strerror(n) in text), None)


def remedy(number: int) -> str:
    """What the user does about a write refused with errno ``number``."""
    if number in PERMISSION_ERRNOS:
        return "give this user write permission there, or choose another folder"
    if number == errno.EROFS:
        return "choose a folder on a writable file system"
    return "free some disk space and run again"


@contextlib.contextmanager
def reporting(path: str, kept: str = "its previous version is kept"):
    """Turn a write to ``path`` that the storage refuses, or that this user may not
    make, into one UserError line saying what failed, where, why, what was kept or lost
    (``kept``) and what to do; other errors pass."""
    try:
        yield
    except UserError:
        raise
    except Exception as e:
        number = refused_errno(e)
        if number is None:
            raise
        raise UserError(
            f"could not write {path} ({os.strerror(number)}); {kept}: {remedy(number)}"
        ) from None


def check_writable(folder: str, kept: str) -> None:
    """Create ``folder`` and write and remove a probe file in it: a folder this user may
    not write, or on a full or read-only file system, is one UserError line (naming
    ``kept``, what is not lost) before the work whose output would go there."""
    with reporting(folder, kept):
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".write-probe-{os.getpid()}")
        with open(probe, "wb") as f:
            f.write(b"\n")
        os.remove(probe)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def temporary_name(path: str) -> str:
    """The name :func:`atomic_path` writes ``path`` under in this process: a hidden name
    beside it, so that the final rename is atomic."""
    folder = os.path.dirname(os.path.abspath(path))
    return os.path.join(folder, f".{os.path.basename(os.path.normpath(path))}.tmp-{os.getpid()}")


def is_own(name: str, tmp_base: str) -> bool:
    """Whether the file ``name`` is what a writer wrote under its temporary name
    ``tmp_base``: that name itself, or one extending it (``.index``, ``.model``). An
    extension never starts with a digit, so another process's temporary name whose
    process id extends this one's (``.tmp-1234`` beside ``.tmp-123``) is not ours."""
    return name == tmp_base or (name.startswith(tmp_base) and not name[len(tmp_base)].isdigit())


@contextlib.contextmanager
def atomic_path(path: str, kept: str = "its previous version is kept"):
    """Yield a temporary name beside ``path``; on success rename it to ``path``.

    What the caller writes under the temporary name - a file, a folder (a SavedModel),
    or files whose names extend it (a checkpoint's ``.index`` and ``.data-*``,
    sentencepiece's ``.model``) - is renamed to the same name with ``path`` in place of
    the temporary one. The temporary name is in the same folder, so each rename is
    atomic; an existing folder under the final name is replaced. On an error, or an
    interrupt, everything under the temporary name is removed and ``path`` is untouched;
    a write refused (by the storage, or for want of permission, its folder's creation
    included) is a UserError saying ``kept`` (:func:`reporting`).
    """
    tmp = temporary_name(path)
    folder, tmp_base = os.path.split(tmp)
    base = os.path.basename(os.path.normpath(path))

    def written() -> list[str]:
        names = os.listdir(folder) if os.path.isdir(folder) else []
        return [name for name in names if is_own(name, tmp_base)]

    try:
        with reporting(path, kept):
            os.makedirs(folder, exist_ok=True)
            yield tmp
            for name in written():
                final = os.path.join(folder, base + name[len(tmp_base) :])
                if os.path.isdir(final) and not os.path.islink(final):
                    shutil.rmtree(final)
                os.replace(os.path.join(folder, name), final)
    finally:
        for name in written():
            _remove(os.path.join(folder, name))


def atomic_write(path: str, data: str | bytes, kept: str = "its previous version is kept") -> None:
    """Write ``data`` (str as UTF-8) to ``path`` through :func:`atomic_path` (``kept``:
    what its error line says was kept)."""
    with atomic_path(path, kept) as tmp, open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def count_lines(path: str) -> int | None:
    """The lines of the file ``path``, or None where it cannot be read (its reader says
    why later, in its own line)."""
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def print_text(text: str) -> None:
    """Write ``text`` to stdout and flush it. A refused write (a full disk, a closed pipe)
    is one UserError line; stdout then goes to /dev/null, so that the interpreter's own
    flush at exit does not fail a second time."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as e:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise UserError(
            f"could not write to stdout ({e.strerror or e}); the output is incomplete: "
            f"write it to a disk with free space"
        ) from None


def require_file(path: str) -> None:
    """``path`` is a file: else one UserError line (not found, or a folder)."""
    if not os.path.exists(path):
        raise UserError(f"{path} not found")
    if os.path.isdir(path):
        raise UserError(f"{path} is a folder, not a file: name a text file")


def not_utf8(name: str, line: int, byte: int) -> UserError:
    """The one line for bytes that are not UTF-8 at ``line`` of ``name``."""
    return UserError(
        f"{name}:{line}: not valid UTF-8 (byte 0x{byte:02x}); convert it, e.g. "
        "iconv -f latin1 -t utf-8"
    )


def check_text(path: str) -> None:
    """A text file a script will read (gunzipped if it ends in .gz): it exists, is a
    file, reads, and is UTF-8, read in pieces; each fault one UserError line naming the
    file (and the line), which a script reports before TensorFlow loads (cli.start)."""
    require_file(path)
    decoder, line = codecs.getincrementaldecoder("utf-8")(), 1
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for piece in iter(lambda: f.read(1 << 20), b""):
                try:
                    decoder.decode(piece)
                except UnicodeDecodeError as e:
                    start = max(0, e.start - len(e.object) + len(piece))
                    bad = e.object[e.start]
                    raise not_utf8(path, line + piece[:start].count(b"\n"), bad) from None
                line += piece.count(b"\n")
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:
        raise not_utf8(path, line, e.object[e.start]) from None
    except (OSError, EOFError) as e:
        raise UserError(f"{path} could not be read ({e}); is it a complete .gz file?") from None


# ---------------------------------------------------------------------------------------
# Reading text files
# ---------------------------------------------------------------------------------------
def read_text(path: str) -> str:
    """The whole file as text (gunzipped if it ends in .gz, see :func:`decode_text`)."""
    require_file(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:
        raise UserError(f"{path} could not be read ({e}); is it a complete .gz file?") from None
    return decode_text(data, path)


def decode_text(data: bytes, name: str) -> str:
    """UTF-8 bytes as text without a leading byte-order mark; bytes that are not UTF-8
    are one clear error naming ``name`` and the line."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise not_utf8(name, data[: e.start].count(b"\n") + 1, data[e.start]) from None


def split_lines(text: str) -> list[str]:
    """The lines of a text (split at \\n alone, so \\r\\n endings work and no other
    character ends a line) with surrounding whitespace removed."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def read_lines(path: str) -> list[str]:
    """Lines of a plain text file with surrounding whitespace removed."""
    return split_lines(read_text(path))
