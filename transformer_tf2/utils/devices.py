"""Devices, precision and the distribution strategy of a run.

:func:`setup_devices` is called once by every script that builds a model: it enables GPU
memory growth, sets the global Keras dtype policy and picks the tf.distribute strategy.
In a multi-worker run, :func:`peer_lost_line` makes the loss of a worker one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys

import keras
import tensorflow as tf

from transformer_tf2.utils.errors import UserError


def cpu_bf16(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The native bfloat16 instruction sets of this x86 CPU ("AVX512-BF16", "AMX-BF16"),
    from its flags in ``cpuinfo``; "" where it has none or the file is missing."""
    try:
        with open(cpuinfo) as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return ""
    found = [name for flag, name in CPU_BF16_FLAGS if flag in flags]
    return " and ".join(found)


CPU_BF16_FLAGS = (("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX-BF16"))


def auto_precision(gpus, who: str) -> tuple[str, str]:
    """precision='auto': (the policy, why). A GPU of compute capability >= 7.0:
    mixed_float16. Training on a CPU with native bfloat16 (AVX512-BF16 or AMX-BF16):
    mixed_bfloat16. Else, and for decoding on a CPU: float32."""
    caps = [
        tf.config.experimental.get_device_details(g).get("compute_capability", (0, 0)) for g in gpus
    ]
    if caps:
        cap = f"{min(caps)[0]}.{min(caps)[1]}"
        return (
            "mixed_float16" if min(caps) >= (7, 0) else "float32"
        ), f"auto: GPU compute capability {cap}"
    bf16 = cpu_bf16()
    if who == "train" and bf16:
        return "mixed_bfloat16", f"auto: no GPU; training on a CPU with {bf16}"
    return "float32", "auto: no GPU"


def setup_devices(hp, who: str = "train"):
    """Enable GPU memory growth, pick the precision and the distribution strategy.

    precision='auto': see :func:`auto_precision`.
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
        precision, why = auto_precision(gpus, who)
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


def deal_rows(strategy, *batch):
    """With several replicas, the rows of each (N, T) tensor dealt out among them (row i
    to replica i mod replicas) as per-replica values; else the batch unchanged."""
    n = strategy.num_replicas_in_sync
    if n == 1:
        return batch
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tuple(x[ctx.replica_id_in_sync_group :: n] for x in batch)
    )


class Workers:
    """What the workers of a multi-worker run agree on, each in one small all-reduce of a
    scalar; in any other run (one process, whatever its replicas) the value itself."""

    def __init__(self, strategy, chief: bool):
        self.strategy, self.chief = strategy, chief
        self.multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        self._sum_fn = None

    def agree(self, flag: bool) -> bool:
        """``flag`` of any worker."""
        return self.sum(float(flag)) > 0

    def chief_value(self, value: float) -> float:
        """The chief's ``value``, on every worker: e.g. its clock, which the lr follows."""
        return self.sum(value if self.chief else 0.0)

    def sum(self, value: float) -> float:
        """``value`` summed over the workers."""
        if not self.multi_worker:
            return value
        if self._sum_fn is None:
            strategy = self.strategy
            self._sum_fn = tf.function(
                lambda x: strategy.reduce("SUM", strategy.run(tf.identity, (x,)), axis=None),
                autograph=False,
            )
        return float(self._sum_fn(tf.constant(value)))


# ---------------------------------------------------------------------------------------
# The loss of a worker (killed, out of memory, its machine gone) in a multi-worker run.
# TensorFlow's coordination service, which MultiWorkerMirroredStrategy starts, notices it
# by its missing heartbeats (measured with TensorFlow 2.21 on 127.0.0.1: 7-11 s after a
# SIGKILL when the chief survives) or by the broken connection (about a second when the
# chief is lost), and aborts the collectives: the survivor's current or next all-reduce
# raises one of these. A survivor busy with work of its own (the dev BLEU decoding) learns
# of it at its next all-reduce. train.py turns the error into one line (peer_lost_line)
# and exit status PEER_LOST_STATUS.
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.DeadlineExceededError,
    tf.errors.InternalError,
    tf.errors.CancelledError,
)
TASK_NAME = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")
PEER_LOST_STATUS = 75  # sysexits' EX_TEMPFAIL: run the same command again


