"""Tests for download.py against a local HTTP server (no real network)."""

import gzip
import hashlib
import http.server
import io
import os
import tarfile
import threading
import time

import pytest

from helpers import tgz_bytes
from transformer_tf2.data import download
from transformer_tf2.data.download import DownloadError, download_corpus, fetch

IWSLT_FILES = {
    "train.tags.de-en.de": "<url>http://www.ted.com/talks/x</url>\nHallo Welt.\nWie geht es dir?\n",
    "train.tags.de-en.en": "<url>http://www.ted.com/talks/x</url>\nHello world.\nHow are you?\n",
    "IWSLT16.TED.tst2013.de-en.de.xml": '<mteval>\n<seg id="1"> Guten Morgen. </seg>\n</mteval>\n',
    "IWSLT16.TED.tst2013.de-en.en.xml": '<mteval>\n<seg id="1"> Good morning. </seg>\n</mteval>\n',
    "IWSLT16.TED.tst2014.de-en.de.xml": '<mteval>\n<seg id="1"> Danke. </seg>\n</mteval>\n',
    "IWSLT16.TED.tst2014.de-en.en.xml": '<mteval>\n<seg id="1"> Thanks. </seg>\n</mteval>\n',
}

MULTI30K_NAMES = [
    "train.de.gz",
    "train.en.gz",
    "val.de.gz",
    "val.en.gz",
    "test_2016_flickr.de.gz",
    "test_2016_flickr.en.gz",
]


