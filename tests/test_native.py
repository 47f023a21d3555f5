"""native.py and native_ops.cc: the fused CPU kernels compute what TensorFlow's ops
compute, are built once and cached, and a machine that cannot build them keeps
TensorFlow's ops with one line saying why.

The kernels need a C++ compiler: where there is none, the tests of their values are
skipped (and the one of the fallback still runs).
"""

import errno
import fcntl
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from helpers import graph_nodes
from transformer_tf2.kernels import fast_ops, native
from transformer_tf2.layers import attention, modules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_compiler = pytest.mark.skipif(native.compiler() is None, reason="no C++ compiler")
NO_ROWS = np.zeros((0,), np.int32)  # NativeStepAttention's rows: none, key row r // g


def library():
    lib = native.ops()
    assert lib is not None, "a C++ compiler is there, so the kernels must build and load"
    return lib


def layer_norm_reference(x, gamma, beta, eps):
    """LayerNorm in float64 and its gradients for the upstream gradient dy = w."""
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    r = 1.0 / np.sqrt(x.var(-1, keepdims=True) + eps)
    n = (x - mean) * r
    return n * gamma + beta, n, r


@needs_compiler
@pytest.mark.parametrize("shape", [(2, 5, 8), (130, 7), (3, 1, 256), (0, 4)])
def test_layer_norm_kernel_matches_float64(shape):
    """Forward values and the three gradients against float64, on shapes whose row
    count is and is not a multiple of the 64-row blocks of the gradient's column sums."""
    lib = library()
    rng = np.random.default_rng(1)
    d = shape[-1]
    x = (2.0 * rng.normal(size=shape) + 0.5).astype(np.float32)
    gamma = rng.normal(size=d).astype(np.float32)
    beta = rng.normal(size=d).astype(np.float32)
    dy = rng.normal(size=shape).astype(np.float32)
    y, mean, rstd = lib.native_layer_norm(x, gamma, beta, epsilon=1e-6)
    dx, d_gamma, d_beta = lib.native_layer_norm_grad(dy, x, gamma, mean, rstd)
    want, n, r = layer_norm_reference(x, gamma, beta, 1e-6)
    assert y.shape == shape and mean.shape == shape[:-1] and rstd.shape == shape[:-1]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd, r[..., 0], rtol=1e-5)
    g = dy * gamma
    want_dx = r * (g - g.mean(-1, keepdims=True) - n * (g * n).mean(-1, keepdims=True))
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d_gamma, (dy * n).reshape(-1, d).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d_beta, dy.reshape(-1, d).sum(0), rtol=1e-4, atol=1e-4)
    if x.size:
        assert np.abs(dx).max() > 0.1 and np.abs(d_gamma).max() > 0.1


@needs_compiler
def test_layer_norm_kernel_rejects_a_gamma_of_the_wrong_size():
    lib = library()
    with pytest.raises(tf.errors.InvalidArgumentError, match="gamma must be"):
        lib.native_layer_norm(tf.zeros((2, 4)), tf.ones(3), tf.zeros(3), epsilon=1e-6)


COLUMN_SUMS = """
import json, os, sys, time
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[4]))
sys.path.insert(0, sys.argv[1])
from transformer_tf2.kernels import native
def cpu_ticks():  # {thread id: user + system CPU time, in clock ticks}
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


a, lib = np.load(sys.argv[2]), native.ops()
_, m, r = lib.native_layer_norm(a["x"], a["g"], a["b"], epsilon=1e-6)
out = lib.native_layer_norm_grad(a["dy"], a["x"], a["g"], m, r)
np.save(sys.argv[3], np.stack([out[1].numpy(), out[2].numpy()]))
before, start = cpu_ticks(), time.time()
while time.time() - start < 1.5:  # the gradient alone: which threads run it
    lib.native_layer_norm_grad(a["dy"], a["x"], a["g"], m, r)
after = cpu_ticks()
busy = sum(after[t] - before.get(t, 0) >= 3 for t in after)
print(json.dumps({"threads": tf.config.threading.get_intra_op_parallelism_threads(), "busy": busy}))
"""