def cluster_tasks(tf_config: str) -> tuple[dict[tuple[str, int], str], tuple[str, int]]:
    """TF_CONFIG's cluster as {(job, index): "host:port"}, and this process's (job, index)."""
    config = json.loads(tf_config)
    tasks = {
        (job, index): address
        for job, addresses in config.get("cluster", {}).items()
        for index, address in enumerate(addresses)
    }
    task = config.get("task", {})
    return tasks, (task.get("type", ""), int(task.get("index", 0)))


def lost_task(message: str, tasks: dict, own: tuple[str, int]) -> tuple[str, int] | None:
    """The first task of the cluster that ``message`` names ("/job:worker/replica:0/task:1"
    or "/job:worker/task:1") other than this process's own ``own``; None if there is none."""
    for job, index in TASK_NAME.findall(message):
        task = (job, int(index))
        if task in tasks and task != own:
            return task
    return None


def peer_lost_line(
    error: BaseException, logdir: str, step: int | None = None, tf_config: str | None = None
) -> str | None:
    """The one line for ``error`` if it tells of another worker's loss in the
    multi-worker run of ``tf_config`` (default: $TF_CONFIG), else None.

    ``step``: the updates this worker had finished, if known. The line names the lost
    worker and its address (from TF_CONFIG) and the checkpoint the restart resumes from."""
    tf_config = tf_config or os.environ.get("TF_CONFIG")
    if not tf_config or not isinstance(error, PEER_ERRORS):
        return None
    tasks, own = cluster_tasks(tf_config)
    task = lost_task(str(error), tasks, own)
    if task is None:
        return None
    when = f" after step {step}" if step is not None else ""
    latest = tf.train.latest_checkpoint(logdir) if logdir else None
    resume = (
        f"resume from the last checkpoint, {latest}"
        if latest  # else none yet, or the chief's logdir is not shared with this worker
        else f"resume from the newest checkpoint in {logdir}, if the chief wrote one"
    )
    return (
        f"{task[0]} {task[1]} ({tasks[task]}) of the multi-worker run was lost{when}; "
        f"restart all workers with the same command to {resume}"
    )


class LossScale:
    """Dynamic loss scaling (mixed_float16 only), over Keras' LossScaleOptimizer: the loss
    is multiplied by a scale before its gradients are taken, so that small float16
    gradients do not underflow; an update whose gradients overflow is skipped and halves
    the scale. With ``on`` False (float32, mixed_bfloat16) every method is the identity,
    so the update reads the same in every precision."""

    def __init__(self, optimizer, on: bool):
        self.optimizer, self.on = optimizer, on

    def scale(self, loss):
        """The loss whose gradients are taken."""
        return self.optimizer.scale_loss(loss) if self.on else loss

    def factor(self):
        """The current scale, float32 (1.0 when off)."""
        return tf.cast(self.optimizer.scale_loss(1.0), tf.float32) if self.on else 1.0

    def halve(self) -> None:
        """An update was skipped: halve the scale (what the optimizer does on overflow)."""
        if self.on:
            self.optimizer.step_counter.assign(0)
            self.optimizer.dynamic_scale.assign(self.optimizer.dynamic_scale * 0.5)

    def overflow(self, skipped, bad, scale):
        """1.0 where a skip was the scale's normal overflow (the loss itself finite and
        the scale still above 1), else 0.0."""
        if not self.on:
            return tf.constant(0.0)
        return skipped * tf.cast(tf.logical_and(bad[1] == 0.0, scale > 1.0), tf.float32)

    def value(self) -> float | None:
        """The scale now, for the logs (None when off)."""
        return float(self.optimizer.dynamic_scale.numpy()) if self.on else None


@contextlib.contextmanager
def out_of_memory(hp, what: str, src_shape, tgt_shape):
    """A ResourceExhaustedError on a batch becomes one UserError line naming the batch's
    shape and tokens_per_batch."""
    try:
        yield
    except tf.errors.ResourceExhaustedError:
        raise UserError(
            f"out of memory on {what} of shape {tuple(src_shape)} (source) / "
            f"{tuple(tgt_shape)} (target) under tokens_per_batch={hp.tokens_per_batch}; "
            f"train in a new --logdir with a lower --tokens_per_batch (and a higher "
            f"--accum_steps to keep the batch size), or on a device with more memory"
        ) from None
