"""The fused CPU kernels of our own (``native_ops.cc``), compiled on first use.

:func:`ops` builds ``native_ops.cc`` into a TensorFlow op library with the C++ compiler
(``$CXX``, else ``g++``) against the installed TensorFlow's headers (``tf.sysconfig``),
for this CPU (``-march=native``), once per machine: the library is kept in
``$TRANSFORMER_NATIVE_CACHE`` (default ``~/.cache/transformer-tf2``) under a name made of
the source, TensorFlow's version, location and compile and link flags, the compiler (its
path and the first line of its ``--version``), the build flags and the CPU's flags, written
to a temporary name and renamed. One process
builds a given library at a time (an ``fcntl`` lock per name); the others wait for it and
load what it built. The whole build, a wait included, is bounded by :data:`BUILD_SECONDS`;
a compiler still running then is killed with the processes it started.

A compile error is remembered in a ``.failed`` marker beside the library (written
atomically, naming the compiler's first error line and how to retry), so that later runs do
not retry it; a timeout, a compiler killed by a signal (the driver or the compiler proper
it runs: out of memory, say) or one that the storage failed (a full disk, a quota, an I/O
error, a read-only file system) is not: the next run tries again. A library that exists wins over a
marker. Without a compiler, or where the build or the load fails, :func:`ops` logs one
line and returns None, and the callers keep TensorFlow's own ops. ``TRANSFORMER_NATIVE=0``
turns the kernels off.

The kernels run on the CPU only, where fast_ops decides: in the train step's LayerNorms,
and in the decoders that this process traces (a step's attention, LayerNorms and the
beam's top k); never inside an XLA-compiled function nor in what export.py traces, so
that exported SavedModels and checkpoints never depend on the library.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import tensorflow as tf

from transformer_tf2.utils import files

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native_ops.cc")
# -march=native: this CPU's vector units; GCC 12 cannot compile TensorFlow's Eigen headers
# with AVX512-FP16 on, so that is turned off where the compiler knows the flag
ARCH_FLAGS = (["-march=native", "-mno-avx512fp16"], ["-march=native"], [])
BUILD_FLAGS = ["-shared", "-fPIC", "-O3", "-fopenmp-simd", "-w"]
BUILD_SECONDS = 300  # the whole build, every set of ARCH_FLAGS tried, and a wait for another's
ERROR = re.compile(r"\berror: |\bld: ")  # GCC's and Clang's error lines, and the linker's
# a compiler proper killed by a signal (out of memory), as the driver reports it (GCC, Clang)
KILLED = re.compile(
    r"Killed signal terminated|compiler error: Killed|due to signal|command: Killed"
)
# errno values of a build that the storage failed (files.STORAGE_ERRNOS, and an I/O error):
# the compiler says them in the C library's words ("No space left on device")
STORAGE_ERRNOS = (*files.STORAGE_ERRNOS, errno.EIO)


def cache_dir() -> str:
    default = os.path.join(os.path.expanduser("~"), ".cache", "transformer-tf2")
    return os.environ.get("TRANSFORMER_NATIVE_CACHE") or default


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's feature flags (the first "flags" line of ``cpuinfo``), or the machine
    type where there is no such file: what ``-march=native`` compiles for."""
    try:
        with open(cpuinfo) as f:
            return next((line for line in f if line.startswith("flags")), platform.machine())
    except OSError:
        return platform.machine()


def compiler() -> str | None:
    """The C++ compiler: ``$CXX`` if set, else ``g++`` on the PATH; None if there is none."""
    return shutil.which(os.environ.get("CXX") or "g++")


