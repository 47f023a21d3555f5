"""Devices, precision and the distribution strategy of a run.

:func:`setup_devices` is called once by every script that builds a model: it enables GPU
memory growth, sets the global Keras dtype policy and picks the tf.distribute strategy.
"""

from __future__ import annotations

import os
import sys

import keras
import tensorflow as tf

import hparams


def setup_devices(hp: hparams.Hparams, who: str = "train"):
    """Enable GPU memory growth, pick the precision and the distribution strategy.

    precision='auto' is mixed_float16 on a GPU of compute capability >= 7.0, else float32.
    Several local GPUs give a MirroredStrategy; TF_CONFIG gives MultiWorkerMirroredStrategy.
    Logs one line, prefixed by ``who`` (the script). Returns (strategy, precision).
    """
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialized
            pass
    precision, why = hp.precision, "set by --precision"
    if precision == "auto":
        caps = [
            tf.config.experimental.get_device_details(g).get("compute_capability", (0, 0))
            for g in gpus
        ]
        precision = "mixed_float16" if caps and min(caps) >= (7, 0) else "float32"
        why = (
            f"auto: GPU compute capability {min(caps)[0]}.{min(caps)[1]}"
            if caps
            else "auto: no GPU"
        )
    keras.mixed_precision.set_global_policy(precision)
    if os.environ.get("TF_CONFIG"):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif len(gpus) > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    kind = (
        "MultiWorkerMirroredStrategy"
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        else type(strategy).__name__
    )
    seen = [f"{d.name} ({d.device_type})" for d in tf.config.list_physical_devices()]
    try:
        used = list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy
        used = [gpus[0].name if gpus else "the CPU"]
    print(
        f"{who}: TensorFlow sees {', '.join(seen)}; running on {', '.join(used)}; "
        f"GPU memory growth {'on' if gpus else 'n/a'}; precision {precision} ({why}); "
        f"{kind} with {strategy.num_replicas_in_sync} replica(s)",
        file=sys.stderr,
    )
    return strategy, precision


def is_chief(strategy) -> bool:
    """True unless this is a non-chief worker of a multi-worker cluster (TF_CONFIG)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief
