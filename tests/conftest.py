"""Shared fixtures: quiet TensorFlow, the float32 policy after each test, and three
session-wide fixtures of growing cost on the tiny demo corpus: preprocessed, trained for
three steps, trained for three epochs. Under pytest-xdist each of them is built once for
all the workers (:func:`once`), not once per worker. Plain helpers are in helpers.py."""

import atexit
import json
import os
import pickle
import shutil
import sys
import tempfile
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
# The native kernels (native.py) are built into a temporary folder of the test session,
# never the user's cache: made by the first process (pytest, or its xdist controller, whose
# environment the workers inherit) and shared, so one process compiles while the others
# wait on its lock; removed when that process ends.
if "TRANSFORMER_TEST_NATIVE_CACHE" not in os.environ:
    os.environ["TRANSFORMER_TEST_NATIVE_CACHE"] = tempfile.mkdtemp(prefix="transformer-native-")
    atexit.register(shutil.rmtree, os.environ["TRANSFORMER_TEST_NATIVE_CACHE"], True)
os.environ["TRANSFORMER_NATIVE_CACHE"] = os.environ["TRANSFORMER_TEST_NATIVE_CACHE"]
# What hypothesis stores (test_fuzz.py: its example database, which the tests turn off, and
# its caches of Unicode tables and of the constants in the code) goes to a temporary folder
# of the session, shared in the same way, never to .hypothesis/ in the repository
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = tempfile.mkdtemp(prefix="transformer-hypothesis-")
    atexit.register(shutil.rmtree, os.environ["HYPOTHESIS_STORAGE_DIRECTORY"], True)
# CTranslate2's OpenMP threads wait passively, as the server's CTranslate2 engine has them
# (serving/ctranslate2_engine.py), here before test_ctranslate.py imports it: threads that
# spin on cores shared with other processes (xdist workers, the servers of test_serving.py)
# slow CTranslate2 down by an order of magnitude
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# A command of the docs written as `python ...` (test_doc_examples.py,
# test_back_translation.py run them through bash) runs the interpreter running the tests,
# whichever `python` comes first on PATH and whether or not a virtual environment is
# activated: `python` and `python3` of a folder of the session, first on PATH, start
# sys.executable (a script, not a link: a link outside a venv's bin/ would not find its
# pyvenv.cfg, and so none of its packages)
if "TRANSFORMER_TEST_BIN" not in os.environ:
    os.environ["TRANSFORMER_TEST_BIN"] = tempfile.mkdtemp(prefix="transformer-bin-")
    atexit.register(shutil.rmtree, os.environ["TRANSFORMER_TEST_BIN"], True)
    for _name in ("python", "python3"):
        _path = os.path.join(os.environ["TRANSFORMER_TEST_BIN"], _name)
        with open(_path, "w", encoding="utf-8") as _f:
            _f.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        os.chmod(_path, 0o755)
    os.environ["PATH"] = os.environ["TRANSFORMER_TEST_BIN"] + os.pathsep + os.environ["PATH"]
from transformer_tf2.config import cli  # noqa: E402, F401  (its import turns oneDNN on)

# TensorFlow's C++ start-up lines, which TF_CPP_MIN_LOG_LEVEL cannot hide (quiet_start.NOISE), go
# to /dev/null while it loads: under pytest-xdist the controlling process imports this
# file before any output capture (a Python error of the import is still raised)
_stderr, _null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
os.dup2(_null, 2)
try:
    import tensorflow  # noqa: F401
finally:
    os.dup2(_stderr, 2)
    os.close(_stderr)
    os.close(_null)

import keras
import pytest
from filelock import FileLock

# Under pytest-xdist (one worker per core), each worker's TensorFlow runs its ops on one
# thread, not on a pool per core that the workers' pools then share
if os.environ.get("PYTEST_XDIST_WORKER"):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    threads = max(1, (os.cpu_count() or 1) // workers)
    tensorflow.config.threading.set_intra_op_parallelism_threads(threads)
    tensorflow.config.threading.set_inter_op_parallelism_threads(threads)
    # and so do the processes the tests start (scripts, servers, the doc commands), unless
    # they set their own: a pool per core in each would spin on the cores the others use
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(threads))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(threads))

import prepro
import train
from eval import evaluate
from helpers import run_json_script, tiny
from transformer_tf2.utils import files