@needs_compiler
@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="no /proc to count threads")
def test_layer_norm_gradient_columns_do_not_depend_on_the_thread_count(tmp_path):
    """The column sums add fixed 64-row blocks in block order: the same bits whichever
    thread runs which block. One process with 1 intra-op thread against one with 4 (each
    its own setting, whatever the split of pytest-xdist's workers); the threads that
    spend CPU time on the kernel show that the second really shares the rows out."""
    library()  # built once, before the two processes load it
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(2, 4000, 32)).astype(np.float32)
    gamma, beta = rng.normal(size=(2, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, dy=dy, g=gamma, b=beta)
    columns, busy = [], []
    for threads in (1, 4):
        out = tmp_path / f"columns-{threads}.npy"
        code = [sys.executable, "-c", COLUMN_SUMS, ROOT, str(tmp_path / "in.npz"), str(out)]
        run = subprocess.run(
            [*code, str(threads)], check=True, timeout=120, capture_output=True, text=True
        )
        report = json.loads(run.stdout.splitlines()[-1])
        assert report["threads"] == threads
        columns.append(np.load(out))
        busy.append(report["busy"])
    assert busy[0] == 1 and busy[1] >= 2, busy  # threads that ran the kernel: 1, then several
    assert np.abs(columns[0]).max() > 1.0
    np.testing.assert_array_equal(columns[0], columns[1])


@needs_compiler
@pytest.mark.parametrize("training", [True, False])
def test_layer_norm_layer_uses_the_kernel_in_training_only(monkeypatch, training):
    """In a training call of a train step's function (fast_ops.function under the
    trainer's kernels) the layer runs the kernel, with the same values and gradients as
    Keras' LayerNormalization; a call there that is not training (the dev loss) keeps
    TensorFlow's ops."""
    library()
    rng = np.random.default_rng(3)
    x = (3.0 * rng.normal(size=(2, 70, 16)) + 1.0).astype(np.float32)
    layer = modules.layer_norm("ln", 1e-6)
    layer.build(x.shape)
    layer.gamma.assign(rng.normal(size=16).astype(np.float32))
    layer.beta.assign(rng.normal(size=16).astype(np.float32))
    weights = tf.constant(rng.normal(size=x.shape).astype(np.float32))

    def run(native_on):
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=training)
                total = tf.reduce_sum(y * weights)
            return y, tape.gradient(total, [x, layer.gamma, layer.beta])

        fn = fast_ops.function(step, fast_ops.Kernels.resolve([] if native_on else ["native_ln"]))

        graph = fn.get_concrete_function(tf.TensorSpec(x.shape)).graph
        kinds = {op.type for op in graph.get_operations()}
        y, grads = fn(tf.constant(x))
        return kinds, y.numpy(), [g.numpy() for g in grads]

    kinds, y, grads = run(True)
    assert ("NativeLayerNorm" in kinds) == training
    assert ("NativeLayerNormGrad" in kinds) == training
    std_kinds, y_std, grads_std = run(False)
    assert "NativeLayerNorm" not in std_kinds
    np.testing.assert_allclose(y, y_std, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, grads_std):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def run_native(env: dict, cache: str) -> subprocess.CompletedProcess:
    """native.ops() in a new process with ``env`` and the cache folder ``cache``."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from transformer_tf2.kernels import native; print(native.ops())"
    )
    full = {**os.environ, "TRANSFORMER_NATIVE_CACHE": cache, **env}
    return subprocess.run(
        [sys.executable, "-c", code, ROOT], env=full, capture_output=True, text=True, check=True
    )


def fake_compiler(folder, script: str, version: str = "c++ (Fake) 1.0"):
    """An executable that answers ``--version`` with ``version``; any other call it logs
    to ``folder/calls``, then runs ``script``."""
    fake = folder / "cxx"
    answer = f'if [ "$1" = --version ]; then echo "{version}"; exit 0; fi\n'
    fake.write_text(f"#!/bin/sh\n{answer}echo x >> {folder / 'calls'}\n{script}")
    fake.chmod(0o755)
    return str(fake)


def calls(folder) -> int:
    path = folder / "calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_a_compile_error_is_one_line_and_is_not_retried(tmp_path):
    """A compiler that refuses the source: ops() is None, one line says why and where, the
    failure is kept in a marker naming the compiler's first error line, and the next
    process reports it instead of building again."""
    script = (
        "echo 'native_ops.cc:1: error: no luck' >&2\necho 'native_ops.cc:2: error: x' >&2\nexit 1\n"
    )
    cxx = fake_compiler(tmp_path, script)
    first = run_native({"CXX": cxx}, str(tmp_path / "cache"))
    assert first.stdout.strip() == "None"
    lines = [ln for ln in first.stderr.splitlines() if ln.startswith("native kernels off")]
    assert len(lines) == 1 and "error: no luck" in lines[0] and ".failed" in lines[0], lines
    tries = calls(tmp_path)
    assert tries == len(native.ARCH_FLAGS)  # each set of flags tried once
    (marker,) = [f for f in os.listdir(tmp_path / "cache") if f.endswith(".failed")]
    text = (tmp_path / "cache" / marker).read_text()
    assert text.splitlines()[0] == "native_ops.cc:1: error: no luck"
    assert not [f for f in os.listdir(tmp_path / "cache") if f.endswith(".tmp")]
    second = run_native({"CXX": cxx}, str(tmp_path / "cache"))
    earlier = "an earlier build failed (native_ops.cc:1: error: no luck; remove "
    assert second.stdout.strip() == "None"
    assert f"{earlier}{tmp_path / 'cache' / marker} to retry)" in second.stderr
    assert calls(tmp_path) == tries  # not built again


@pytest.mark.slow
def test_a_killed_compiler_is_not_remembered_and_is_retried(tmp_path):
    """A compiler killed by a signal (the out-of-memory killer): one line, no marker, and
    the next run tries again."""
    cxx = fake_compiler(tmp_path, "kill -9 $$\n")
    first = run_native({"CXX": cxx}, str(tmp_path / "cache"))
    assert first.stdout.strip() == "None"
    assert "killed by SIGKILL (the next run tries again)" in first.stderr
    assert calls(tmp_path) == 1  # no other flags tried after a kill
    assert not [f for f in os.listdir(tmp_path / "cache") if f.endswith(".failed")]
    run_native({"CXX": cxx}, str(tmp_path / "cache"))
    assert calls(tmp_path) == 2


def fake_build(tmp_path, monkeypatch, script: str, seconds: float = 60.0) -> str:
    """native.built() with a fake compiler running ``script`` and no TensorFlow flags,
    into ``tmp_path/cache/lib.so``: why it did not give a library ("" where it did)."""
    monkeypatch.setattr(native, "BUILD_SECONDS", seconds)
    monkeypatch.setattr(native, "tf_flags", lambda: [])
    return native.built(fake_compiler(tmp_path, script), str(tmp_path / "cache" / "lib.so"))


def test_a_killed_compiler_proper_is_not_remembered(tmp_path, monkeypatch):
    """The out-of-memory killer mostly kills cc1plus, not the g++ driver, which then exits
    with status 1 and says so: not a compile error, so no marker, and the next build
    runs the compiler again. So too a compiler that fails without a word."""
    oom = "echo 'g++: fatal error: Killed signal terminated program cc1plus' >&2\nexit 1\n"
    why = fake_build(tmp_path, monkeypatch, oom)
    killed = "g++: fatal error: Killed signal terminated program cc1plus"
    assert why == f"the build failed: the compiler was killed ({killed}) (the next run tries again)"
    assert calls(tmp_path) == 1 and os.listdir(tmp_path / "cache") == ["lib.so.lock"]
    why = fake_build(tmp_path, monkeypatch, "exit 4\n")
    assert why.endswith("stopped with exit status 4 and no message (the next run tries again)")
    assert calls(tmp_path) == 2 and os.listdir(tmp_path / "cache") == ["lib.so.lock"]


def test_the_marker_names_the_first_error_not_a_refused_flag(tmp_path, monkeypatch):
    """A compiler too old for -mno-avx512fp16 refuses the first set of flags; the source's
    own error, from the next try, is the one remembered: its first "error:" line, not the
    lines before it that show where it was included from."""
    script = """case "$*" in *-mno-avx512fp16*)
  echo "g++: error: unrecognized command-line option '-mno-avx512fp16'" >&2; exit 1;; esac
