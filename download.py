"""Fetch the public corpora used by ``prepro.py --download``.

Standard library only, plus ``tqdm`` for the progress bar and the project's
:mod:`files`.  Nothing happens at import time; the entry points are :func:`fetch`
(one URL to one file) and :func:`download_corpus` (a named corpus from
:data:`SOURCES` into a directory).

Every failure is reported as :class:`DownloadError` whose message is a single
line naming what failed (URL or file) and what the user can do about it.
Downloads and extractions go through :func:`files.atomic_path`: they are written
under a temporary name beside the destination and renamed into place only when
complete, so an interrupted or failed run never leaves a half file under the
final name, nor a temporary file behind.
"""

import gzip
import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
import zlib

from tqdm import tqdm

import files

__all__ = ["DownloadError", "SOURCES", "fetch", "download_corpus"]

_CHUNK = 1 << 16
_USER_AGENT = "transformer-nmt-download/1.0 (python urllib)"

# Known corpora.  ``files`` maps each remote file name to its sha256 (None when
# not known for certain -- checksums are never guessed).  ``base_url`` is the
# URL prefix the file names are appended to.
SOURCES = {
    "iwslt2016": {
        "description": "IWSLT 2016 TED talks German-English (WIT3 2016-01 release)",
        "base_url": "https://wit3.fbk.eu/archive/2016-01/texts/de/en/",
        "files": {"de-en.tgz": None},
        # a single .tgz; the members under this prefix are extracted flat
        "archive": "de-en.tgz",
        "member_prefix": "de-en/",
        # must be in the archive; checked after extraction
        "required": ["train.tags.de-en.de", "train.tags.de-en.en"],
        # when all of these are already in data_dir nothing is fetched at all
        "expected": [
            "train.tags.de-en.de",
            "train.tags.de-en.en",
            "IWSLT16.TED.tst2013.de-en.de.xml",
            "IWSLT16.TED.tst2013.de-en.en.xml",
            "IWSLT16.TED.tst2014.de-en.de.xml",
            "IWSLT16.TED.tst2014.de-en.en.xml",
        ],
    },
    "multi30k": {
        "description": "Multi30k task 1 German-English (raw, gzipped)",
        "base_url": "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/",
        "files": {
            "train.de.gz": None,
            "train.en.gz": None,
            "val.de.gz": None,
            "val.en.gz": None,
            "test_2016_flickr.de.gz": None,
            "test_2016_flickr.en.gz": None,
        },
    },
}


class DownloadError(Exception):
    """A download or extraction failed; ``str(e)`` is a one-line message for the user."""


def _oneline(x):
    """Collapse whitespace so messages stay on one line."""
    return " ".join(str(x).split())


def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_existing(url, dest, expected):
    """Return ``dest`` if it matches ``expected`` (or none is given); else DownloadError."""
    if expected is None:
        return dest
    try:
        actual = _sha256_file(dest)
    except OSError as e:
        raise DownloadError(
            f"could not read existing file {dest}: {_oneline(e)}; "
            f"delete it and rerun to download it again"
        ) from None
    if actual == expected:
        return dest
    raise DownloadError(
        f"existing file {dest} has sha256 {actual} but {expected} was expected; "
        f"delete it and rerun to download it again from {url}"
    )


def _create(tmp, dest_dir):
    """Open the temporary file ``tmp`` for writing (mode honours umask)."""
    try:
        return open(tmp, "wb")
    except OSError as e:
        raise DownloadError(
            f"could not create a file in {dest_dir}: {_oneline(e)}; "
            f"check that {dest_dir} is writable"
        ) from None


