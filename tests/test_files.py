"""files.py: atomic_path and atomic_write leave the old version or the new one, never a
part of one, and no temporary files; a write refused by the storage or for want of
permission is one line. :func:`unprivileged` and :func:`read_only_mount` (child processes
that cannot write through file modes, or that see a read-only file system) serve
test_faults.py too."""

import errno
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from helpers import ROOT
from transformer_tf2.config import hparams
from transformer_tf2.utils import files


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    path = tmp_path / "deep" / "dir" / "f.txt"
    files.atomic_write(str(path), "first\n")
    assert path.read_text(encoding="utf-8") == "first\n"
    files.atomic_write(str(path), "zweite Fassung: äöüß\n")
    assert path.read_text(encoding="utf-8") == "zweite Fassung: äöüß\n"
    files.atomic_write(str(path), b"\x00\x01bytes")
    assert path.read_bytes() == b"\x00\x01bytes"
    assert os.listdir(path.parent) == ["f.txt"]


def test_atomic_write_failure_keeps_old_content(tmp_path):
    path = tmp_path / "f.txt"
    files.atomic_write(str(path), "old")
    with pytest.raises(TypeError):
        files.atomic_write(str(path), 12345)  # not str/bytes: fails while writing
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_atomic_path_writes_a_file(tmp_path):
    path = tmp_path / "new" / "plot.png"
    with files.atomic_path(str(path)) as tmp:
        assert os.path.dirname(tmp) == str(path.parent)  # beside path: atomic renames
        assert not os.path.exists(path)
        with open(tmp, "wb") as f:
            f.write(b"png")
    assert path.read_bytes() == b"png"
    assert os.listdir(path.parent) == ["plot.png"]


def test_atomic_path_replaces_an_existing_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with files.atomic_path(str(path)) as tmp:
        with open(tmp, "w") as f:
            f.write("new")
        assert path.read_text() == "old"  # untouched until the end
    assert path.read_text() == "new"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_atomic_path_folder_replaces_a_folder(tmp_path):
    """A SavedModel-like folder replaces the previous export as a whole."""
    path = tmp_path / "saved"
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_text("old")
    (path / "variables" / "stale").write_text("old")
    with files.atomic_path(str(path)) as tmp:
        os.makedirs(os.path.join(tmp, "assets"))
        with open(os.path.join(tmp, "saved_model.pb"), "w") as f:
            f.write("new")
    assert sorted(os.listdir(path)) == ["assets", "saved_model.pb"]
    assert (path / "saved_model.pb").read_text() == "new"
    assert os.listdir(tmp_path) == ["saved"]


def test_atomic_path_renames_files_that_extend_the_temporary_name(tmp_path):
    """A checkpoint written to the temporary prefix is its .index and .data files."""
    path = tmp_path / "avg-last2"
    (tmp_path / "avg-last2.index").write_text("old index")
    with files.atomic_path(str(path)) as tmp:
        for ext in (".index", ".data-00000-of-00001"):
            with open(tmp + ext, "w") as f:
                f.write("new" + ext)
    assert sorted(os.listdir(tmp_path)) == ["avg-last2.data-00000-of-00001", "avg-last2.index"]
    assert (tmp_path / "avg-last2.index").read_text() == "new.index"
    assert (tmp_path / "avg-last2.data-00000-of-00001").read_text() == "new.data-00000-of-00001"


@pytest.mark.parametrize("first_fails", [False, True])
def test_writers_whose_process_ids_extend_each_other_keep_their_own_files(
    tmp_path, monkeypatch, first_fails
):
    """Process 123's temporary name is a prefix of process 1234's: when 123 finishes (or
    fails) while 1234 is still writing the same file, it renames or removes only its
    own temporary files, and 1234's result still arrives whole under the final name."""
    path = tmp_path / "avg"
    monkeypatch.setattr(os, "getpid", lambda: 123)
    short = files.atomic_path(str(path))
    short_tmp = short.__enter__()
    monkeypatch.setattr(os, "getpid", lambda: 1234)
    with files.atomic_path(str(path)) as long_tmp:
        for ext in ("", ".index"):
            with open(long_tmp + ext, "w") as f:
                f.write("1234" + ext)
            with open(short_tmp + ext, "w") as f:
                f.write("123" + ext)
        if first_fails:
            error = RuntimeError("interrupted")
            assert not short.__exit__(RuntimeError, error, None)  # the error propagates
            long_base = os.path.basename(long_tmp)
            assert sorted(os.listdir(tmp_path)) == [long_base, long_base + ".index"]
        else:
            short.__exit__(None, None, None)
            assert (tmp_path / "avg").read_text() == "123"
            assert (tmp_path / "avg.index").read_text() == "123.index"
    assert (tmp_path / "avg").read_text() == "1234"
    assert (tmp_path / "avg.index").read_text() == "1234.index"
    assert sorted(os.listdir(tmp_path)) == ["avg", "avg.index"]


