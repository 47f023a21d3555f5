"""Shared test setup: quiet TensorFlow, repository root on sys.path, float32 policy."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest


@pytest.fixture(autouse=True)
def _float32_policy():
    """train.setup_devices sets a global Keras dtype policy; reset it after each test."""
    yield
    if "keras" in sys.modules:
        sys.modules["keras"].mixed_precision.set_global_policy("float32")


def tiny(tmp, **kw):
    """Hparams of a tiny run on a 300-pair demo corpus inside the folder tmp."""
    import hparams as H
    values = dict(corpus="demo", demo_size=300, data_dir=f"{tmp}/data", prepro_dir=f"{tmp}/prepro",
                  logdir=f"{tmp}/log", evaldir=f"{tmp}/eval", results_dir=f"{tmp}/results",
                  vocab_size=200, d_model=32, d_ff=64, num_blocks=1, num_heads=2,
                  tokens_per_batch=600, num_epochs=3, dev_bleu_sents=8, warmup_steps=20,
                  lr_schedule="kyubyong", lr=0.003,
                  eval_batch_size=64, max_len_extra=10)
    values.update(kw)
    return H.apply(H.Hparams(), values)


@pytest.fixture(scope="session")
def run(tmp_path_factory):
    """One small run shared by the end-to-end tests: prepro, 3 epochs of training, eval."""
    import eval as E
    import prepro
    import train as T
    tmp = str(tmp_path_factory.mktemp("run"))
    hp = tiny(tmp)
    prepro.preprocess(hp)
    summary = T.train(hp)
    result = E.evaluate(hp.logdir, {"results_dir": hp.results_dir})
    return hp, summary, result
