"""Shared fixtures: quiet TensorFlow, the float32 policy after each test, and three
session-wide fixtures of growing cost on the tiny demo corpus: preprocessed, trained for
three steps, trained for three epochs (plain helpers are in helpers.py)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
import cli  # noqa: E402, F401  (its import turns oneDNN on, as for the scripts)

# TensorFlow's C++ start-up lines, which TF_CPP_MIN_LOG_LEVEL cannot hide (cli.NOISE), go
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

import prepro
import train
from eval import evaluate
from helpers import tiny


@pytest.fixture(autouse=True)
def _float32_policy():
    """devices.setup_devices sets a global Keras dtype policy; reset it after each test."""
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="session")
def demo_prepro(tmp_path_factory):
    """Hparams of a tiny run whose 300-pair demo corpus is preprocessed; nothing trained."""
    hp = tiny(str(tmp_path_factory.mktemp("demo")))
    prepro.preprocess(hp)
    return hp


@pytest.fixture(scope="session")
def quick_run(demo_prepro, tmp_path_factory):
    """Three training steps, checkpointed after each, stopped before the first epoch ends
    (no dev BLEU): a run that eval, translate, export and average_checkpoints load in
    seconds. Returns (hparams, train's summary)."""
    hp = tiny(
        str(tmp_path_factory.mktemp("quick")),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        max_steps=3,
        ckpt_every_steps=1,
    )
    return hp, train.train(hp)


@pytest.fixture(scope="session")
def run(demo_prepro, tmp_path_factory):
    """One small full run shared by the end-to-end tests: 3 epochs of training, eval.
    Returns (hparams, train's summary, evaluate's result)."""
    hp = tiny(
        str(tmp_path_factory.mktemp("run")),
        data_dir=demo_prepro.data_dir,
        prepro_dir=demo_prepro.prepro_dir,
        attention_layers="last",  # test_tensorboard_events reads the figures
    )
    summary = train.train(hp)
    result = evaluate(hp.logdir, {"results_dir": hp.results_dir})
    return hp, summary, result