@pytest.mark.parametrize("kind", ["file", "folder", "siblings"])
def test_atomic_path_error_keeps_old_content_and_no_temporary_files(tmp_path, kind):
    path = tmp_path / "out"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="interrupted"):
        with files.atomic_path(str(path)) as tmp:
            if kind == "file":
                with open(tmp, "w") as f:
                    f.write("half")
            elif kind == "folder":
                os.makedirs(os.path.join(tmp, "sub"))
            else:
                for ext in (".index", ".data-00000-of-00001"):
                    with open(tmp + ext, "w") as f:
                        f.write("half")
            raise RuntimeError("interrupted")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_write_respects_umask(tmp_path):
    """Files are created with the mode the umask gives (0644 here), not mkstemp's 0600,
    so that hparams.json, vocabularies and prepro text files are readable by others."""
    old = os.umask(0o022)
    try:
        files.atomic_write(str(tmp_path / "plain.txt"), "x\n")
        with files.atomic_path(str(tmp_path / "via_path.bin")) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"x")
        hparams.save(hparams.Hparams(), str(tmp_path / "hparams.json"))
    finally:
        os.umask(old)
    for name in ("plain.txt", "via_path.bin", "hparams.json"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o644, name


def test_a_refused_write_is_one_line_naming_the_file(tmp_path):
    """/dev/full under the temporary name: the write fails with ENOSPC; one UserError line
    names the file, the old content stays and the temporary link is gone."""
    path = tmp_path / "results.txt"
    path.write_text("old")
    os.symlink("/dev/full", files.temporary_name(str(path)))
    with pytest.raises(
        hparams.UserError,
        match=f"^could not write {path} \\(No space left on device\\); its previous version "
        "is kept: free some disk space and run again$",
    ):
        files.atomic_write(str(path), "new" * 10000)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["results.txt"]


def test_refused_errno_reads_oserrors_and_tensorflow_messages():
    assert files.refused_errno(OSError(errno.EFBIG, "x")) == errno.EFBIG
    assert files.refused_errno(PermissionError(errno.EACCES, "x")) == errno.EACCES
    assert files.refused_errno(OSError(errno.ENOENT, "x")) is None
    tf_message = "log/ckpt-1_temp/part-00000-of-00001.data; No space left on device [Op:SaveV2]"
    assert files.refused_errno(RuntimeError(tf_message)) == errno.ENOSPC
    tf_message = "log/ckpt-5_temp; Permission denied [Op:SaveV2]"
    assert files.refused_errno(RuntimeError(tf_message)) == errno.EACCES
    with pytest.raises(KeyError):  # other errors pass through
        with files.reporting("x"):
            raise KeyError("x")


def test_print_text_to_a_full_stdout(monkeypatch):
    """stdout on /dev/full: one UserError line; stdout then points at /dev/null, so that
    the interpreter's flush at exit has nothing left to fail on."""
    out = open("/dev/full", "w")
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(hparams.UserError, match=r"^could not write to stdout \(No space left"):
        files.print_text("translation\n" * 1000)
    out.write("x" * 10000)
    out.flush()  # goes to /dev/null now
    out.close()


def unprivileged() -> list[str]:
    """The command prefix of a child process that file modes bind: none for a user other
    than root; for root (as in CI), setpriv without the capabilities that write through
    them (CAP_DAC_OVERRIDE, CAP_FOWNER). Skips the test where root has no setpriv."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv (util-linux) writes through any file mode")
    caps = "-dac_override,-fowner"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]


def read_only_mount(folder: str) -> list[str]:
    """The command prefix of a child process that sees an empty read-only file system
    (tmpfs) mounted on ``folder``, in a mount namespace of its own (unshare). Skips the
    test where this machine cannot make one (no unshare, or namespaces not allowed)."""
    script = 'mount -t tmpfs -o ro tmpfs "$1" && shift && exec "$@"'
    prefix = ["unshare", "--map-root-user", "--mount", "sh", "-c", script, "sh", folder]
    if shutil.which("unshare") is None:
        pytest.skip("no unshare (util-linux) to mount a read-only file system")
    probe = subprocess.run(prefix + ["true"], capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"cannot mount a read-only file system here: {probe.stderr.strip()}")
    return prefix


REFUSED = """
import json, sys
from transformer_tf2.utils import files
from transformer_tf2.utils.errors import UserError

results = {}
for path in sys.argv[1:]:
    try:
        files.atomic_write(path, "new")
        results[path] = "written"
    except UserError as e:
        results[path] = str(e)
print(json.dumps(results))
"""


def refused_writes(prefix: list[str], *paths: str) -> dict:
    """{path: the UserError line of atomic_write(path) in a child process run under
    ``prefix``, or 'written'}."""
    proc = subprocess.run(
        prefix + [sys.executable, "-c", REFUSED, *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_folder_this_user_cannot_write_is_one_line(tmp_path):
    """A file in a folder without write permission, and a folder in it: one line each,
    naming the file, the cause and what to do; the old version stays, nothing is left."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    (folder / "out.txt").write_text("old")
    paths = [str(folder / "out.txt"), str(folder / "new" / "out.txt")]
    folder.chmod(0o555)
    try:
        results = refused_writes(unprivileged(), *paths)
    finally:
        folder.chmod(0o755)
    for path in paths:
        assert results[path] == (
            f"could not write {path} (Permission denied); its previous version is kept: "
            f"give this user write permission there, or choose another folder"
        )
    assert (folder / "out.txt").read_text() == "old" and os.listdir(folder) == ["out.txt"]


def test_a_read_only_file_system_is_one_line(tmp_path):
    folder = tmp_path / "mounted"
    folder.mkdir()
    path = str(folder / "out.txt")
    results = refused_writes(read_only_mount(str(folder)), path)
    assert results[path] == (
        f"could not write {path} (Read-only file system); its previous version is kept: "
        f"choose a folder on a writable file system"
    )