def _make_tgz(path, members):
    """members: list of (name, bytes)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))


def _make_release(path, inner=None, before=(), after=()):
    """The WIT3 release layout: one tarball of all pairs, each pair its own tarball under
    2016-01/texts/<s>/<t>/; the other pairs come first, so that reading stops mid-way."""
    inner = tgz_bytes(_iwslt_members()) if inner is None else inner
    decoy = tgz_bytes([("fr-en/train.tags.fr-en.fr", b"Bonjour.\n")])
    members = [
        *before,
        ("2016-01/README", b"release notes\n"),
        ("2016-01/texts/fr/en/fr-en.tgz", decoy),
        ("2016-01/texts/en/de/en-de.tgz", decoy),
        ("2016-01/texts/de/en/de-en.tgz", inner),
        *after,
        ("2016-01/texts/cs/en/cs-en.tgz", decoy),
    ]
    _make_tgz(path, members)
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def _all_files(root):
    return sorted(
        os.path.relpath(os.path.join(d, n), root) for d, _, ns in os.walk(root) for n in ns
    )


def _iwslt_members(extra=()):
    members = [("de-en/" + n, t.encode("utf-8")) for n, t in IWSLT_FILES.items()]
    members.append(("de-en/README", b"readme\n"))
    members.append(("other/ignored.txt", b"not under de-en\n"))
    members.append(("de-en/nested/deep.txt", b"nested, not extracted\n"))
    return members + list(extra)


class _Server:
    def __init__(self, root):
        self.root = root
        self.requests = []
        server = self
        os.makedirs(root, exist_ok=True)

        class Handler(http.server.SimpleHTTPRequestHandler):
            timeout = 5  # never let a stuck connection hang a handler thread

            def __init__(self, *a, **kw):
                super().__init__(*a, directory=root, **kw)

            def log_message(self, *a):
                pass

            def do_GET(self):
                server.requests.append(self.path)
                if self.path == "/short":
                    # promise 1000 bytes, send 10, hang up
                    self.send_response(200)
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b"0123456789")
                    self.close_connection = True
                    return
                if self.path == "/confirm":  # a cloud drive's answer to a large file
                    body = b"<!DOCTYPE html><html><title>Virus scan warning</title></html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if self.path == "/drip":  # a gzip body of 100 bytes, 5 bytes every 0.05 s
                    self.send_response(200)
                    self.send_header("Content-Length", "100")
                    self.end_headers()
                    try:
                        for k in range(20):
                            self.wfile.write(b"\x1f\x8b\x08\x00\x00" if k == 0 else b"." * 5)
                            self.wfile.flush()
                            time.sleep(0.05)
                    except OSError:
                        pass
                    return
                if self.path == "/slow":
                    time.sleep(1.0)
                    try:
                        self.send_response(200)
                        self.send_header("Content-Length", "2")
                        self.end_headers()
                        self.wfile.write(b"ok")
                    except OSError:
                        pass
                    return
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def close(self):
        if self.thread is None:
            return
        self.thread_, self.thread = self.thread, None
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread_.join(timeout=5)


@pytest.fixture
def server(tmp_path):
    s = _Server(str(tmp_path / "www"))
    try:
        yield s
    finally:
        s.close()


def _listing(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_import_has_api():
    assert issubclass(DownloadError, Exception)
    assert set(download.SOURCES) >= {"iwslt2016", "multi30k"}
    iwslt = download.SOURCES["iwslt2016"]
    assert iwslt["page"] == "https://wit3.fbk.eu/2016-01"
    assert iwslt["urls"] and all(name == "2016-01.tgz" for _, name in iwslt["urls"])
    assert set(download.SOURCES["multi30k"]["files"]) == set(MULTI30K_NAMES)
    for algorithm, digest in download.CHECKSUMS.values():
        assert len(digest) == hashlib.new(algorithm).digest_size * 2
        int(digest, 16)


def test_iwslt_extracts_and_second_call_is_offline(server, tmp_path):
    _make_tgz(os.path.join(server.root, "de-en.tgz"), _iwslt_members())
    d = str(tmp_path / "data")

    paths = download_corpus("iwslt2016", d, base_url=server.url + "/")
    assert server.requests == ["/de-en.tgz"]
    for name, text in IWSLT_FILES.items():
        p = os.path.join(d, name)
        assert p in paths
        with open(p, encoding="utf-8") as f:
            assert f.read() == text
    assert os.path.exists(os.path.join(d, "README"))
    assert not os.path.exists(os.path.join(d, "ignored.txt"))
    assert not os.path.exists(os.path.join(d, "deep.txt"))
    assert not os.path.exists(os.path.join(d, "nested"))
    assert _listing(d) == sorted([*IWSLT_FILES, "README", "de-en.tgz"])  # no temporary file

    # second call: everything present, no network at all (server stopped too)
    server.close()
    again = download_corpus("iwslt2016", d, base_url=server.url)
    assert server.requests == ["/de-en.tgz"]
    assert again == paths

    # extracted file lost but archive still there: re-extracted without network
    os.remove(os.path.join(d, "train.tags.de-en.en"))
    download_corpus("iwslt2016", d, base_url=server.url)
    with open(os.path.join(d, "train.tags.de-en.en"), encoding="utf-8") as f:
        assert f.read() == IWSLT_FILES["train.tags.de-en.en"]

    # archive deleted after extraction: still nothing fetched
    os.remove(os.path.join(d, "de-en.tgz"))
    download_corpus("iwslt2016", d, base_url=server.url)
    assert server.requests == ["/de-en.tgz"]


def test_fetch_existing_is_offline(server, tmp_path):
    dest = tmp_path / "x.bin"
    dest.write_bytes(b"already here")
    digest = hashlib.sha256(b"already here").hexdigest()
    assert fetch(server.url + "/x.bin", str(dest)) == str(dest)
    assert fetch(server.url + "/x.bin", str(dest), sha256=digest) == str(dest)
    assert server.requests == []


def test_fetch_sha256_ok_and_mismatch(server, tmp_path):
    data = b"some payload\n" * 100
    with open(os.path.join(server.root, "f.bin"), "wb") as f:
        f.write(data)
    good = hashlib.sha256(data).hexdigest()
    out = tmp_path / "out"
    out.mkdir()

    bad = "0" * 64
    with pytest.raises(DownloadError) as ei:
        fetch(server.url + "/f.bin", str(out / "f.bin"), sha256=bad)
    msg = str(ei.value)
    assert bad in msg and good in msg and "\n" not in msg
    assert _listing(out) == []  # no dest, no partial

    got = fetch(server.url + "/f.bin", str(out / "f.bin"), sha256=good.upper())
    assert got == str(out / "f.bin")
    assert (out / "f.bin").read_bytes() == data
    assert _listing(out) == ["f.bin"]


def test_existing_file_with_wrong_checksum_is_not_overwritten(server, tmp_path):
    dest = tmp_path / "f.bin"
    dest.write_bytes(b"stale")
    with pytest.raises(DownloadError) as ei:
        fetch(server.url + "/f.bin", str(dest), sha256="1" * 64)
    assert "delete" in str(ei.value) and str(dest) in str(ei.value)
    assert dest.read_bytes() == b"stale"
    assert server.requests == []


def test_http_404(server, tmp_path):
    out = tmp_path / "out"
    url = server.url + "/missing/de-en.tgz"
    with pytest.raises(DownloadError) as ei:
        fetch(url, str(out / "de-en.tgz"))
    assert url in str(ei.value) and "404" in str(ei.value)
    assert _listing(out) == []

    d = tmp_path / "data"
    with pytest.raises(DownloadError) as ei:
        download_corpus("iwslt2016", str(d), base_url=server.url + "/missing")
    assert url in str(ei.value)
    assert _listing(d) == []


def test_truncated_transfer_and_timeout_leave_nothing(server, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(DownloadError) as ei:
        fetch(server.url + "/short", str(out / "short"))
    assert server.url + "/short" in str(ei.value)
    assert _listing(out) == []

    with pytest.raises(DownloadError) as ei:
        fetch(server.url + "/slow", str(out / "slow"), timeout=0.2)
    assert "timed out" in str(ei.value)
    assert _listing(out) == []


def test_interrupted_fetch_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(url, out, *rest):
        out.write(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(download, "_stream", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        fetch("http://127.0.0.1:9/f.bin", str(out / "f.bin"))
    assert _listing(out) == []  # no dest, no temporary file


def test_interrupted_extraction_leaves_nothing(server, tmp_path, monkeypatch):
    _make_tgz(os.path.join(server.root, "de-en.tgz"), _iwslt_members())
    d = tmp_path / "data"
    fetch(server.url + "/de-en.tgz", str(d / "de-en.tgz"))  # archive already there

    def interrupted(src, out, length=0):
        out.write(src.read(5))
        raise KeyboardInterrupt

    monkeypatch.setattr(download.shutil, "copyfileobj", interrupted)
    with pytest.raises(KeyboardInterrupt):
        download_corpus("iwslt2016", str(d), base_url=server.url)
    assert _listing(d) == ["de-en.tgz"]  # nothing extracted, no temporary file


def test_unreachable_host(tmp_path):
    # a port nothing listens on: bind, read the port, close
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = "http://127.0.0.1:%d/x" % port
    with pytest.raises(DownloadError) as ei:
        fetch(url, str(tmp_path / "x"), timeout=2)
    assert url in str(ei.value)
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("kind", ["truncated", "garbage"])
def test_corrupt_archive(server, tmp_path, kind):
    d = str(tmp_path / "data")
    if kind == "truncated":  # downloaded whole (gzip magic, full length), cut inside
        tgz = os.path.join(server.root, "de-en.tgz")
        big = [("de-en/train.tags.de-en.de", os.urandom(200000))] + _iwslt_members()
        _make_tgz(tgz, big)
        with open(tgz, "rb") as f:
            data = f.read()
        with open(tgz, "wb") as f:
            f.write(data[: len(data) // 2])
    else:  # put there by hand: a download never keeps a body that is not gzip
        os.makedirs(d)
        with open(os.path.join(d, "de-en.tgz"), "wb") as f:
            f.write(b"<html>not an archive</html>\n")
    with pytest.raises(DownloadError) as ei:
        download_corpus("iwslt2016", d, base_url=server.url)
    msg = str(ei.value)
    assert os.path.join(d, "de-en.tgz") in msg and "delete" in msg and "\n" not in msg
    assert _listing(d) == ["de-en.tgz"]  # nothing (half-)extracted, no temporary folder


def test_archive_without_training_files(server, tmp_path):
    _make_tgz(os.path.join(server.root, "de-en.tgz"), [("de-en/README", b"x\n")])
    with pytest.raises(DownloadError) as ei:
        download_corpus("iwslt2016", str(tmp_path / "d"), base_url=server.url)
    assert "train.tags.de-en" in str(ei.value)


@pytest.mark.parametrize("evil", ["../evil", "de-en/../../evil", "/tmp/evil_abs_download_test"])
def test_unsafe_member_rejected(server, tmp_path, evil):
    _make_tgz(os.path.join(server.root, "de-en.tgz"), _iwslt_members([(evil, b"pwned\n")]))
    d = tmp_path / "a" / "data"
    with pytest.raises(DownloadError) as ei:
        download_corpus("iwslt2016", str(d), base_url=server.url)
    assert evil in str(ei.value)
    assert _listing(d) == ["de-en.tgz"]  # nothing extracted
    assert not (tmp_path / "a" / "evil").exists()
    assert not (tmp_path / "evil").exists()
    assert not os.path.exists("/tmp/evil_abs_download_test")


def test_multi30k_byte_identical(server, tmp_path):
    sub = os.path.join(server.root, "m30k")
    os.makedirs(sub)
    blobs = {}
    for i, name in enumerate(MULTI30K_NAMES):
        raw = ("line %d of %s\nzweite Zeile äöü\n" % (i, name)).encode("utf-8")
        blobs[name] = gzip.compress(raw)
        with open(os.path.join(sub, name), "wb") as f:
            f.write(blobs[name])
    d = str(tmp_path / "data")
    paths = download_corpus("multi30k", d, base_url=server.url + "/m30k/")
    assert paths == sorted(os.path.join(d, n) for n in MULTI30K_NAMES)
    for name, blob in blobs.items():
        with open(os.path.join(d, name), "rb") as f:
            assert f.read() == blob
    assert sorted(server.requests) == sorted("/m30k/" + n for n in MULTI30K_NAMES)
    assert _listing(d) == sorted(MULTI30K_NAMES)

    n = len(server.requests)
    assert download_corpus("multi30k", d, base_url=server.url + "/m30k/") == paths
    assert len(server.requests) == n


def test_unknown_kind(tmp_path):
    with pytest.raises(DownloadError) as ei:
        download_corpus("wmt99", str(tmp_path / "d"))
    msg = str(ei.value)
    assert "wmt99" in msg and "iwslt2016" in msg and "multi30k" in msg


# ---------------------------------------------------------------------------------------
# The WIT3 2016-01 release: one tarball of all pairs, texts/de/en/de-en.tgz inside
# ---------------------------------------------------------------------------------------
def _closed_port_url(name):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d/%s" % (port, name)


def test_release_tarball_gives_only_the_pair(server, tmp_path, monkeypatch):
    md5 = _make_release(os.path.join(server.root, "2016-01.tgz"))
    monkeypatch.setitem(download.CHECKSUMS, "2016-01.tgz", ("md5", md5))
    d = str(tmp_path / "data")
    paths = download_corpus("iwslt2016", d, base_url=server.url)
    assert server.requests == ["/de-en.tgz", "/2016-01.tgz"]  # the pair's own tarball first
    for name, text in IWSLT_FILES.items():
        with open(os.path.join(d, name), encoding="utf-8") as f:
            assert f.read() == text
    # the other pairs and the pair's tarball never reach the disk; no temporary left
    assert _all_files(str(tmp_path)) == sorted(
        [os.path.join("data", n) for n in [*IWSLT_FILES, "README", "2016-01.tgz"]]
        + [os.path.join("www", "2016-01.tgz")]
    )
    assert paths == sorted(os.path.join(d, n) for n in [*IWSLT_FILES, "README"])

    # a tarball in data_dir is read again without network when a file is lost
    os.remove(os.path.join(d, "IWSLT16.TED.tst2014.de-en.en.xml"))
    server.close()
    assert download_corpus("iwslt2016", d, base_url=server.url) == paths
    assert len(server.requests) == 2


def test_release_md5_mismatch_discards_the_file(server, tmp_path, monkeypatch):
    md5 = _make_release(os.path.join(server.root, "2016-01.tgz"))
    monkeypatch.setitem(download.CHECKSUMS, "2016-01.tgz", ("md5", "0" * 32))
    url = server.url + "/2016-01.tgz"
    monkeypatch.setitem(download.SOURCES["iwslt2016"], "urls", [(url, "2016-01.tgz")])
    d = tmp_path / "data"
    with pytest.raises(DownloadError) as ei:
        download_corpus("iwslt2016", str(d))
    msg = str(ei.value)
    assert msg.startswith(
        f"could not download the IWSLT 2016 release: {url}: checksum mismatch: md5 {md5}, "
        f"but {'0' * 32} is published for 2016-01.tgz; the file was discarded. It is "
        "published on the WIT3 2016-01 release page https://wit3.fbk.eu/2016-01: "
    )
    assert "\n" not in msg
    assert _listing(d) == []  # no file, no partial, no temporary


def test_html_page_instead_of_gzip_is_one_line(server, tmp_path, monkeypatch):
    url = server.url + "/confirm"
    monkeypatch.setitem(download.SOURCES["iwslt2016"], "urls", [(url, "2016-01.tgz")])
    d = tmp_path / "data"
    with pytest.raises(DownloadError) as ei:
        download_corpus("iwslt2016", str(d))
    assert str(ei.value) == (
        f"could not download the IWSLT 2016 release: {url}: answered with an HTML page, not "
        "a gzip file (a cloud drive answers a large file with a confirmation page). It is "
        "published on the WIT3 2016-01 release page https://wit3.fbk.eu/2016-01: download "
        "2016-01.tgz there (or texts/de/en/de-en.tgz inside it), then run: python prepro.py "
        "--preset iwslt2016 --archive PATH/2016-01.tgz"
    )
    assert _listing(d) == []
    # fetch alone: the same check, the same one line, nothing kept
    with pytest.raises(DownloadError, match=r"^could not download .*/confirm: answered with an"):
        fetch(url, str(d / "x.tgz"), want_gzip=True)
    assert _listing(d) == []


def test_all_urls_failing_say_where_the_release_is(server, tmp_path, monkeypatch):
    missing, closed = server.url + "/gone/de-en.tgz", _closed_port_url("2016-01.tgz")
    urls = [(missing, "de-en.tgz"), (closed, "2016-01.tgz")]
    monkeypatch.setitem(download.SOURCES["iwslt2016"], "urls", urls)
    d = tmp_path / "data"
    t0 = time.monotonic()
    with pytest.raises(DownloadError) as ei:
        download_corpus("iwslt2016", str(d), rerun="python prepro.py --preset x --archive P")
    assert time.monotonic() - t0 < 10
    msg = str(ei.value)
    head, tail = msg.split(". It is published on ")
    assert head.startswith(f"could not download the IWSLT 2016 release: {missing}: HTTP 404 ")
    assert f"; {closed}: " in head and "refused" in head.lower()
    assert tail == (
        "the WIT3 2016-01 release page https://wit3.fbk.eu/2016-01: download 2016-01.tgz "
        "there (or texts/de/en/de-en.tgz inside it), then run: python prepro.py --preset x "
        "--archive P"
    )
    assert _listing(d) == []


def test_total_time_bound(server, tmp_path):
    out = tmp_path / "out"
    t0 = time.monotonic()
    with pytest.raises(DownloadError) as ei:
        fetch(server.url + "/drip", str(out / "drip.tgz"), timeout=5, total=0.3, want_gzip=True)
    assert time.monotonic() - t0 < 0.9  # the whole body takes 1 s
    assert "gave up after 0.3s in all" in str(ei.value)
    assert _listing(out) == []
    fetch(server.url + "/drip", str(out / "drip.tgz"), timeout=5, total=5, want_gzip=True)
    assert (out / "drip.tgz").stat().st_size == 100


@pytest.mark.parametrize("where", ["release", "pair"])
def test_release_unsafe_member_refused(tmp_path, where):
    evil = "../evil"
    d = tmp_path / "a" / "data"
    tgz = str(tmp_path / "2016-01.tgz")
    if where == "release":
        _make_release(tgz, before=[(evil, b"pwned\n")])
    else:
        _make_release(tgz, inner=tgz_bytes(_iwslt_members([(evil, b"pwned\n")])))
    with pytest.raises(DownloadError) as ei:
        download.extract_iwslt(tgz, str(d))
    msg = str(ei.value)
    assert msg.startswith("refusing to extract ") and repr(evil) in msg
    assert ("texts/de/en/de-en.tgz inside it" in msg) == (where == "pair")
    assert _listing(d) == []  # nothing extracted, no temporary folder or tarball
    assert not (tmp_path / "a" / "evil").exists() and not (tmp_path / "evil").exists()


def test_release_without_the_pair(tmp_path):
    tgz = str(tmp_path / "2016-01.tgz")
    _make_tgz(tgz, [("2016-01/texts/fr/en/fr-en.tgz", tgz_bytes([("fr-en/x", b"x")]))])
    with pytest.raises(DownloadError) as ei:
        download.extract_iwslt(tgz, str(tmp_path / "d"))
    assert str(ei.value) == (
        f"archive {tgz} holds neither de-en/train.tags.de-en.de nor texts/de/en/de-en.tgz: it "
        "is not the WIT3 2016-01 release (2016-01.tgz) nor its de-en.tgz; get one of them from "
        "https://wit3.fbk.eu/2016-01"
    )
    assert _listing(tmp_path / "d") == []


def test_find_the_release_in_a_folder(tmp_path):
    root = tmp_path / "dl"
    assert (
        download.find_iwslt_archive(str(root)) is None and download.iwslt_folders(str(root)) == []
    )
    nested = root / "2016-01" / "texts" / "de" / "en"
    nested.mkdir(parents=True)
    (root / "2016-01.tgz").write_bytes(b"x")
    assert download.find_iwslt_archive(str(root)) == str(root / "2016-01.tgz")
    (nested / "de-en.tgz").write_bytes(b"x")  # the release extracted: its pair's tarball first
    assert download.find_iwslt_archive(str(root)) == str(nested / "de-en.tgz")
    assert download.find_iwslt_archive(str(nested / "de-en.tgz")) == str(nested / "de-en.tgz")
    (nested / "de-en").mkdir()
    (nested / "de-en" / "train.tags.de-en.de").write_text("a\n")
    assert download.iwslt_folders(str(root)) == []  # both sides are needed
    (nested / "de-en" / "train.tags.de-en.en").write_text("a\n")
    assert download.iwslt_folders(str(root)) == [str(nested / "de-en")]


def test_release_is_read_only_up_to_the_pair(tmp_path):
    """The other pairs after texts/de/en/de-en.tgz are never read: a release cut short
    inside them still gives the de-en files."""
    tgz = str(tmp_path / "2016-01.tgz")
    _make_release(tgz, after=[("2016-01/texts/ar/en/ar-en.tgz", os.urandom(300_000))])
    with open(tgz, "rb") as f:
        data = f.read()
    with open(tgz, "wb") as f:
        f.write(data[: len(data) - 200_000])  # cut inside ar-en.tgz
    d = tmp_path / "data"
    paths = download.extract_iwslt(tgz, str(d))
    assert paths == sorted(str(d / n) for n in [*IWSLT_FILES, "README"])
    with open(d / "train.tags.de-en.en", encoding="utf-8") as f:
        assert f.read() == IWSLT_FILES["train.tags.de-en.en"]