echo 'In file included from tensorflow/core/platform/errors.h:20,' >&2
echo 'native_ops.cc:7:3: error: expected ; before x' >&2
echo 'native_ops.cc:9:1: error: another' >&2
exit 1
"""
    why = fake_build(tmp_path, monkeypatch, script)
    failed = tmp_path / "cache" / "lib.so.failed"
    error = "native_ops.cc:7:3: error: expected ; before x"
    assert why == f"the build failed: {error} (remove {failed} to retry)"
    first, *rest = failed.read_text().splitlines()
    assert first == error
    # the marker says by itself how to retry, to whoever finds it in the cache folder
    assert "remove it to retry" in " ".join(rest) and "TRANSFORMER_NATIVE_CACHE" in " ".join(rest)
    assert calls(tmp_path) == len(native.ARCH_FLAGS)


STORAGE_LINES = [
    *(
        f"cc1plus: fatal error: error writing to /tmp/ccQ1.s: {os.strerror(number)}"
        for number in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)
    ),
    "/usr/bin/ld: final link failed: No space left on device",
]


@pytest.mark.parametrize("line", STORAGE_LINES)
def test_a_build_that_the_storage_fails_is_not_remembered(tmp_path, monkeypatch, line):
    """A compiler or linker that could not write (a full disk, a quota, an I/O error, a
    read-only file system) stops with an error line, but the source is not at fault: no
    marker, no other flags tried, and the next build runs the compiler again."""
    script = f"echo 'native_ops.cc: In function f:' >&2\necho '{line}' >&2\nexit 1\n"
    why = fake_build(tmp_path, monkeypatch, script)
    storage = f"the storage failed the build ({line})"
    assert why == f"the build failed: {storage} (the next run tries again)"
    assert calls(tmp_path) == 1 and os.listdir(tmp_path / "cache") == ["lib.so.lock"]
    fake_build(tmp_path, monkeypatch, script)
    assert calls(tmp_path) == 2


def test_the_whole_build_is_bounded_by_one_timeout(tmp_path, monkeypatch):
    """Each set of flags fails after 0.6 s: with 1 s for the whole build the second try
    gets what is left and is stopped, and the third never starts (one timeout per try
    would run all three and remember their error). No marker, no temporary file."""
    start = time.time()
    slow = "sleep 0.6\necho 'native_ops.cc:1: error: slow' >&2\nexit 1\n"
    why = fake_build(tmp_path, monkeypatch, slow, seconds=1.0)
    assert time.time() - start < 1.6
    assert why == "the build failed: no library within 1.0 s (the next run tries again)"
    assert calls(tmp_path) == 2 and os.listdir(tmp_path / "cache") == ["lib.so.lock"]


def test_a_hung_compiler_is_killed_with_what_it_started(tmp_path, monkeypatch):
    """A compiler that hangs is killed at the deadline together with the process it runs
    (as g++ runs cc1plus), which would otherwise go on using the CPU and memory."""
    hang = f"sleep 30 &\necho $! > {tmp_path / 'child'}\nwait\n"
    start = time.time()
    why = fake_build(tmp_path, monkeypatch, hang, seconds=1.0)
    assert time.time() - start < 10  # not held up until the child ends by itself
    assert why == "the build failed: no library within 1.0 s (the next run tries again)"
    child = int((tmp_path / "child").read_text())
    time.sleep(0.2)  # for its new parent to reap it
    try:
        with open(f"/proc/{child}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z"), f"the compiler's child {child} still runs ({state})"


def test_a_marker_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """The marker goes to a temporary name first: a write that fails before the rename
    leaves no marker (a half-written one would be read as a compile error) and no
    temporary file."""
    native.write_marker(str(tmp_path / "lib.so.failed"), "error: one")
    assert (tmp_path / "lib.so.failed").read_text() == "error: one\n"

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(native.os, "replace", full_disk)
    with pytest.raises(OSError):
        native.write_marker(str(tmp_path / "other.so.failed"), "error: two")
    assert sorted(os.listdir(tmp_path)) == ["lib.so.failed"]


def test_a_library_wins_over_a_marker(tmp_path, monkeypatch):
    """Another process built the library after an earlier failure was remembered: the
    library is used, and the compiler is not run."""
    cxx = fake_compiler(tmp_path, "exit 1\n")
    path = tmp_path / "lib.so"
    path.write_bytes(b"a library")
    (tmp_path / "lib.so.failed").write_text("an old error\n")
    assert native.built(cxx, str(path)) == "" and calls(tmp_path) == 0


LOCKED_BUILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from transformer_tf2.kernels import native
native.BUILD_SECONDS = float(sys.argv[4])
print("ready", flush=True)
start = time.time()
print(repr(native.built(sys.argv[2], sys.argv[3])), round(time.time() - start, 1))
"""