def _stream(url, out, dest, timeout, hint):
    """Stream the body of ``url`` into the open file ``out`` with a progress bar on
    stderr; return its sha256.  A body shorter than its Content-Length is an error."""
    req = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        length = resp.headers.get("Content-Length")
        try:
            total = int(length) if length is not None else None
        except ValueError:
            total = None
        h = hashlib.sha256()
        got = 0
        with tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=os.path.basename(dest),
            file=sys.stderr,
            leave=False,
        ) as bar:
            while True:
                chunk = resp.read(_CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                h.update(chunk)
                got += len(chunk)
                bar.update(len(chunk))
        if total is not None and got != total:
            raise DownloadError(
                f"could not download {url}: connection closed after {got} of {total} bytes; "
                f"rerun to retry, or {hint}"
            )
    return h.hexdigest()


def fetch(url, dest, sha256=None, timeout=60.0):
    """Download ``url`` to the file ``dest`` and return ``dest``.

    If ``dest`` already exists it is returned without any network access,
    provided it matches ``sha256`` when one is given (a mismatching existing
    file is never overwritten: DownloadError asks the user to delete it).
    Otherwise the body is streamed, with a progress bar on stderr, into a
    temporary file beside ``dest`` (:func:`files.atomic_path`), checked against
    ``sha256`` and renamed onto ``dest``.  On any failure, an interrupt included,
    the temporary file is removed; failures raise DownloadError.
    """
    dest_dir = os.path.dirname(os.path.abspath(dest))
    expected = sha256.strip().lower() if sha256 else None

    if os.path.exists(dest):
        return _check_existing(url, dest, expected)

    hint = f"check the URL and your connection, or download it by hand to {dest}"
    try:
        os.makedirs(dest_dir, exist_ok=True)
    except OSError as e:
        raise DownloadError(
            f"could not create directory {dest_dir}: {_oneline(e)}; check the path and permissions"
        ) from None

    try:
        with files.atomic_path(dest) as tmp:
            with _create(tmp, dest_dir) as out:
                actual = _stream(url, out, dest, timeout, hint)
            if expected is not None and actual != expected:
                raise DownloadError(
                    f"checksum mismatch for {url}: expected sha256 {expected}, got {actual}; "
                    f"the file was discarded -- check the URL or the expected checksum"
                )
        return dest
    except DownloadError:
        raise
    except urllib.error.HTTPError as e:
        raise DownloadError(
            f"could not download {url}: HTTP {e.code} {_oneline(e.reason)}; {hint}"
        ) from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, TimeoutError):
            reason = f"timed out after {timeout:g}s"
        raise DownloadError(f"could not download {url}: {_oneline(reason)}; {hint}") from None
    except TimeoutError:
        raise DownloadError(
            f"could not download {url}: timed out after {timeout:g}s; rerun to retry, or {hint}"
        ) from None
    except http.client.HTTPException as e:  # IncompleteRead, BadStatusLine, ...
        msg = _oneline(e) or type(e).__name__
        raise DownloadError(
            f"could not download {url}: {type(e).__name__} {msg}; rerun to retry, or {hint}"
        ) from None
    except ValueError as e:  # malformed URL
        raise DownloadError(f"could not download {url}: {_oneline(e)}; check the URL") from None
    except OSError as e:  # connection reset, disk full, ...
        raise DownloadError(
            f"could not download {url} to {dest}: {_oneline(e)}; rerun to retry, or {hint}"
        ) from None


def _url_for(source, name, base_url):
    base = base_url if base_url is not None else source["base_url"]
    return base.rstrip("/") + "/" + name


def _check_member_name(member, archive, data_dir):
    """Reject absolute paths, drive letters and ``..`` components anywhere in the archive."""
    name = member.name
    parts = name.replace("\\", "/").split("/")
    drive = len(name) > 1 and name[1] == ":"
    if name.startswith(("/", "\\")) or os.path.isabs(name) or drive or ".." in parts:
        raise DownloadError(
            f"refusing to extract {archive}: unsafe member path {name!r}; "
            f"the archive is corrupt or malicious -- delete it"
        )
    data_filter = getattr(tarfile, "data_filter", None)
    extractable = member.isfile() or member.isdir() or member.issym() or member.islnk()
    if data_filter is not None and extractable:
        try:
            data_filter(member, data_dir)
        except tarfile.FilterError as e:
            raise DownloadError(
                f"refusing to extract {archive}: unsafe member {name!r} ({_oneline(e)}); "
                f"the archive is corrupt or malicious -- delete it"
            ) from None