def compiler_version(cxx: str) -> str:
    """The first line of ``cxx --version`` ("g++ (Debian 12.2.0-14) 12.2.0"), so that a
    compiler upgraded in place builds a library of its own; "" where it does not answer."""
    try:
        out = subprocess.run(
            [cxx, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return next((line.strip() for line in out.splitlines() if line.strip()), "")


def tf_flags() -> list[str]:
    """TensorFlow's compile and link flags (its headers and library)."""
    return tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()


def library_path(cxx: str) -> str:
    """Where the library of this source, TensorFlow (version, location, flags), compiler
    (path and version) and CPU is kept."""
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read())
    tensorflow = os.path.dirname(os.path.abspath(tf.__file__))
    parts = (tf.__version__, tensorflow, *tf_flags(), cxx, compiler_version(cxx), cpu_flags())
    parts += (" ".join(BUILD_FLAGS),)
    for part in parts:
        key.update(part.encode() + b"\0")
    return os.path.join(cache_dir(), f"native_ops-{key.hexdigest()[:16]}.so")


class BuildError(Exception):
    """A build that did not give a library: ``remembered`` for a compile error (the
    compiler ran and refused the source), not for a timeout or a killed compiler."""

    def __init__(self, message: str, remembered: bool):
        super().__init__(message)
        self.remembered = remembered


def build(cxx: str, path: str, deadline: float) -> None:
    """Compile SOURCE into ``path`` with the first of ARCH_FLAGS the compiler takes, all
    tries before ``deadline`` (time.time()); BuildError where none gives a library."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    errors = []  # the first error line of each try
    for arch in ARCH_FLAGS:
        left = deadline - time.time()
        if left <= 0:
            raise BuildError(f"no library within {BUILD_SECONDS} s", remembered=False)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
        os.close(fd)
        try:
            code, stderr = compile_once(
                [cxx, *BUILD_FLAGS, *arch, SOURCE, "-o", tmp, *tf_flags()], left
            )
            if code == 0:
                os.replace(tmp, path)
                return
        except subprocess.TimeoutExpired:
            raise BuildError(f"no library within {BUILD_SECONDS} s", remembered=False) from None
        except OSError as e:
            raise BuildError(f"{cxx}: {e}", remembered=False) from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        killed = next((ln.strip() for ln in stderr.splitlines() if KILLED.search(ln)), "")
        if code < 0 or killed:  # by a signal: the out-of-memory killer, say
            why = f"by {signal_name(-code)}" if code < 0 else f"({killed})"
            raise BuildError(f"the compiler was killed {why}", remembered=False)
        storage = storage_failure(stderr)
        if storage:  # a full disk, say: another try with other flags fails the same way
            raise BuildError(f"the storage failed the build ({storage})", remembered=False)
        if not stderr.strip():  # not a compile error that it could name
            raise BuildError(f"{cxx} stopped with exit status {code} and no message", False)
        errors.append(first_error(stderr))
    # the first error of the first try, unless it only refused that try's flags
    flags = {flag for arch in ARCH_FLAGS for flag in arch}
    real = [e for e in errors if not any(flag in e for flag in flags)]
    raise BuildError((real or errors)[0], remembered=True)


def compile_once(cmd: list[str], seconds: float) -> tuple[int, str]:
    """Run ``cmd`` in a process group of its own: (exit status, stderr). Where it outlives
    ``seconds`` (subprocess.TimeoutExpired) or this process is interrupted, the whole group
    is killed: the compiler proper (cc1plus) too, not only the driver."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate(timeout=seconds)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return proc.returncode, stderr


def first_error(stderr: str) -> str:
    """The compiler's first error line ("file:line:col: error: ...", or the linker's), else
    its first line of output."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return next((ln for ln in lines if ERROR.search(ln)), lines[0])


def storage_failure(stderr: str) -> str:
    """The compiler's first line saying that the storage failed it (a full disk, a quota,
    an I/O error, a read-only file system: :data:`STORAGE_ERRNOS`), else ""."""
    texts = [os.strerror(n) for n in STORAGE_ERRNOS]
    lines = (line.strip() for line in stderr.splitlines())
    return next((line for line in lines if any(text in line for text in texts)), "")


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def write_marker(path: str, text: str) -> None:
    """``path`` holding ``text``, written to a temporary name and renamed."""
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# the marker's second line
RETRY = (
    "This build is not tried again while this file exists: remove it to retry (or point "
    "TRANSFORMER_NATIVE_CACHE at another folder; TRANSFORMER_NATIVE=0 turns the kernels off)."
)


def built(cxx: str, path: str) -> str:
    """An empty string once ``path`` holds a library (built here, or by another process
    while this one waited on the lock), else why not. One lock file per library: the process that
    holds it builds; the others wait for it, at most until the build's deadline."""
    deadline = time.time() + BUILD_SECONDS
    failed = path + ".failed"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.time() >= deadline:
                    return (
                        f"another process held the build lock {path}.lock for {BUILD_SECONDS} s"
                        " (the next run tries again)"
                    )
                time.sleep(0.2)
        if os.path.exists(path):  # a good library wins over a marker
            return ""
        if os.path.exists(failed):
            with open(failed) as f:  # its first line: the error
                return f"an earlier build failed ({f.readline().strip()}; remove {failed} to retry)"
        try:
            build(cxx, path, deadline)
        except BuildError as e:
            if not e.remembered:
                return f"the build failed: {e} (the next run tries again)"
            write_marker(failed, f"{e}\n{RETRY}")
            return f"the build failed: {e} (remove {failed} to retry)"
    return ""


@functools.lru_cache(maxsize=1)
def ops():
    """The loaded op library (``native_layer_norm`` and its gradient,
    ``native_step_attention``, ``native_top_log_softmax``), with the gradient registered;
    None where the kernels are off or cannot be built or loaded (one line on stderr says
    why, once per process)."""
    if os.environ.get("TRANSFORMER_NATIVE", "1") == "0":
        return None
    cxx = compiler()
    if cxx is None:
        return _unavailable("no C++ compiler (set CXX or install g++)")
    path = library_path(cxx)
    if not os.path.exists(path):
        try:
            why = built(cxx, path)
        except OSError as e:
            return _unavailable(f"cannot build in {os.path.dirname(path)}: {e}")
        if why:
            return _unavailable(why)
    try:
        lib = tf.load_op_library(path)
    except (tf.errors.OpError, OSError) as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        return _unavailable(f"cannot load {path}: {message}")
    try:  # once per process, even where ops() is called again after cache_clear()
        tf.no_gradient("NativeLayerNormGrad")
        tf.RegisterGradient("NativeLayerNorm")(_layer_norm_gradient)
    except KeyError:
        pass
    return lib


def _layer_norm_gradient(op, dy, d_mean, d_rstd):
    """NativeLayerNorm's gradient: mean and rstd are only read by the gradient itself."""
    del d_mean, d_rstd
    x, gamma = op.inputs[0], op.inputs[1]
    mean, rstd = op.outputs[1], op.outputs[2]
    dx, d_gamma, d_beta = ops().native_layer_norm_grad(dy, x, gamma, mean, rstd)
    return dx, d_gamma, d_beta


def _unavailable(why: str):
    print(f"native kernels off: {why}; using TensorFlow's ops", file=sys.stderr)
    return None
