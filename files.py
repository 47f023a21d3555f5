"""Atomic output: every file or folder the pipeline writes appears whole or not at all.

The one helper is :func:`atomic_path`; :func:`atomic_write` is its common case. A run
killed halfway leaves the previous version (or nothing) under the final name, never a
truncated file.
"""

from __future__ import annotations

import contextlib
import os
import shutil


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a temporary name beside ``path``; on success rename it to ``path``.

    What the caller writes under the temporary name - a file, a folder (a SavedModel),
    or files whose names extend it (a checkpoint's ``.index`` and ``.data-*``,
    sentencepiece's ``.model``) - is renamed to the same name with ``path`` in place of
    the temporary one. The temporary name is in the same folder, so each rename is
    atomic; an existing folder under the final name is replaced. On an error, or an
    interrupt, everything under the temporary name is removed and ``path`` is untouched.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    base = os.path.basename(os.path.normpath(path))
    tmp_base = f".{base}.tmp-{os.getpid()}"
    tmp = os.path.join(folder, tmp_base)

    def written() -> list[str]:
        return [name for name in os.listdir(folder) if name.startswith(tmp_base)]

    try:
        yield tmp
        for name in written():
            final = os.path.join(folder, base + name[len(tmp_base) :])
            if os.path.isdir(final) and not os.path.islink(final):
                shutil.rmtree(final)
            os.replace(os.path.join(folder, name), final)
    finally:
        for name in written():
            _remove(os.path.join(folder, name))


def atomic_write(path: str, data: str | bytes) -> None:
    """Write ``data`` (str as UTF-8) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
