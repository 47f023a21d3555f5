"""devices.py: precision, strategy and the one log line, on this machine's devices."""

import keras
import tensorflow as tf

from transformer_tf2.config import hparams
from transformer_tf2.utils import devices


def test_setup_devices_float32_on_the_default_strategy(capsys):
    hp = hparams.apply(hparams.Hparams(), {"precision": "float32"})
    strategy, precision = devices.setup_devices(hp, who="eval")
    assert precision == "float32"
    assert keras.mixed_precision.global_policy().name == "float32"
    assert strategy.num_replicas_in_sync == 1
    assert devices.is_chief(strategy)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("eval: TensorFlow sees ")
    assert "; running on " in err and "precision float32 (set by --precision)" in err
    assert "with 1 replica(s)" in err


def test_setup_devices_sets_the_global_policy(capsys):
    """(conftest resets the policy after every test.)"""
    hp = hparams.apply(hparams.Hparams(), {"precision": "mixed_bfloat16"})
    _, precision = devices.setup_devices(hp)
    assert precision == "mixed_bfloat16"
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    assert capsys.readouterr().err.startswith("train: TensorFlow sees ")


def test_auto_precision(capsys):
    """auto: mixed_float16 on GPUs of compute capability >= 7.0, float32 otherwise."""
    hp = hparams.apply(hparams.Hparams(), {"precision": "auto"})
    _, precision = devices.setup_devices(hp, who="translate")
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        assert precision == "float32"
        assert "(auto: no GPU)" in capsys.readouterr().err
    else:
        caps = [
            tf.config.experimental.get_device_details(g).get("compute_capability", (0, 0))
            for g in gpus
        ]
        assert precision == ("mixed_float16" if min(caps) >= (7, 0) else "float32")