@pytest.fixture(autouse=True)
def _float32_policy():
    """devices.setup_devices sets a global Keras dtype policy; reset it after each test."""
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(autouse=True)
def _graph_optimizer():
    """eval.py's and translate.py's main (translator.decoding_process) turn Grappler off
    for the process; a test that runs one in this process must not leave it off."""
    before = tensorflow.config.optimizer.get_experimental_options()
    yield
    tensorflow.config.optimizer.set_experimental_options(
        {"disable_meta_optimizer": before.get("disable_meta_optimizer", False)}
    )


def once(tmp_path_factory, name, build):
    """``build(folder)``'s result, built once per test session: under pytest-xdist the
    first worker to ask builds it in a folder of the session's base temp folder, which
    all workers share, while the others wait on a file lock; then they unpickle it. The
    tests that use these fixtures only read the folders (what they write goes to their
    own tmp_path)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' folders are popen-gw0, popen-gw1, ... in it
    folder, done = root / f"shared-{name}", root / f"shared-{name}.pickle"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            files.atomic_write(str(done), pickle.dumps(build(str(folder))))
    return pickle.loads(done.read_bytes())


# Whether a test selected for this session uses the ``mirrored`` fixture: its minute-long
# process then starts in the background as soon as the demo's prepro exists (below), so
# that no worker waits for it when the first such test comes
MIRRORED_WANTED = []


def pytest_collection_finish(session):
    MIRRORED_WANTED[:] = [any("mirrored" in item.fixturenames for item in session.items)]


@pytest.fixture(scope="session")
def demo_prepro(tmp_path_factory):
    """Hparams of a tiny run whose 300-pair demo corpus is preprocessed; nothing trained."""

    def build(folder):
        hp = tiny(folder)
        prepro.preprocess(hp)
        return hp

    hp = once(tmp_path_factory, "demo", build)
    if MIRRORED_WANTED == [True]:
        MIRRORED_WANTED[:] = [False]  # once per worker; the first worker there builds it
        threading.Thread(target=build_mirrored, args=(hp, tmp_path_factory), daemon=True).start()
    return hp


@pytest.fixture(scope="session")
def quick_run(demo_prepro, tmp_path_factory):
    """Three training steps, checkpointed after each, stopped before the first epoch ends
    (no dev BLEU): a run that eval, translate, export and average_checkpoints load in
    seconds. Returns (hparams, train's summary)."""

    def build(folder):
        hp = tiny(
            folder,
            data_dir=demo_prepro.data_dir,
            prepro_dir=demo_prepro.prepro_dir,
            max_steps=3,
            ckpt_every_steps=1,
        )
        return hp, train.train(hp)

    return once(tmp_path_factory, "quick", build)


@pytest.fixture(scope="session")
def run(demo_prepro, tmp_path_factory):
    """One small full run shared by the end-to-end tests: 3 epochs of training, eval.
    Returns (hparams, train's summary, evaluate's result)."""

    def build(folder):
        hp = tiny(
            folder,
            data_dir=demo_prepro.data_dir,
            prepro_dir=demo_prepro.prepro_dir,
            attention_layers="last",  # test_tensorboard_events reads the figures
        )
        summary = train.train(hp)
        return hp, summary, evaluate(hp.logdir, {"results_dir": hp.results_dir})

    return once(tmp_path_factory, "run", build)


@pytest.fixture(scope="session")
def mirrored(demo_prepro, tmp_path_factory):
    """The cases of mirrored_cases.py (MirroredStrategy steps on 2 logical CPUs), run once
    in one fresh process on the demo's prepro: {case: result}. Started in the background
    by demo_prepro: this waits for it (or builds it, if nothing had started it)."""
    return build_mirrored(demo_prepro, tmp_path_factory)


def build_mirrored(demo_prepro, tmp_path_factory) -> dict:
    keys = ("prepro_dir", "vocab_size", "d_model", "d_ff", "num_blocks", "num_heads", "position")
    values = {k: getattr(demo_prepro, k) for k in keys + ("tokens_per_batch",)}
    values["dropout_rate"] = 0.0
    code = "import sys; sys.path.insert(0, 'tests'); import mirrored_cases; mirrored_cases.main()"
    return once(tmp_path_factory, "mirrored", lambda _: run_json_script(code, json.dumps(values)))
