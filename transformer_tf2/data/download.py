"""Fetch and unpack the public corpora used by ``prepro.py --download`` and ``--archive``.

Standard library only, plus ``tqdm`` for the progress bar and the project's
:mod:`files`.  Nothing happens at import time; the entry points are :func:`fetch`
(one URL to one file), :func:`download_corpus` (a named corpus from :data:`SOURCES`
into a directory) and, for the IWSLT 2016 release, :func:`extract_iwslt`,
:func:`iwslt_folders` and :func:`find_iwslt_archive`.

The IWSLT 2016 release: WIT3 publishes it on its 2016-01 page (:data:`IWSLT_PAGE`) as one
tarball of all language pairs, ``2016-01.tgz``.  The German-English data is the tarball
``2016-01/texts/de/en/de-en.tgz`` inside it, whose folder ``de-en/`` holds
``train.tags.de-en.{de,en}`` and the ``IWSLT16.TED.*.de-en.{de,en}.xml`` sets.  Either
tarball is accepted; from the release only the pair's own tarball is read.

Every failure is reported as :class:`DownloadError` whose message is a single line naming
what failed (URL or file) and what the user can do about it.  Downloads go through
:func:`files.atomic_path`: they are written under a temporary name beside the destination
and renamed into place only when complete and verified (gzip magic, published checksum),
so a failed run never leaves a half file under the final name, nor a temporary file.
Extraction writes into a temporary folder and renames the files into place only once the
whole tarball was read and checked.
"""

import gzip
import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zlib

from tqdm import tqdm

from transformer_tf2.utils import files

__all__ = [
    "CHECKSUMS",
    "DownloadError",
    "IWSLT_PAGE",
    "SOURCES",
    "download_corpus",
    "extract_iwslt",
    "fetch",
    "find_iwslt_archive",
    "iwslt_folders",
]

_CHUNK = 1 << 16
_USER_AGENT = "transformer-nmt-download/1.0 (python urllib)"
_GZIP_MAGIC = b"\x1f\x8b"
READ_TIMEOUT = 30.0  # seconds a connection or one read may wait (IWSLT downloads)
TOTAL_SECONDS = 1800.0  # seconds one IWSLT download may take in all

IWSLT_PAGE = "https://wit3.fbk.eu/2016-01"  # the WIT3 page of the 2016-01 release
IWSLT_RELEASE = "2016-01"  # the release tarball is 2016-01.tgz, its top folder 2016-01/
_DRIVE_ID = "1l5y6Giag9aRPwGtuZHswh3w5v3qEz8D8"  # the release tarball on Google Drive

# Published checksums by file name: (hashlib algorithm, hex digest).  Only values
# published with a file are listed -- checksums are never guessed.
CHECKSUMS = {
    # the MD5 published for the 2016-01 release tarball (its Google Drive copy)
    "2016-01.tgz": ("md5", "c393ed3fc2a1b0f004b3331043f615ae"),
}

# Known corpora.  iwslt2016: ``urls`` are tried in order, each as (URL, file name);
# ``expected`` are the files that, when all present in data_dir, need no download.
# multi30k: ``files`` are appended to ``base_url``.
SOURCES = {
    "iwslt2016": {
        "description": "IWSLT 2016 TED talks German-English (WIT3 2016-01 release)",
        "page": IWSLT_PAGE,
        "pair": "de-en",
        "urls": [
            (
                f"https://drive.google.com/uc?export=download&id={_DRIVE_ID}&confirm=t",
                f"{IWSLT_RELEASE}.tgz",
            ),
            (
                f"https://drive.usercontent.google.com/download?id={_DRIVE_ID}"
                "&export=download&confirm=t",
                f"{IWSLT_RELEASE}.tgz",
            ),
        ],
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
        "files": [
            "train.de.gz",
            "train.en.gz",
            "val.de.gz",
            "val.en.gz",
            "test_2016_flickr.de.gz",
            "test_2016_flickr.en.gz",
        ],
    },
}


class DownloadError(Exception):
    """A download or extraction failed; ``str(e)`` is a one-line message for the user."""