@pytest.mark.slow
def test_a_process_that_finds_the_lock_held_waits_or_gives_up(tmp_path):
    """The build lock: a process that finds it held waits, and loads what the holder
    built without running the compiler; one that waits past the deadline gives up with
    one line."""
    cxx = fake_compiler(tmp_path, "exit 1\n")
    path = tmp_path / "lib.so"
    args = [sys.executable, "-c", LOCKED_BUILD, ROOT, cxx, str(path)]
    with open(str(path) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiting = subprocess.Popen([*args, "60"], stdout=subprocess.PIPE, text=True)
        assert waiting.stdout.readline() == "ready\n"  # TensorFlow imported
        time.sleep(2)  # the other process is waiting on the lock
        assert waiting.poll() is None
        path.write_bytes(b"built by the holder")
    out, _ = waiting.communicate(timeout=60)
    assert out.split()[0] == "''" and float(out.split()[1]) >= 1.5 and calls(tmp_path) == 0
    path.unlink()
    with open(str(path) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = subprocess.run([*args, "1"], capture_output=True, text=True, timeout=60).stdout
    assert "'another process held the build lock" in out and calls(tmp_path) == 0


def test_two_builds_at_once_run_the_compiler_once(tmp_path, monkeypatch):
    """Two builds of one library at the same time (threads here: each opens the lock file
    itself, so flock treats them as two processes): one compiles, the other waits for it
    and takes its library."""
    script = """for a; do [ "$prev" = -o ] && out=$a; prev=$a; done
sleep 1
echo built > "$out"
"""
    monkeypatch.setattr(native, "tf_flags", lambda: [])
    cxx, path = fake_compiler(tmp_path, script), str(tmp_path / "cache" / "lib.so")
    results = []

    def build():
        start = time.time()
        why = native.built(cxx, path)
        results.append((why, time.time() - start))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [why for why, _ in results] == ["", ""] and calls(tmp_path) == 1
    assert min(seconds for _, seconds in results) >= 0.9  # the second waited for the first
    assert open(path).read() == "built\n"


@pytest.mark.slow
def test_without_a_compiler_or_switched_off_tensorflow_ops_are_kept(tmp_path):
    missing = run_native({"CXX": str(tmp_path / "no-such-compiler")}, str(tmp_path))
    assert missing.stdout.strip() == "None"
    assert "native kernels off: no C++ compiler" in missing.stderr
    off = run_native({"TRANSFORMER_NATIVE": "0"}, str(tmp_path))
    assert off.stdout.strip() == "None" and "native kernels off" not in off.stderr
    assert os.listdir(tmp_path) == []  # nothing built


@needs_compiler
def test_the_library_is_named_by_source_tensorflow_its_flags_compiler_and_cpu(
    monkeypatch, tmp_path
):
    cxx = native.compiler()
    monkeypatch.setenv("TRANSFORMER_NATIVE_CACHE", str(tmp_path))
    path = native.library_path(cxx)
    assert os.path.dirname(path) == str(tmp_path) and path.endswith(".so")
    with monkeypatch.context() as patch:
        patch.setattr(native, "cpu_flags", lambda: "flags : another cpu")
        assert native.library_path(cxx) != path
    with monkeypatch.context() as patch:
        patch.setattr(tf, "__version__", "0.0.0")
        assert native.library_path(cxx) != path
    with monkeypatch.context() as patch:  # another TensorFlow install of the same version
        patch.setattr(tf, "__file__", "/elsewhere/tensorflow/__init__.py")
        assert native.library_path(cxx) != path
    with monkeypatch.context() as patch:  # built with other flags (another ABI, say)
        patch.setattr(native, "tf_flags", lambda: ["-D_GLIBCXX_USE_CXX11_ABI=0"])
        assert native.library_path(cxx) != path
    assert native.library_path(cxx) == path


def test_the_library_is_named_by_the_compilers_version(tmp_path, monkeypatch):
    """A compiler upgraded in place (the same path, another version) builds a library of
    its own, not loading the old compiler's nor reading the old one's marker."""
    monkeypatch.setenv("TRANSFORMER_NATIVE_CACHE", str(tmp_path / "cache"))
    cxx = fake_compiler(tmp_path, "exit 1\n", version="g++ (GCC) 12.2.0")
    old = native.library_path(cxx)
    fake_compiler(tmp_path, "exit 1\n", version="g++ (GCC) 13.1.0")
    assert native.library_path(cxx) != old
    fake_compiler(tmp_path, "exit 1\n", version="g++ (GCC) 12.2.0")
    assert native.library_path(cxx) == old
    assert calls(tmp_path) == 0  # asking the version is not a build


def test_the_tests_build_the_kernels_in_a_temporary_folder():
    """conftest.py points the kernel cache at a temporary folder of the test session: a
    test run never writes into the user's ~/.cache."""
    import tempfile

    folder = native.cache_dir()
    assert folder == os.environ["TRANSFORMER_TEST_NATIVE_CACHE"]
    assert os.path.commonpath([folder, tempfile.gettempdir()]) == tempfile.gettempdir()
    assert not folder.startswith(os.path.expanduser("~"))


def attention_reference(q, k, v, mask, div):
    """softmax(q k^T / div, masked keys at MASK_VALUE) v in float64 for each head:
    q (N, h, 1, d), k, v (N, h, T, d), mask (M, T) or None -> (N, h, 1, d)."""
    scores = np.einsum("nhqd,nhtd->nhqt", q.astype(np.float64), k) / div
    if mask is not None:
        scores = np.where(mask[:, None, None, :], scores, attention.MASK_VALUE)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("nhqt,nhtd->nhqd", w / w.sum(-1, keepdims=True), v)


@needs_compiler
@pytest.mark.parametrize("masking", ["per_row", "shared", "none", "one_row_all_masked"])
@pytest.mark.parametrize("t_k", [1, 13])
def test_step_attention_kernel_matches_float64(masking, t_k):
    """One query position over cached heads, each row with its own mask, one mask for
    every row, none, and a row whose keys are all masked (uniform weights, as TensorFlow's
    softmax over equal logits gives)."""
    lib = library()
    rng = np.random.default_rng(4)
    n, h, d = 5, 3, 8
    q = rng.normal(size=(n, h, 1, d)).astype(np.float32)
    k, v = (rng.normal(size=(n, h, t_k, d)).astype(np.float32) for _ in range(2))
    mask = {
        "per_row": rng.random((n, t_k)) < 0.6,
        "shared": rng.random((1, t_k)) < 0.6,
        "none": None,
        "one_row_all_masked": np.ones((n, t_k), bool),
    }[masking]
    if masking == "one_row_all_masked":
        mask[2] = False
    elif mask is not None:
        mask[:, 0] = True
    for div in (np.sqrt(d), 1.0):
        flat = np.zeros((0,), bool) if mask is None else mask
        out = lib.native_step_attention(
            q, k, v, flat, NO_ROWS, div=div, masked_value=attention.MASK_VALUE
        )
        assert out.shape == (n, h, 1, d)
        np.testing.assert_allclose(out, attention_reference(q, k, v, mask, div), atol=1e-5)
    if masking == "one_row_all_masked":
        np.testing.assert_allclose(out[2, 0, 0], v[2, 0].mean(0), atol=1e-5)


@needs_compiler
@pytest.mark.parametrize("mask_rows", [0, 1, 3])
def test_step_attention_kernel_shares_a_key_row_among_consecutive_queries(mask_rows):
    """k, v (N / g, h, T, d) and mask (N / g or 1, T): query row r reads key row r // g,
    bit for bit what the kernel gives with the key rows repeated g times (a beam's g
    hypotheses of a sentence over one copy of its encoder's keys/values)."""
    lib = library()
    rng = np.random.default_rng(7)
    sentences, g, h, t_k, d = 3, 4, 2, 9, 8
    q = rng.normal(size=(sentences * g, h, 1, d)).astype(np.float32)
    k, v = (rng.normal(size=(sentences, h, t_k, d)).astype(np.float32) for _ in range(2))
    mask = rng.random((mask_rows, t_k)) < 0.6 if mask_rows else np.zeros((0,), bool)
    if mask_rows:
        mask[:, 0] = True
    shared = lib.native_step_attention(q, k, v, mask, NO_ROWS, div=np.sqrt(d), masked_value=-1e9)
    rows = np.repeat(np.arange(sentences), g)
    repeated_mask = mask[rows] if mask_rows == sentences else mask
    repeated = lib.native_step_attention(
        q, k[rows], v[rows], repeated_mask, NO_ROWS, div=np.sqrt(d), masked_value=-1e9
    )
    assert np.array_equal(shared.numpy(), repeated.numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="differ in shape"):
        lib.native_step_attention(q[:-1], k, v, mask, NO_ROWS, div=1.0, masked_value=-1e9)


@needs_compiler
@pytest.mark.parametrize("mask_rows", [0, 1, 3])
def test_step_attention_kernel_reads_the_key_row_each_query_names(mask_rows):
    """rows (N,): query row r reads key (and mask) row rows[r] of k, v (M, h, T, d), in
    any order and any number of times (a beam's live hypotheses over their sentences'
    one copy of the encoder's keys/values), bit for bit what the kernel gives on the
    gathered rows; a row outside the keys is refused."""
    lib = library()
    rng = np.random.default_rng(8)
    sentences, h, t_k, d = 3, 2, 9, 8
    rows = np.array([2, 0, 0, 2, 1, 2, 2], np.int32)
    q = rng.normal(size=(len(rows), h, 1, d)).astype(np.float32)
    k, v = (rng.normal(size=(sentences, h, t_k, d)).astype(np.float32) for _ in range(2))
    mask = rng.random((mask_rows, t_k)) < 0.6 if mask_rows else np.zeros((0,), bool)
    if mask_rows:
        mask[:, 0] = True
    indexed = lib.native_step_attention(q, k, v, mask, rows, div=np.sqrt(d), masked_value=-1e9)
    gathered_mask = mask[rows] if mask_rows == sentences else mask
    gathered = lib.native_step_attention(
        q, k[rows], v[rows], gathered_mask, NO_ROWS, div=np.sqrt(d), masked_value=-1e9
    )
    assert np.array_equal(indexed.numpy(), gathered.numpy())
    assert not np.array_equal(indexed.numpy()[1], indexed.numpy()[0])  # rows differ
    with pytest.raises(tf.errors.InvalidArgumentError, match="a row outside the keys"):
        lib.native_step_attention(q, k, v, mask, rows + 1, div=1.0, masked_value=-1e9)
    with pytest.raises(tf.errors.InvalidArgumentError, match="differ in shape"):
        lib.native_step_attention(q, k, v, mask, rows[:-1], div=1.0, masked_value=-1e9)


@needs_compiler
def test_step_attention_kernel_rejects_a_mask_of_the_wrong_length():
    lib = library()
    q, k = np.zeros((2, 1, 1, 4), np.float32), np.zeros((2, 1, 3, 4), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="mask must be"):
        lib.native_step_attention(
            q, k, k, np.ones((2, 2), bool), NO_ROWS, div=2.0, masked_value=-1e9
        )


@needs_compiler
@pytest.mark.parametrize("k", [1, 4, 7])
def test_top_log_softmax_kernel_matches_tensorflow(k):
    """The k largest logits of each row as log-probabilities, largest first, the lower
    index first among equal logits: tf.math.top_k's tokens and tf.nn.log_softmax's
    values, on rows with ties, a row of equal logits and a row of very unequal ones."""
    lib = library()
    rng = np.random.default_rng(5)
    logits = (4.0 * rng.normal(size=(6, 9))).astype(np.float32)
    logits[1, [2, 5, 7]] = logits[1].max() + 1.0  # a three-way tie for the top
    logits[2] = 0.5  # every logit equal
    logits[3, 4] = 200.0  # the others' exp underflows
    values, indices = lib.native_top_log_softmax(logits, k=k)
    want_z, want_idx = tf.math.top_k(logits, k=k)
    assert indices.numpy().tolist() == want_idx.numpy().tolist()
    want = np.take_along_axis(tf.nn.log_softmax(logits).numpy(), want_idx.numpy(), 1)
    np.testing.assert_allclose(values, want, rtol=1e-5, atol=1e-5)
    assert indices[1, : min(k, 3)].numpy().tolist() == [2, 5, 7][: min(k, 3)]
    with pytest.raises(tf.errors.InvalidArgumentError, match="V >= k"):
        lib.native_top_log_softmax(logits[:, :2], k=3)


@needs_compiler
@pytest.mark.parametrize("t", [0, 1, 6])
def test_gather_append_kernel_is_a_gather_and_a_concat(t):
    """The rows of a cache, some twice, some left out, each with its new position after
    its T cached ones: tf.gather then tf.concat, bit for bit (a copy), from an empty cache
    (T = 0) too; a row outside the cache is refused."""
    lib = library()
    rng = np.random.default_rng(7)
    cache = rng.normal(size=(4, 3, t, 5)).astype(np.float32)
    rows = np.array([2, 0, 2, 3, 1, 3], np.int32)
    new = rng.normal(size=(6, 3, 1, 5)).astype(np.float32)
    out = lib.native_gather_append(cache, rows, new)
    assert out.shape == (6, 3, t + 1, 5)
    want = tf.concat([tf.gather(cache, rows), new], axis=2)
    assert np.array_equal(out.numpy(), want.numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="a row outside the cache"):
        lib.native_gather_append(cache, np.array([0, 4, 1, 1, 1, 1], np.int32), new)


def graph_ops(fn, *specs) -> set[str]:
    """The op types of a tf.function's trace, inside its loops' bodies too."""
    return {node.op for node in graph_nodes(fn.get_concrete_function(*specs).graph.as_graph_def())}


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize(
    "position,model_type",
    [("sinusoid", "transformer"), ("t5", "transformer"), ("rotary", "weighted")],
)
def test_decoders_use_the_kernels_and_decode_the_same(monkeypatch, position, model_type):
    """The greedy and beam decoders trace the kernels where the attention is plain (the
    cross-attention; rotary self-attention; T5's bias keeps TensorFlow's ops for
    self-attention; the Weighted Transformer merges the kernel's heads through its
    branches) and decode
    what TensorFlow's ops decode, token for token with the same scores. (What export.py
    traces keeps TensorFlow's ops: test_export.py loads its SavedModel in a process
    without the library.)"""
    from transformer_tf2.decoding import beam_search, greedy_search
    from transformer_tf2.models.model import Transformer

    library()
    model = Transformer(
        src_vocab_size=30, tgt_vocab_size=30, d_model=16, num_heads=2, d_ff=32,
        num_blocks=2, dropout_rate=0.0, position=position, model_type=model_type,
    )  # fmt: skip
    model.build_all()
    ids = np.random.default_rng(6).integers(4, 30, size=(5, 7))
    ids[np.arange(7)[None, :] >= np.array([7, 3, 5, 2, 6])[:, None]] = 0  # PAD: unequal budgets
    src = tf.constant(ids, tf.int32)  # so that sentences leave the beam at different steps
    spec = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32))
    results = {}
    for on in (True, False):
        kernels = fast_ops.Kernels.resolve([] if on else ["native_decode"], decoding=True)
        greedy = greedy_search.greedy_decoder(model, kernels=kernels)
        beam = beam_search.beam_decoder(model, 3, kernels=kernels, n_best=3)
        kinds = graph_ops(greedy, *spec) | graph_ops(beam, *spec)
        assert ("NativeStepAttention" in kinds) == on
        assert ("NativeTopLogSoftmax" in kinds) == on
        # the beam's reorder and a step's append, one copy (Transformer.lazy_reorder)
        assert ("NativeGatherAppend" in kinds) == on
        # the paper's cross-attention: a sentence's beams read one copy of its keys/values
        shared = fast_ops.under(kernels, model.reads_memory_rows)()
        assert shared == (on and model_type == "transformer")
        ids, scores = beam(src, tf.constant(6))
        results[on] = greedy(src, tf.constant(6)).numpy(), ids.numpy(), scores.numpy()
    assert np.array_equal(results[True][0], results[False][0])
    assert np.array_equal(results[True][1], results[False][1])
    np.testing.assert_allclose(results[True][2], results[False][2], atol=1e-5)