def _corrupt(archive, e):
    return DownloadError(
        f"could not read archive {archive}: {type(e).__name__}: {_oneline(e) or 'corrupt data'}; "
        f"the file is corrupt or incomplete -- delete it and rerun to download it again"
    )


def _extract_flat(archive, prefix, data_dir):
    """Extract regular files directly under ``prefix`` in ``archive`` into ``data_dir``.

    Files already present in ``data_dir`` are left alone.  Returns the paths of
    all such files present afterwards.
    """
    corrupt_errors = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)
    try:
        tar = tarfile.open(archive, "r:*")
    except tarfile.ReadError:
        raise DownloadError(
            f"could not read archive {archive}: not a gzip/tar archive (maybe an HTML error "
            f"page or an incomplete download); delete it and rerun to download it again"
        ) from None
    except corrupt_errors as e:
        raise _corrupt(archive, e) from None
    except OSError as e:
        raise DownloadError(
            f"could not open {archive}: {_oneline(e)}; delete it and rerun to download it again"
        ) from None

    paths = []
    with tar:
        try:
            members = tar.getmembers()  # reads the whole listing: catches truncation up front
        except corrupt_errors as e:
            raise _corrupt(archive, e) from None
        if not members:
            raise _corrupt(archive, tarfile.ReadError("empty archive"))
        for m in members:
            _check_member_name(m, archive, data_dir)

        for m in members:
            name = m.name.replace("\\", "/")
            while name.startswith("./"):
                name = name[2:]
            if not name.startswith(prefix) or not m.isfile():
                continue
            rel = name[len(prefix) :]
            if not rel or "/" in rel:
                continue  # only direct children, extracted flat
            target = os.path.join(data_dir, rel)
            if os.path.exists(target):
                paths.append(target)
                continue
            try:
                src = tar.extractfile(m)
                if src is None:
                    continue
                with src, files.atomic_path(target) as tmp, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out, _CHUNK)
            except corrupt_errors as e:
                raise _corrupt(archive, e) from None
            except OSError as e:
                raise DownloadError(
                    f"could not extract {m.name} from {archive} to {target}: {_oneline(e)}; "
                    f"check free space and permissions in {data_dir}"
                ) from None
            paths.append(target)
    return paths


def download_corpus(kind, data_dir, base_url=None):
    """Download (and for iwslt2016, extract) the corpus ``kind`` into ``data_dir``.

    ``base_url`` replaces the URL prefix in front of the file names (for
    mirrors and tests).  Work already done is skipped: existing files are not
    fetched again and already extracted files are not rewritten.  Returns the
    sorted list of corpus file paths present afterwards (for iwslt2016 the
    files extracted from ``de-en/``; for multi30k the downloaded ``.gz`` files).
    """
    if kind not in SOURCES:
        known = ", ".join(sorted(SOURCES))
        raise DownloadError(f"unknown corpus {kind!r}; known corpora: {known}")
    source = SOURCES[kind]
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as e:
        raise DownloadError(
            f"could not create directory {data_dir}: {_oneline(e)}; check the path and permissions"
        ) from None

    archive_name = source.get("archive")
    if archive_name is None:
        paths = []
        for name, sha in source["files"].items():
            url = _url_for(source, name, base_url)
            paths.append(fetch(url, os.path.join(data_dir, name), sha256=sha))
        return sorted(paths)

    expected = [os.path.join(data_dir, n) for n in source.get("expected", [])]
    archive = os.path.join(data_dir, archive_name)
    if expected and all(os.path.exists(p) for p in expected) and not os.path.exists(archive):
        # Already extracted and the archive was removed: nothing to do.
        return sorted(expected)

    url = _url_for(source, archive_name, base_url)
    fetch(url, archive, sha256=source["files"].get(archive_name))
    paths = _extract_flat(archive, source["member_prefix"], data_dir)
    missing = [
        n for n in source.get("required", []) if not os.path.exists(os.path.join(data_dir, n))
    ]
    if missing:
        raise DownloadError(
            f"archive {archive} does not contain {source['member_prefix']}{missing[0]}; "
            f"it is not the expected {kind} archive -- delete it and check the URL"
        )
    return sorted(set(paths))