class _Failed(Exception):
    """One URL failed; ``str(e)`` is the short reason (no URL, no advice)."""


def _oneline(x):
    """Collapse whitespace so messages stay on one line."""
    return " ".join(str(x).split())


# ---------------------------------------------------------------------------------------
# Downloads
# ---------------------------------------------------------------------------------------
def _hash_file(path, algorithm):
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _expected(sha256, checksum):
    """(algorithm, lower-case hex digest) to verify, or None."""
    if checksum is not None:
        return checksum[0], checksum[1].strip().lower()
    return ("sha256", sha256.strip().lower()) if sha256 else None


def _check_existing(url, dest, expected):
    """Return ``dest`` if it matches ``expected`` (or none is given); else DownloadError."""
    if expected is None:
        return dest
    algorithm, digest = expected
    try:
        actual = _hash_file(dest, algorithm)
    except OSError as e:
        raise DownloadError(
            f"could not read existing file {dest}: {_oneline(e)}; "
            f"delete it and rerun to download it again"
        ) from None
    if actual == digest:
        return dest
    raise DownloadError(
        f"existing file {dest} has {algorithm} {actual} but {digest} was expected; "
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


def _head(resp, n):
    """The first ``n`` bytes of the body (fewer only if the body is shorter)."""
    data = b""
    while len(data) < n:
        more = resp.read(n - len(data))
        if not more:
            break
        data += more
    return data


def _not_gzip(resp, head):
    """The reason for a body that does not start with the gzip magic bytes."""
    kind = resp.headers.get("Content-Type") or ""
    if "html" in kind.lower() or head.lstrip().startswith(b"<"):
        return (
            "answered with an HTML page, not a gzip file (a cloud drive answers a large "
            "file with a confirmation page)"
        )
    return f"answered with data that is not gzip (it starts with {head!r})"


def _stream(url, out, dest, timeout, total, algorithm, want_gzip):
    """Stream the body of ``url`` into the open file ``out`` with a progress bar on stderr;
    return its hex digest in ``algorithm``.  Raises _Failed when the body is shorter than
    its Content-Length, does not start with the gzip magic bytes (``want_gzip``), or takes
    more than ``total`` seconds (None: no bound); ``timeout`` bounds the connection and
    each read."""
    start = time.monotonic()
    req = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        length = resp.headers.get("Content-Length")
        try:
            size = int(length) if length is not None else None
        except ValueError:
            size = None
        chunk = _head(resp, len(_GZIP_MAGIC)) if want_gzip else resp.read1(_CHUNK)
        if want_gzip and not chunk.startswith(_GZIP_MAGIC):
            raise _Failed(_not_gzip(resp, chunk + resp.read(64)))
        h, got = hashlib.new(algorithm), 0
        with tqdm(
            total=size,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=os.path.basename(dest),
            file=sys.stderr,
            leave=False,
        ) as bar:
            while chunk:
                out.write(chunk)
                h.update(chunk)
                got += len(chunk)
                bar.update(len(chunk))
                if total is not None and time.monotonic() - start > total:
                    raise _Failed(f"gave up after {total:g}s in all ({got:,} bytes received)")
                chunk = resp.read1(_CHUNK)  # what has arrived: the bound is checked often
        if size is not None and got != size:
            raise _Failed(f"connection closed after {got} of {size} bytes")
    return h.hexdigest()


def _reason(e, timeout):
    """The short reason of a network or protocol error raised while downloading."""
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {_oneline(e.reason)}"
    if isinstance(e, urllib.error.URLError):
        e = e.reason
    if isinstance(e, TimeoutError):
        return f"timed out after {timeout:g}s"
    if isinstance(e, http.client.HTTPException):  # IncompleteRead, BadStatusLine, ...
        return f"{type(e).__name__} {_oneline(e) or ''}".strip()
    return _oneline(e)


def _download(url, dest, expected, timeout, total, want_gzip):
    """Download ``url`` to ``dest`` through a temporary file, verified against ``expected``
    ((algorithm, hex digest) or None); raises _Failed(reason) when this URL fails, and
    DownloadError when ``dest``'s folder cannot be written."""
    dest_dir = os.path.dirname(os.path.abspath(dest))
    try:
        os.makedirs(dest_dir, exist_ok=True)
    except OSError as e:
        raise DownloadError(
            f"could not create directory {dest_dir}: {_oneline(e)}; check the path and permissions"
        ) from None
    algorithm = expected[0] if expected else "sha256"
    try:
        with files.atomic_path(dest) as tmp:
            with _create(tmp, dest_dir) as out:
                actual = _stream(url, out, dest, timeout, total, algorithm, want_gzip)
            if expected is not None and actual != expected[1]:
                raise _Failed(
                    f"checksum mismatch: {algorithm} {actual}, but {expected[1]} is "
                    f"published for {os.path.basename(dest)}; the file was discarded"
                )
    except (_Failed, DownloadError):
        raise
    except (OSError, http.client.HTTPException, ValueError) as e:  # ValueError: bad URL
        raise _Failed(_reason(e, timeout)) from None


def fetch(url, dest, sha256=None, timeout=60.0, *, checksum=None, total=None, want_gzip=False):
    """Download ``url`` to the file ``dest`` and return ``dest``.

    ``checksum`` is (hashlib algorithm, hex digest), e.g. ("md5", ...); ``sha256`` is the
    short form for ("sha256", ...).  If ``dest`` already exists it is returned without any
    network access, provided it matches the checksum when one is given (a mismatching
    existing file is never overwritten: DownloadError asks the user to delete it).
    Otherwise the body is streamed, with a progress bar on stderr, into a temporary file
    beside ``dest``, checked (gzip magic bytes if ``want_gzip``, then the checksum) and
    renamed onto ``dest``.  ``timeout`` bounds the connection and each read, ``total``
    the whole transfer (seconds).  On any failure, an interrupt included, the temporary
    file is removed; failures raise DownloadError.
    """
    expected = _expected(sha256, checksum)
    if os.path.exists(dest):
        return _check_existing(url, dest, expected)
    hint = f"check the URL and your connection, or download it by hand to {dest}"
    try:
        _download(url, dest, expected, timeout, total, want_gzip)
    except _Failed as e:
        raise DownloadError(f"could not download {url}: {e}; {hint}") from None
    return dest


# ---------------------------------------------------------------------------------------
# The IWSLT 2016 release: finding and unpacking it
# ---------------------------------------------------------------------------------------
def _names(pair):
    """The release's names for ``pair`` ("de-en"): the pair's tarball, its path inside the
    release tarball, the release tarball, and the two training files."""
    s, t = pair.split("-")
    return {
        "inner": f"{pair}.tgz",
        "nested": f"texts/{s}/{t}/{pair}.tgz",
        "outer": f"{IWSLT_RELEASE}.tgz",
        "train": (f"train.tags.{pair}.{s}", f"train.tags.{pair}.{t}"),
    }


def iwslt_folders(path, pair="de-en"):
    """The folders that may hold the extracted files of ``pair``, in order of preference:
    ``path`` itself, ``path/<pair>``, ``path/texts/<s>/<t>/<pair>`` and the same under
    ``path/2016-01``; only those that hold both ``train.tags.<pair>.*`` files."""
    s, t = pair.split("-")
    inside = (pair, os.path.join("texts", s, t, pair))
    candidates = [path, *(os.path.join(path, p) for p in inside)]
    candidates += [os.path.join(path, IWSLT_RELEASE, p) for p in inside]
    train = _names(pair)["train"]
    return [d for d in candidates if all(os.path.isfile(os.path.join(d, n)) for n in train)]


def find_iwslt_archive(path, pair="de-en"):
    """``path`` if it is a file; else the first tarball of the release found in the folder
    ``path``: ``<pair>.tgz``, ``texts/<s>/<t>/<pair>.tgz``, ``2016-01/texts/<s>/<t>/<pair>.tgz``
    or ``2016-01.tgz``.  None when there is none."""
    if os.path.isfile(path):
        return path
    names = _names(pair)
    candidates = [names["inner"], names["nested"], f"{IWSLT_RELEASE}/{names['nested']}"]
    for name in candidates + [names["outer"]]:
        p = os.path.join(path, *name.split("/"))
        if os.path.isfile(p):
            return p
    return None


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


_CORRUPT = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def _corrupt(archive, e):
    return DownloadError(
        f"could not read archive {archive}: {type(e).__name__}: {_oneline(e) or 'corrupt data'}; "
        f"the file is corrupt or incomplete -- delete it and rerun to download it again"
    )


def _open_stream(path, shown):
    """``path`` opened as a tar stream (read once, front to back, gzip or not)."""
    try:
        return tarfile.open(path, "r|*")
    except tarfile.ReadError:
        raise DownloadError(
            f"could not read archive {shown}: not a gzip/tar archive (maybe an HTML page "
            f"or an incomplete download); delete it and rerun to download it again"
        ) from None
    except _CORRUPT as e:
        raise _corrupt(shown, e) from None
    except OSError as e:
        raise DownloadError(f"could not open {shown}: {_oneline(e)}; check the path") from None


def _scan(path, shown, pair, folder, nested_to=None):
    """One pass over the tarball ``path`` (named ``shown`` in messages), read as a stream.

    Each regular file directly under ``<pair>/`` is written into ``folder``.  If
    ``nested_to`` is given and the member ``[...]/texts/<s>/<t>/<pair>.tgz`` of a release
    tarball is met, that member alone is written to ``nested_to`` and the pass stops
    there, without reading the other pairs.  An unsafe member refuses the whole tarball.
    Returns True if the nested tarball was written.
    """
    nested = _names(pair)["nested"]
    count = 0
    try:
        with _open_stream(path, shown) as tar:
            for m in tar:
                count += 1
                _check_member_name(m, shown, folder)
                name = m.name.replace("\\", "/")
                while name.startswith("./"):
                    name = name[2:]
                if not m.isfile():
                    continue
                if nested_to and (name == nested or name.endswith("/" + nested)):
                    _copy_member(tar, m, nested_to)
                    return True
                rel = name[len(pair) + 1 :] if name.startswith(pair + "/") else ""
                if rel and "/" not in rel:  # only direct children, written flat
                    _copy_member(tar, m, os.path.join(folder, rel))
    except _CORRUPT as e:
        raise _corrupt(shown, e) from None
    except OSError as e:
        raise DownloadError(
            f"could not extract {shown} into {folder}: {_oneline(e)}; "
            f"check free space and permissions there"
        ) from None
    if count == 0:
        raise _corrupt(shown, tarfile.ReadError("empty archive"))
    return False


def _copy_member(tar, member, target):
    src = tar.extractfile(member)
    with src, open(target, "wb") as out:
        shutil.copyfileobj(src, out, _CHUNK)


def extract_iwslt(archive, data_dir, pair="de-en"):
    """Unpack the IWSLT files of ``pair`` from ``archive`` into ``data_dir``, flat.

    ``archive`` is the release tarball (2016-01.tgz: only its member
    ``texts/<s>/<t>/<pair>.tgz`` is read, the other pairs never reach the disk) or the
    pair's tarball (``<pair>.tgz``, whose ``<pair>/`` files are taken).  Everything is
    first written into a temporary folder in ``data_dir``; only when the whole tarball
    was read and holds both training files are the files renamed into ``data_dir``.
    Files already present there are left alone.  Returns the sorted paths of the
    unpacked files present afterwards.
    """
    names = _names(pair)
    tmp = files.temporary_name(os.path.join(data_dir, pair))
    nested = files.temporary_name(os.path.join(data_dir, names["inner"]))
    try:
        os.makedirs(tmp, exist_ok=True)  # data_dir too
    except OSError as e:
        raise DownloadError(
            f"could not create a folder in {data_dir}: {_oneline(e)}; check the path and "
            f"permissions"
        ) from None
    try:
        if _scan(archive, archive, pair, tmp, nested_to=nested):
            _scan(nested, f"{archive} ({names['nested']} inside it)", pair, tmp)
        missing = [n for n in names["train"] if not os.path.isfile(os.path.join(tmp, n))]
        if missing:
            raise DownloadError(
                f"archive {archive} holds neither {pair}/{missing[0]} nor {names['nested']}: "
                f"it is not the WIT3 {IWSLT_RELEASE} release ({names['outer']}) nor its "
                f"{names['inner']}; get one of them from {IWSLT_PAGE}"
            )
        paths = [os.path.join(data_dir, name) for name in sorted(os.listdir(tmp))]
        for target in paths:
            if not os.path.exists(target):
                os.replace(os.path.join(tmp, os.path.basename(target)), target)
        return paths
    except OSError as e:  # the renames
        raise DownloadError(
            f"could not move the files unpacked from {archive} into {data_dir}: "
            f"{_oneline(e)}; check the permissions there"
        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.exists(nested):
            os.remove(nested)


# ---------------------------------------------------------------------------------------
# Named corpora
# ---------------------------------------------------------------------------------------
def _url_for(base_url, name):
    return base_url.rstrip("/") + "/" + name


def _download_iwslt(source, data_dir, base_url, rerun):
    """Try each known URL of the release (or, with ``base_url``, ``<pair>.tgz`` then
    ``2016-01.tgz`` under it) until one gives a verified gzip file; return its path.
    When all fail: one DownloadError line with each URL's reason and where to get the
    release by hand."""
    names = _names(source["pair"])
    urls = source["urls"]
    if base_url is not None:
        urls = [(_url_for(base_url, n), n) for n in (names["inner"], names["outer"])]
    tried = []
    for url, name in urls:
        dest = os.path.join(data_dir, name)
        try:
            _download(url, dest, CHECKSUMS.get(name), READ_TIMEOUT, TOTAL_SECONDS, True)
            return dest
        except _Failed as e:
            tried.append(f"{url}: {e}")
    raise DownloadError(
        f"could not download the IWSLT 2016 release: {'; '.join(tried)}. It is published on "
        f"the WIT3 {IWSLT_RELEASE} release page {source['page']}: download {names['outer']} "
        f"there (or {names['nested']} inside it), then run: {rerun}"
    )


def download_corpus(kind, data_dir, base_url=None, rerun=None):
    """Download (and for iwslt2016, extract) the corpus ``kind`` into ``data_dir``.

    ``base_url`` replaces the URLs by files under that prefix (for mirrors and tests).
    ``rerun`` is the command the one-line error of a failed IWSLT download tells the user
    to run once the release is fetched by hand (default: ``python prepro.py --preset
    iwslt2016 --archive PATH/2016-01.tgz``).  Work already done is skipped: existing
    files are not fetched again and already extracted files are not rewritten; an IWSLT
    tarball already in ``data_dir`` is unpacked without any network access.  Returns the
    sorted list of corpus file paths present afterwards (for iwslt2016 the files
    unpacked from ``<pair>/``; for multi30k the downloaded ``.gz`` files).
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

    if kind == "multi30k":
        base = base_url if base_url is not None else source["base_url"]
        return sorted(
            fetch(_url_for(base, n), os.path.join(data_dir, n), checksum=CHECKSUMS.get(n))
            for n in source["files"]
        )

    names = _names(source["pair"])
    local = [os.path.join(data_dir, names[k]) for k in ("inner", "outer")]
    local = [p for p in local if os.path.isfile(p)]
    expected = [os.path.join(data_dir, n) for n in source["expected"]]
    if not local and all(os.path.exists(p) for p in expected):
        return sorted(expected)  # already extracted and the tarball removed: nothing to do
    if rerun is None:
        rerun = f"python prepro.py --preset iwslt2016 --archive PATH/{names['outer']}"
    archive = local[0] if local else _download_iwslt(source, data_dir, base_url, rerun)
    return extract_iwslt(archive, data_dir, source["pair"])
