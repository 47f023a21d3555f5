"""Train the Transformer: Adam + a learning-rate schedule + label smoothing (section 5).

    python train.py                          # the demo preset
    python train.py --preset multi30k --max_minutes 30
    tensorboard --logdir log/

Checkpoints (tf.train.CheckpointManager) go to ``logdir``; a run resumes automatically from
the latest one (or from ``--ckpt PATH``) with the same step, optimizer state, lr schedule,
data position, dropout random state and wall time. After each epoch the dev set is scored
(loss, greedy BLEU on a fixed subset; under ``max_minutes`` BLEU within ``eval_share`` of
the time), its translations are written to ``evaldir``, and the best checkpoint by dev
BLEU is kept in ``logdir/best``; ``logdir/best.json`` names the default model (the best
checkpoint, or the average of the last ``average`` checkpoints where it wins on dev).

The wsd and linear schedules end at the budget: ``num_epochs``, ``max_steps`` or
``max_minutes`` (over all resumes), whichever binds (:class:`Budget`).

SIGINT or SIGTERM: the step ends, a checkpoint is written, the exit status is 130 or 143
(:class:`Interrupt`). One training per logdir (:class:`LogdirLock`). Updates with a NaN
or Inf are skipped, and ``max_bad_steps`` of them in a row stop the run (:class:`Health`).

A batch goes: TrainData.dataset -> Trainer.train_batch -> Trainer.train_step (compiled:
forward, label-smoothed loss, gradients, clipping, Adam) -> StepStats -> Window -> logs.
"""

from __future__ import annotations

import cli
import hparams

SCRIPT = cli.Script(
    "train",
    __doc__,
    fields=("data", "vocabulary", "batching", "model", "training", "decoding"),
    options={
        "ckpt": (
            "",
            "resume from this checkpoint, not the latest in logdir (after a damaged one)",
        ),
    },
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import contextlib
import dataclasses
import fcntl
import glob
import os
import shutil
import signal
import socket
import sys
import threading
import time
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

import checkpoints
import data_load
import decoding
import devices
import fast_ops
import files
import modules
import summaries
from hparams import UserError
from model import Transformer

LOG_EVERY = 50  # steps between TensorBoard scalar summaries


class StepStats(NamedTuple):
    """What one batch reports, summed over its target tokens (and over the replicas)."""

    loss_sum: float  # label-smoothed cross-entropy
    nll_sum: float  # plain cross-entropy
    tokens: float  # non-PAD target tokens
    correct: float  # tokens whose label has the largest logit
    grad_norm: float = 0.0  # global gradient norm of the update (0 without an update)
    skipped: float = 0.0  # 1: a NaN or Inf made every replica skip the update (counted)
    scale_skip: float = 0.0  # 1: skipped for a float16 loss-scale overflow (normal, not counted)
    stop: float = 0.0  # > 0: a worker was asked to stop (SIGINT/SIGTERM); all workers see it


class Window:
    """Sums of the StepStats since the last log, and the time they took."""

    def __init__(self):
        self.sums, self.start = np.zeros(4), time.time()

    def add(self, stats: StepStats) -> None:
        self.sums += stats[:4]

    def means(self) -> dict:
        loss, nll, tokens, correct = self.sums
        n = max(tokens, 1.0)
        return {
            "loss": loss / n,
            "nll": nll / n,
            "accuracy": correct / n,
            "tokens_per_sec": tokens / max(time.time() - self.start, 1e-9),
        }


def deal_rows(strategy, *batch):
    """With several replicas, the rows of each (N, T) tensor dealt out among them (row i
    to replica i mod replicas) as per-replica values; else the batch unchanged."""
    n = strategy.num_replicas_in_sync
    if n == 1:
        return batch
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tuple(x[ctx.replica_id_in_sync_group :: n] for x in batch)
    )


def check_logdir(hp: hparams.Hparams) -> None:
    """A logdir holding a run with another model shape, another batch plan or another
    vocabulary cannot be resumed."""
    path = os.path.join(hp.logdir, "hparams.json")
    if os.path.exists(path):
        hparams.check_same(
            hparams.load(path),
            hp,
            hparams.MODEL_KEYS + hparams.RESUME_KEYS,
            f"the checkpoint in {hp.logdir}",
            "pass a new --logdir, or the same settings to resume it",
        )
    data_load.check_vocab_fingerprint(hp)


class LogdirLock:
    """One training run per logdir: the chief holds an exclusive ``fcntl.flock`` on
    ``<logdir>/train.lock`` for the whole run (other workers of a multi-worker run take
    none). The kernel releases it when its owner ends, however it ends; the file names
    the owner (pid, host, start time, command) for the message a second run gets."""

    def __init__(self, logdir: str, active: bool = True):
        self.path, self.active, self.file = os.path.join(logdir, "train.lock"), active, None

    def __enter__(self):
        if not self.active:
            return self
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.file = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            owner = self.file.read().strip() or "a process that has not named itself yet"
            self.file.close()
            raise UserError(
                f"{os.path.dirname(self.path)} is in use by another training run ({owner}); "
                f"wait for it to end or stop it, or pass another --logdir"
            ) from None
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError):  # the lock holds even if its note cannot be written
            self.file.seek(0)
            self.file.truncate()
            self.file.write(
                f"pid {os.getpid()} on {socket.gethostname()}, started {started}: "
                f"{' '.join([os.path.basename(sys.executable)] + sys.argv)}\n"
            )
            self.file.flush()
        return self

    def __exit__(self, *exc):
        if self.file:
            self.file.close()  # releases the lock


class DevAbandoned(Exception):
    """Raised by :class:`Interrupt` when a signal arrives during the dev evaluation."""


class Interrupt:
    """SIGINT (Ctrl-C) and SIGTERM (a cluster scheduler, ``docker stop``) while training.

    The first signal lets the current step finish; the run then writes a checkpoint and
    :func:`train` returns with ``signal`` set (train.py exits with 128 + its number: 130,
    143). A dev evaluation in progress is abandoned at once (:class:`DevAbandoned`; it
    runs again on resume). A second signal exits at once without a checkpoint
    (``os._exit``): the newest complete checkpoint stays loadable, as after a SIGKILL.
    Handlers are installed only in the main thread, and the previous ones come back on exit.
    """

    def __init__(self):
        self.signum, self.abandonable, self.previous = None, False, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def _handle(self, signum, frame) -> None:
        # os.write: a print here could re-enter a write the main thread is in the middle of
        if self.signum is not None:
            name = signal.Signals(signum).name
            os.write(2, f"\ntrain: second {name}: exiting at once\n".encode())
            os._exit(128 + signum)
        self.signum = signum
        os.write(
            2,
            f"\ntrain: {self.name}: finishing the step and writing a checkpoint "
            f"(send it again to exit at once)\n".encode(),
        )
        if self.abandonable:
            raise DevAbandoned

    @contextlib.contextmanager
    def abandonable_region(self, allowed: bool = True):
        """Inside, a signal raises :class:`DevAbandoned` (when ``allowed``)."""
        self.abandonable = allowed
        try:
            yield
        finally:
            self.abandonable = False


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


class Trainer:
    """Model, optimizers, checkpoints and the compiled train step of one run."""

    def __init__(self, hp: hparams.Hparams, tok, strategy, precision: str):
        self.hp, self.tok, self.strategy = hp, tok, strategy
        self.replicas = strategy.num_replicas_in_sync
        self.multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        with strategy.scope():
            self.model = Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
            self._build_optimizers(loss_scaling=precision == "mixed_float16")
        self._build_checkpoints()
        self._build_steps()

    def _build_optimizers(self, loss_scaling: bool) -> None:
        """Adam with the run's schedule (5.3) for the model's variables, and one more Adam
        per optimizer group of the model variant (the Weighted Transformer's kappa and
        alpha) with that group's schedule."""
        hp, model = self.hp, self.model
        adam = dict(beta_1=hp.adam_beta1, beta_2=hp.adam_beta2, epsilon=hp.adam_epsilon)
        self.schedule = modules.TransformerSchedule(
            hp.lr_schedule, hp.d_model, hp.warmup_steps, hp.lr, hp.cooldown
        )
        self.optimizer = self.adam = fast_ops.Adam(self.schedule, **adam)
        if loss_scaling:
            self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
        self.loss_scale = LossScale(self.optimizer, loss_scaling)
        groups = model.variant.optimizer_groups(model, hp)
        self.schedules = {name: schedule for name, (_, schedule) in groups.items()}
        self.group_of = {id(v): name for name, (vs, _) in groups.items() for v in vs}
        self.group_optimizers = {}
        for name, (variables, schedule) in groups.items():
            self.group_optimizers[name] = fast_ops.Adam(schedule, **adam)
            self.group_optimizers[name].build(variables)
        main = [v for v in model.trainable_variables if id(v) not in self.group_of]
        self.optimizer.build(main)
        for optimizer in [self.adam, *self.group_optimizers.values()]:
            optimizer.summed = True  # apply_gradients sums the replicas' gradients

    # items a checkpoint written before they existed lacks (restored when present)
    OPTIONAL_ITEMS = ("dropout_rng", "skipped_steps", "budget_used", "seconds", "eval_seconds")

    def _build_checkpoints(self) -> None:
        """The checkpoint holds the model, the optimizers, the position in the data and
        the dropout layers' random state (so that a resumed run draws the masks the
        uninterrupted run would have drawn). Multi-worker: every worker takes part in a
        save (the variables may need a collective read), but only the chief writes into
        logdir; the others write to a private temporary folder that is deleted right
        after (see save())."""
        hp = self.hp
        # host-side counters, outside the strategy scope: every worker keeps the same ones
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch_in_epoch")
        self.best_bleu = tf.Variable(-1.0, dtype=tf.float32, trainable=False)
        self.bad_epochs = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
        # the budget: the fraction used (read by the wsd/linear schedules, never falls), the
        # run's wall time and the part of it spent on dev evaluation, over all resumes
        self.budget_used = tf.Variable(0.0, trainable=False, name="budget_used")
        for schedule in [self.schedule, *self.schedules.values()]:
            schedule.progress = self.budget_used
        self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.eval_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.clock = time.time()  # when this process's share of ``seconds`` began
        # each keras Dropout layer's SeedGenerator state (2,) int64, in construction order
        self.rng_states = [v for v in self.model.variables if v.name == "seed_generator_state"]
        groups = {f"{name}_optimizer": opt for name, opt in self.group_optimizers.items()}
        self.items = dict(
            model=self.model,
            optimizer=self.optimizer,
            epoch=self.epoch,
            batch_in_epoch=self.batch_in_epoch,
            best_bleu=self.best_bleu,
            bad_epochs=self.bad_epochs,
            skipped_steps=self.skipped_steps,
            budget_used=self.budget_used,
            seconds=self.seconds,
            eval_seconds=self.eval_seconds,
            dropout_rng=[v.value for v in self.rng_states],
            **groups,
        )
        self.ckpt = tf.train.Checkpoint(**self.items)
        self.chief = devices.is_chief(self.strategy)
        self.last_saved = None  # the chief's path of this run's newest checkpoint
        target = hp.logdir
        if not self.chief:
            target = os.path.join(
                hp.logdir, f".worker-{self.strategy.cluster_resolver.task_id}-tmp"
            )
        self.manager = tf.train.CheckpointManager(self.ckpt, target, hp.keep_ckpts)
        self.best = tf.train.CheckpointManager(self.ckpt, os.path.join(target, "best"), 1)

    def _build_steps(self) -> None:
        """Compile the train step (and the accumulation steps when accum_steps > 1)."""
        hp = self.hp
        # one trace for every batch shape (several replicas get per-replica values instead);
        # no autograph: the step has no Python control flow on tensors, and converting its
        # code took half the time of tracing it
        self._step = self._distributed(self._distributed_step)
        # XLA: the whole step on one replica; on several, the gradients alone (gradients())
        self._compiled, self._gradients = self._replica_step, self.gradients
        if hp.jit_compile and self.replicas == 1:
            self._compiled = fast_ops.xla_function(self._replica_step)
        elif hp.jit_compile:
            self._gradients = fast_ops.xla_function(self.gradients)
        # gradient accumulation: accum_steps batches make one update; updates happen only
        # on batch boundaries so checkpoints never hold a partial sum. With several
        # replicas each keeps its own sums (ON_READ variables: a replica reads and adds to
        # its copy) and the update sums them across the replicas, as for one batch
        self.pending = 0
        if hp.accum_steps > 1:
            local = tf.VariableSynchronization.ON_READ
            if self.replicas == 1:
                local = tf.VariableSynchronization.AUTO  # a plain variable

            def local_sum(shape, dtype=tf.float32):
                return tf.Variable(tf.zeros(shape, dtype), trainable=False, synchronization=local)

            with self.strategy.scope():
                self.accum = [local_sum(v.shape, v.dtype) for v in self.model.trainable_variables]
                self.accum_tokens, self.accum_loss = local_sum([]), local_sum([])
            accumulate = self._accumulate
            if hp.jit_compile:
                accumulate = fast_ops.xla_function(self._accumulate)
            self._accumulate_fn = self._distributed(lambda *b: self._summed(accumulate, b))
            self._apply_fn = tf.function(
                lambda: self._summed(self._apply_accumulated, ()), autograph=False
            )
            self._clear_fn = tf.function(
                lambda: self.strategy.run(self._clear_accumulators), autograph=False
            )

    def _distributed(self, fn):
        """tf.function of ``fn(*batch, stop)``: one trace for every batch shape on one
        replica; on several, per-replica values (deal_rows) retraced as little as may be."""
        if self.replicas > 1:
            return tf.function(fn, reduce_retracing=True, autograph=False)
        spec = self.batch_spec() + [tf.TensorSpec([], tf.float32)]
        return tf.function(fn, input_signature=spec, autograph=False)

    def _summed(self, fn, args):
        """``fn(*args)`` on every replica, its tuple of scalars summed over the replicas."""
        stacked = self.strategy.run(lambda *a: tf.stack(fn(*a)), args)
        return self.strategy.reduce("SUM", stacked, axis=None)

    def batch_spec(self) -> list:
        """The tensors of a batch: data_load.batch_spec."""
        return data_load.batch_spec(self.hp)

    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    # -- the update: batch -> loss -> gradients -> Adam -------------------------------------
    def train_step(self, *batch, stop: bool = False) -> StepStats:
        """One update on one batch (:meth:`batch_spec`); its StepStats as numbers.
        ``stop``: this worker was asked to stop; the all-reduced StepStats.stop tells
        every worker."""
        batch = deal_rows(self.strategy, *batch)
        return StepStats(*(float(x) for x in self._step(*batch, tf.constant(float(stop)))))

    def _distributed_step(self, *batch_and_stop) -> StepStats:
        """The replicas' StepStats summed in one all-reduce of a stacked vector."""
        total = StepStats(*tf.unstack(self._summed(self._compiled, batch_and_stop)))
        n = float(self.replicas)  # the mean of what every replica reports alike
        mean = dict(grad_norm=total.grad_norm, skipped=total.skipped, scale_skip=total.scale_skip)
        return total._replace(**{k: v / n for k, v in mean.items()})

    def _replica_step(self, *batch_and_stop) -> StepStats:
        """One update from this replica's rows, the path of every training batch:

        1. the label-smoothed loss (5.4) per target token of the whole batch (every
           replica's tokens, so that the replicas' summed gradients are the one-device
           gradient), plus the variant's extra term, once in all;
        2. its gradients (of the scaled loss under mixed_float16: :class:`LossScale`);
        3. :meth:`apply_gradients`: skipped if not finite, else clipped and applied.
        Returns the batch's StepStats, with the update's and ``stop`` (this worker was
        asked to stop)."""
        *batch, stop = batch_and_stop
        real = tf.cast(tf.not_equal(batch[2], data_load.PAD_ID), tf.float32)
        tokens = self._sum_replicas(tf.reduce_sum(real))  # the whole batch's target tokens
        sums, loss, grads = self._gradients(tokens, *batch)
        norm, skipped, scale_skip = self.apply_gradients(grads, loss)
        return sums._replace(grad_norm=norm, skipped=skipped, scale_skip=scale_skip, stop=stop)

    def gradients(self, tokens, *batch):
        """(StepStats of this replica's rows, their share of the loss per target token of
        the batch (``tokens`` in all), its gradients): steps 1 and 2 of :meth:`_replica_step`,
        which XLA compiles alone with several replicas (the all-reduces and the update may
        not be inside a function that strategy.run calls)."""
        with tf.GradientTape() as tape:
            extras = {}  # what the layers report for this pass (the ponder cost)
            sums = self.loss_sums(batch, training=True, extras=extras)
            loss = sums.loss_sum / tf.maximum(tokens, 1.0)
            loss += self.model.variant.extra_loss(self.model, extras) / self.replicas
            scaled = self.loss_scale.scale(loss)
        return sums, loss, tape.gradient(scaled, self.model.trainable_variables)

    def _sum_replicas(self, x):
        """x summed over the replicas (x itself on one device)."""
        return tf.distribute.get_replica_context().all_reduce("sum", x) if self.replicas > 1 else x

    def loss_sums(self, batch, training, extras=None) -> StepStats:
        """Label-smoothed loss (5.4), cross-entropy and correct tokens summed over the
        non-PAD targets of ``batch`` (:meth:`batch_spec`), and their count; ``extras``
        receives what the layers report. With a context, the encoder reads the sources in
        it, and the decoder the targets (Transformer.forward)."""
        src, dec_in, labels, *context = batch
        hidden = self.model.forward(src, dec_in, *context, training=training, extras=extras)
        real = tf.not_equal(labels, data_load.PAD_ID)
        if self.hp.jit_compile:  # XLA needs static shapes: every position, PAD weighted 0
            hidden = tf.reshape(hidden, (-1, self.model.d_model))
            labels, weight = tf.reshape(labels, (-1,)), tf.cast(tf.reshape(real, (-1,)), tf.float32)
        else:  # logits only for the real target positions
            hidden, labels = tf.boolean_mask(hidden, real), tf.boolean_mask(labels, real)
            weight = tf.ones_like(labels, tf.float32)
        eps = self.hp.label_smoothing
        losses, nll, correct = modules.cross_entropy_terms(self.model.logits(hidden), labels, eps)
        return StepStats(*[tf.reduce_sum(x * weight) for x in (losses, nll, weight, correct)])

    def apply_gradients(self, grads, loss):
        """The gradients' global norm; if it or the loss is a NaN or an Inf on any
        replica, no update anywhere (no weight, optimizer slot or step count changes, and
        the loss scale halves); else clipped to ``clip_norm`` (if set) and applied by Adam
        and the variant's optimizer groups. Returns (global gradient norm (this replica's
        share), skipped, scale_skip) as float32 scalars: scale_skip marks a skip that was
        the loss scale's normal overflow (not counted as a bad step)."""
        scale = self.loss_scale.factor()
        grads = self.sum_gradients(grads)
        norm = tf.linalg.global_norm(grads) / scale
        loss = tf.cast(loss, tf.float32)
        # all-reduced, so every replica skips the same updates
        bad = tf.cast(tf.logical_not(tf.math.is_finite(tf.stack([norm, loss]))), tf.float32)
        bad = self._sum_replicas(bad)
        finite = tf.equal(bad[0] + bad[1], 0.0)
        if self.hp.clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self.hp.clip_norm * scale, norm * scale)
        self._update_or_skip(finite, list(grads), scale)
        skipped = 1.0 - tf.cast(finite, tf.float32)
        overflow = self.loss_scale.overflow(skipped, bad, scale)
        return norm, skipped - overflow, overflow

    def sum_gradients(self, grads) -> list:
        """The step's gradient: the sum of the replicas' gradients (None where a variable
        has none), on every replica; the gradients themselves on one device.

        It is the one all-reduce of the gradients in the step: the optimizers are told
        (``summed``) not to sum them again, so the global norm that the clip and the logs
        read costs no communication of its own. Clipping that sum by min(1, c / |g|) is
        the same as scaling every replica's share by that factor before the sum."""
        grads = list(grads)
        if self.replicas == 1:
            return grads
        present = [i for i, g in enumerate(grads) if g is not None]
        summed = self._sum_replicas([grads[i] for i in present])
        for i, g in zip(present, summed):
            grads[i] = g
        return grads

    def _update_or_skip(self, finite, grads, scale) -> None:
        """The update of every optimizer if ``finite`` (the same on every replica), else
        the loss scale's halving. With several replicas the condition is evaluated in
        cross-replica context, where the strategy updates variables through merge_call
        (a branch may not hold a merge_call in replica context)."""
        variables = self.model.trainable_variables

        def update(grads):
            pairs = list(zip(grads, variables))
            self.optimizer.apply_gradients([(g, v) for g, v in pairs if id(v) not in self.group_of])
            for name, optimizer in self.group_optimizers.items():
                group = [(g, v) for g, v in pairs if self.group_of.get(id(v)) == name]
                optimizer.apply_gradients([(g / scale, v) for g, v in group])  # unscaled here

        if tf.__internal__.distribute.strategy_supports_no_merge_call():
            tf.cond(finite, lambda: update(grads), self.loss_scale.halve)
            return

        def cross_replica(strategy, finite, grads):
            finite = strategy.experimental_local_results(finite)[0]  # equal on every replica
            tf.cond(
                finite,
                lambda: strategy.extended.call_for_each_replica(update, (grads,)),
                self.loss_scale.halve,
            )

        tf.distribute.get_replica_context().merge_call(cross_replica, args=(finite, grads))

    # -- gradient accumulation ------------------------------------------------------------
    def train_batch(self, *batch, stop: bool = False) -> tuple[StepStats, bool]:
        """Train on one batch (:meth:`batch_spec`): an update, or with accum_steps > 1 one
        accumulation that updates every accum_steps batches. Returns (stats, whether the
        weights were updated: not for an accumulation, nor for a skipped update)."""
        if self.hp.accum_steps <= 1:
            stats = self.train_step(*batch, stop=stop)
            return stats, not (stats.skipped or stats.scale_skip)
        if self.pending == 0:  # where drop_partial() returns to
            self.rng_at_update = [v.numpy() for v in self.rng_states]
        batch = deal_rows(self.strategy, *batch)
        stats = StepStats(
            *(float(x) for x in self._accumulate_fn(*batch, tf.constant(float(stop))))
        )
        self.pending += 1
        if self.pending < self.hp.accum_steps:
            return stats, False
        update = self.flush()
        stats = stats._replace(
            grad_norm=update.grad_norm, skipped=update.skipped, scale_skip=update.scale_skip
        )
        return stats, not (update.skipped or update.scale_skip)

    def _accumulate(self, *batch_and_stop) -> StepStats:
        """Add this replica's rows' gradients of the summed loss to its accumulators;
        their StepStats, with ``stop`` as in :meth:`_replica_step`."""
        *batch, stop = batch_and_stop
        with tf.GradientTape() as tape:
            extras = {}
            sums = self.loss_sums(batch, training=True, extras=extras)
            # divided by the token budget so that float16 gradients keep the magnitude
            # of a per-token mean (the update divides by the real token count)
            per_budget = sums.loss_sum / float(self.hp.tokens_per_batch)
            # the variant's term, weighted by the batch's tokens: once per update in all
            extra = self.model.variant.extra_loss(self.model, extras) * sums.tokens
            per_budget += extra / float(self.hp.tokens_per_batch)
            scaled = self.loss_scale.scale(per_budget)
        grads = tape.gradient(scaled, self.model.trainable_variables)
        for acc, grad in zip(self.accum, grads):
            acc.assign_add(tf.convert_to_tensor(grad))
        self.accum_tokens.assign_add(sums.tokens)
        self.accum_loss.assign_add(per_budget)
        return sums._replace(stop=stop)

    def _apply_accumulated(self):
        """One update with the accumulated gradients (summed over the replicas in
        apply_gradients) over all their target tokens: (grad norm, skipped, scale_skip)
        divided by the replicas, for the sum over them that follows."""
        tokens = self._sum_replicas(self.accum_tokens.read_value())
        tokens = tf.maximum(tokens, 1.0) / float(self.hp.tokens_per_batch)
        grads = [acc.read_value() / tokens for acc in self.accum]
        result = self.apply_gradients(grads, self.accum_loss.read_value())
        with tf.control_dependencies(result):
            self._clear_accumulators()
        return tuple(x / float(self.replicas) for x in result)

    def _clear_accumulators(self) -> None:
        for acc in self.accum:
            acc.assign(tf.zeros_like(acc))
        self.accum_tokens.assign(0.0)
        self.accum_loss.assign(0.0)

    def flush(self) -> StepStats:
        """Apply a partial accumulation (at the end of an epoch); its update's StepStats
        (grad_norm, skipped, scale_skip; all 0 when nothing was pending)."""
        if not self.pending:
            return StepStats(0.0, 0.0, 0.0, 0.0)
        self.pending = 0
        norm, skipped, scale_skip = (float(x) for x in self._apply_fn())
        return StepStats(0.0, 0.0, 0.0, 0.0, norm, skipped, scale_skip)

    def drop_partial(self) -> int:
        """Forget a partial accumulation (before an interrupted run's checkpoint): the
        data position and the dropout random state go back to the last update, so that
        a resumed run trains those batches again as the uninterrupted run would have.
        Returns the number of batches dropped."""
        dropped, self.pending = self.pending, 0
        if dropped:
            self._clear_fn()
            self.batch_in_epoch.assign_add(-dropped)
            for v, value in zip(self.rng_states, self.rng_at_update):
                v.assign(value)
        return dropped

    # -- checkpoints and the dev loss -----------------------------------------------------
    @property
    def position(self) -> tuple[int, int, int]:
        """(step, epoch, batch in epoch): what a checkpoint saved now would resume at."""
        return self.step, int(self.epoch), int(self.batch_in_epoch)

    def save(self, best: bool = False) -> str:
        """Checkpoint at the current step (into logdir/best too when ``best``); returns the
        chief's path. Non-chief workers save to their temporary folder and delete it.
        A full disk is one UserError line; the previous checkpoints stay intact."""
        self.seconds.assign(self.seconds_used())
        self.clock = time.time()
        target = os.path.join(self.manager.directory, f"ckpt-{self.step}")
        kept = f"the previous checkpoint {self.latest_checkpoint} is intact"
        try:
            with files.reporting(target, kept if self.latest_checkpoint else "nothing is lost"):
                path = self.manager.save(checkpoint_number=self.step)
                if best:
                    self.best.save(checkpoint_number=self.step)
        except UserError:
            remove_partial_checkpoints(self.manager.directory)
            raise
        if not self.chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
            path = os.path.join(self.hp.logdir, os.path.basename(path))
        self.last_saved = path
        return path

    def seconds_used(self) -> float:
        """Wall time of the run so far, over all its resumes (checkpointed)."""
        return float(self.seconds) + time.time() - self.clock

    @property
    def latest_checkpoint(self):
        """The newest checkpoint in logdir (the chief's, for every worker)."""
        return tf.train.latest_checkpoint(self.hp.logdir)

    def restore(self, ckpt: str = "") -> bool:
        """Restore ``ckpt``, or else the newest checkpoint in logdir (if any). A damaged
        checkpoint is one UserError line naming the file and the previous checkpoint."""
        path = ckpt or self.latest_checkpoint
        if not path:
            return False
        present = checkpoints.checkpoint_items(path)
        optional = self.OPTIONAL_ITEMS
        items = {k: v for k, v in self.items.items() if k in present or k not in optional}
        checkpoints.restore_checkpoint(
            tf.train.Checkpoint(**items),
            path,
            "was it written with another --precision? resume with the same settings or use a "
            "new --logdir",
            partial=False,
        )
        self.clock = time.time()
        print(
            f"train: resumed from {path} at step {self.step}, epoch {int(self.epoch) + 1}, "
            f"batch {int(self.batch_in_epoch)}"
        )
        if "dropout_rng" not in present and self.rng_states:
            print(f"train: {path} holds no dropout random state (an older checkpoint): fresh masks")
        return True

    def agree(self, flag: bool) -> bool:
        """``flag`` of any worker (one small all-reduce in a multi-worker run)."""
        return self._sum(float(flag)) > 0

    def chief_value(self, value: float) -> float:
        """The chief's ``value``, on every worker (one small all-reduce in a multi-worker
        run; the value itself elsewhere): e.g. its clock, which the lr follows."""
        return self._sum(value if self.chief else 0.0)

    def _sum(self, value: float) -> float:
        if not self.multi_worker:
            return value
        fn = getattr(self, "_sum_fn", None)
        if fn is None:
            strategy = self.strategy
            fn = self._sum_fn = tf.function(
                lambda x: strategy.reduce("SUM", strategy.run(tf.identity, (x,)), axis=None),
                autograph=False,
            )
        return float(fn(tf.constant(value)))

    def dev_loss(self, corpus, batch_size: int) -> tuple[float, float]:
        """Per-token (label-smoothed loss, cross-entropy) on a dev corpus, no dropout."""
        fn = getattr(self, "_dev_fn", None)
        if fn is None:
            fn = self._dev_fn = tf.function(
                lambda *batch: tf.stack(self.loss_sums(batch, False)[:4]),
                input_signature=self.batch_spec(),
                autograph=False,
            )
        order = np.argsort(corpus.src_lens, kind="stable")
        total = np.zeros(4)
        (depth, target_depth), hp = data_load.context_depths(self.hp), self.hp
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = data_load.build_batch(
                corpus, idx, 1, 0, depth, hp.maxlen1, target_depth, hp.maxlen2
            )
            with out_of_memory(self.hp, "a dev batch", batch[0].shape, batch[1].shape):
                total += fn(*batch).numpy()
        return total[0] / max(total[2], 1), total[1] / max(total[2], 1)


def remove_partial_checkpoints(folder: str) -> None:
    """Remove what TensorFlow leaves of a checkpoint whose writing failed or was killed
    (``ckpt-N_temp`` folders, in ``folder`` and its ``best``); complete ones are kept."""
    for path in glob.glob(os.path.join(folder, "ckpt-*_temp")) + glob.glob(
        os.path.join(folder, "best", "ckpt-*_temp")
    ):
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def out_of_memory(hp: hparams.Hparams, what: str, src_shape, tgt_shape):
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


# ---------------------------------------------------------------------------------------
# The run: epochs of batches, logs, dev evaluation, checkpoints
# ---------------------------------------------------------------------------------------
class Dev:
    """The dev set of a run: the encoded corpus (dev loss, all of it) and the raw
    sentences decoded for dev BLEU (a fixed subset: the first ``dev_bleu_sents``).

    ``max_len``: one length limit for the whole subset, its longest reference (in target
    tokens) + 10, so that an untrained model's runaway outputs stop there rather than at
    each source's length + max_len_extra."""

    def __init__(self, hp: hparams.Hparams, tok=None):
        self.corpus = data_load.load_corpus(hp, "dev")
        src, ref = data_load.read_raw(hp, "dev")
        n = len(src) if hp.dev_bleu_sents <= 0 else min(hp.dev_bleu_sents, len(src))
        self.src, self.ref = src[:n], ref[:n]
        self.docs = self.corpus.docs[:n]  # a memory model reads them in document order
        self.max_len = 0
        if tok is not None and self.ref:
            self.max_len = max(len(ids) for ids in tok.encode_tgt(self.ref)) + 10

    def translator(self, model, tok, hp: hparams.Hparams) -> decoding.Translator:
        """The run's decoding settings under the subset's length limit."""
        limit = min(hp.max_len, self.max_len) if hp.max_len else self.max_len
        return decoding.Translator(model, tok, hparams.apply(hp, {"max_len": limit}))


class Budget:
    """What bounds a run, and the fraction of it used (README "Training on a budget").

    The run ends at whichever comes first: ``num_epochs`` of ``updates_per_epoch``
    updates, ``max_steps``, or ``max_minutes`` of wall time summed over its resumes,
    dev evaluation included (Trainer.seconds_used). The fraction used is the larger of
    steps / planned steps and seconds / (budget - reserve), where ``reserve`` is the
    time the run's final evaluation will take (twice that with ``average``): before
    the first dev evaluation with BLEU, :meth:`estimate`; after it, that evaluation's
    duration. The wsd and linear schedules read the fraction from
    ``trainer.budget_used``, which only ever grows, so the lr never rises on a resume.
    """

    def __init__(self, hp: hparams.Hparams, trainer: Trainer, updates_per_epoch: int):
        self.hp, self.trainer = hp, trainer
        steps = hp.num_epochs * updates_per_epoch
        self.steps = min(steps, hp.max_steps) if hp.max_steps else steps
        self.seconds = 60.0 * hp.max_minutes
        self.reserve = 0.0
        self.follow = hp.lr_schedule in modules.BUDGET_SCHEDULES
        # wsd with --average N: N - 1 checkpoints inside the cooldown, at the fractions
        # 1 - cooldown * k / N (k = N - 1, ..., 1), and the run's end saves the last one
        n = hp.average if hp.lr_schedule == "wsd" else 0
        self.points = [1.0 - hp.cooldown * k / n for k in range(n - 1, 0, -1)]
        self.checked = float(trainer.budget_used)  # the fraction at the last check

    def estimate(self, dev: Dev, translator: decoding.Translator) -> float:
        """The seconds a dev evaluation with BLEU takes, before any has run (a run under
        ``max_minutes`` must keep them back from its first step, or a short run ends its
        budget before an evaluation that takes as long again). Timed here: the dev loss
        (all of dev), then one batch of the dev BLEU subset decoded twice (the first call
        traces the decoder, which this process then keeps), the second call's time
        scaled to the subset's batches. An untrained model's outputs run to the subset's
        length limit, so early in a run this is about the most the evaluation takes.
        The chief's figure, on every worker; the time counts as dev evaluation."""
        trainer, hp = self.trainer, self.hp
        t0 = time.time()
        trainer.dev_loss(dev.corpus, max(1, hp.tokens_per_batch // 64))
        seconds = time.time() - t0
        n = min(len(dev.src), hp.eval_batch_size)
        if n:
            translator.translate(dev.src[:n], dev.docs[:n])
            t1 = time.time()
            translator.translate(dev.src[:n], dev.docs[:n])
            seconds += (time.time() - t1) * -(-len(dev.src) // n)
        trainer.eval_seconds.assign_add(time.time() - t0)
        return trainer.chief_value(seconds)

    def fraction(self, step: int) -> float:
        """The fraction of the budget used after ``step`` updates (by the chief's clock
        in a multi-worker run: the workers' lr must agree)."""
        used = step / max(self.steps, 1)
        if self.seconds:
            spent = self.trainer.chief_value(self.trainer.seconds_used())
            used = max(used, spent / max(self.seconds - self.reserve, 1.0))
        return min(used, 1.0)

    def checkpoint_due(self, step: int) -> bool:
        """Whether the update that made ``step`` passed one of :attr:`points`: the run's
        last ``average`` checkpoints then lie evenly in the cooldown, whatever the number
        of epochs (a time-bounded run of a few long epochs would otherwise average
        checkpoints from before the decay)."""
        if not self.points:
            return False
        before, self.checked = self.checked, self.fraction(step)
        return any(before < p <= self.checked for p in self.points)

    def before_update(self) -> None:
        """Set ``budget_used`` for the next update, which the schedule reads."""
        if self.follow:
            used = max(float(self.trainer.budget_used), self.fraction(self.trainer.step))
            self.trainer.budget_used.assign(used)

    def out_of_time(self) -> bool:
        """The time left is what the final evaluation needs (by the chief's clock)."""
        if not self.seconds:
            return False
        spent = self.trainer.chief_value(self.trainer.seconds_used())
        return spent + self.reserve >= self.seconds

    def bleu_due(self, last_seconds: float) -> bool:
        """Under max_minutes, an epoch's dev BLEU runs only while evaluation, this one
        included (it takes about ``last_seconds``), stays within ``eval_share`` of the
        time used; the run's final evaluation always runs."""
        if not self.seconds:
            return True
        spent = self.trainer.chief_value(self.trainer.seconds_used())
        evals = float(self.trainer.eval_seconds)
        return evals + last_seconds <= self.hp.eval_share * (spent + last_seconds)


class Health:
    """Skipped updates of a run: each NaN/Inf skip is counted (train/skipped_steps, also
    in the checkpoint) and reported; ``max_bad_steps`` of them in a row stop the run with
    a UserError naming the likely causes, without a new checkpoint (the last one holds the
    last good weights). Loss-scale overflow skips (mixed_float16) are normal: not counted."""

    def __init__(self, hp: hparams.Hparams, trainer: Trainer, writer):
        self.hp, self.trainer, self.writer, self.in_a_row = hp, trainer, writer, 0

    def after(self, stats: StepStats, updated: bool) -> None:
        trainer, hp = self.trainer, self.hp
        if updated:
            self.in_a_row = 0
        if not stats.skipped:
            return
        trainer.skipped_steps.assign_add(1)
        self.in_a_row += 1
        step, batch = trainer.step, int(trainer.batch_in_epoch)
        tqdm.write(
            f"train: a NaN or Inf loss or gradient after step {step} (epoch "
            f"{int(trainer.epoch) + 1}, batch {batch}): update skipped "
            f"({self.in_a_row} in a row)",
            file=sys.stderr,
        )
        with summaries_at(self.writer, step, hp):
            summaries.skipped_updates(int(trainer.skipped_steps), trainer.loss_scale.value())
        if hp.max_bad_steps and self.in_a_row >= hp.max_bad_steps:
            raise UserError(
                f"{self.in_a_row} updates in a row after step {step} had a NaN or Inf loss or "
                f"gradient and were skipped (max_bad_steps={hp.max_bad_steps}); likely causes: "
                f"a learning rate too high (--lr, --warmup_steps), float16 overflow (--precision "
                f"float32 or mixed_bfloat16), or bad data (epoch {int(trainer.epoch) + 1}, "
                f"batches {batch - self.in_a_row + 1}-{batch}); the last good checkpoint "
                f"{trainer.latest_checkpoint} is kept"
            )


@contextlib.contextmanager
def summaries_at(writer, step: int, hp: hparams.Hparams):
    """``writer.as_default(step)``; a full disk under its events is one UserError line."""
    events = os.path.join(hp.logdir, "train")
    with files.reporting(events, "the checkpoints are kept"):
        with writer.as_default(step=step):
            yield
        writer.flush()  # here, where a write error is reported


def train(hp: hparams.Hparams, ckpt: str = "") -> dict:
    """Run (or resume, from ``ckpt`` or the newest checkpoint) training; returns a summary
    dict (steps, last dev BLEU, ...; ``signal``: the signal that stopped it, or None).

    The chief holds ``<logdir>/train.lock`` for the whole run (:class:`LogdirLock`), and
    SIGINT/SIGTERM stop the run at a checkpoint (:class:`Interrupt`)."""
    check_logdir(hp)
    tok = data_load.load_tokenizer(hp)
    strategy, precision = devices.setup_devices(hp)
    with LogdirLock(hp.logdir, devices.is_chief(strategy)):
        keras.utils.set_random_seed(hp.seed)
        # tokens_per_batch is per replica: a global batch holds replicas x that budget and
        # its rows are dealt out to the replicas
        data = data_load.TrainData(hp, replicas=strategy.num_replicas_in_sync)
        dev = Dev(hp, tok)
        trainer = Trainer(hp, tok, strategy, precision)
        # a checkpoint given by --ckpt is not logdir's newest: write one before stopping
        saved = trainer.position if trainer.restore(ckpt) and not ckpt else None
        os.makedirs(hp.logdir, exist_ok=True)
        if trainer.chief:  # in a multi-worker run only the chief writes into logdir
            remove_partial_checkpoints(hp.logdir)  # of a run killed while saving
            # the precision the run trains in (auto resolved); decoding uses float32
            resolved = hparams.apply(hp, {"precision": precision})
            hparams.save(resolved, os.path.join(hp.logdir, "hparams.json"))
            data_load.write_vocab_fingerprint(hp)
            files.atomic_write(
                os.path.join(hp.logdir, "specs"), "\n".join(trainer.model.specs_lines()) + "\n"
            )
            writer = tf.summary.create_file_writer(os.path.join(hp.logdir, "train"))
        else:
            writer = tf.summary.create_noop_writer()
        print(
            f"train: {trainer.model.count_params():,} parameters; {len(data.keep):,} training "
            f"pairs; logdir {hp.logdir}"
        )
        translator = dev.translator(trainer.model, tok, hp)
        with Interrupt() as interrupt:
            try:
                return train_loop(hp, trainer, data, dev, translator, writer, interrupt, saved)
            except devices.PEER_ERRORS as e:  # another worker of a multi-worker run is lost
                line = devices.peer_lost_line(e, hp.logdir, finished_step(trainer))
                if line is None:
                    raise
                raise UserError(line, status=devices.PEER_LOST_STATUS) from None


def finished_step(trainer) -> int | None:
    """The trainer's step, or None where it cannot be read (after a failed collective)."""
    try:
        return trainer.step
    except tf.errors.OpError:
        return None


class Stop(NamedTuple):
    """Why a run ends before its last epoch. ``kind``: "budget" (max_steps or
    max_minutes: the final weights get a dev BLEU), "signal" (SIGINT/SIGTERM here or in
    another worker: the same command resumes) or "early" (early stopping); ``why``: the
    line train.py prints, which later steps of the run may extend."""

    kind: str
    why: str

    def extended(self, more: str) -> "Stop":
        return self._replace(why=self.why + more)


@dataclasses.dataclass
class Run:
    """What :func:`train_loop` and its steps share: the run's parts and its progress."""

    hp: hparams.Hparams
    trainer: Trainer
    dev: Dev
    translator: decoding.Translator
    writer: Any
    interrupt: Interrupt
    budget: Budget
    health: Health
    saved: tuple | None  # the position of logdir's newest checkpoint, if any
    history: list = dataclasses.field(default_factory=list)  # evaluate()'s results
    bleu_seconds: float = 0.0  # the last dev evaluation with BLEU
    first_loss: float = float("nan")  # the running loss at this run's first log
    last_loss: float = float("nan")  # and at its last

    def budget_stop(self) -> Stop | None:
        hp = self.hp
        if hp.max_steps and self.trainer.step >= hp.max_steps:
            return Stop("budget", f"max_steps={hp.max_steps} reached")
        if self.budget.out_of_time():
            return Stop("budget", f"max_minutes={hp.max_minutes:g} reached")
        return None

    def signal_stop(self, stats: StepStats | None = None) -> Stop | None:
        """A signal agreed by all workers (in the step's all-reduce, or in one of its
        own), else this process's."""
        if stats is not None and self.trainer.multi_worker:
            asked = stats.stop > 0
        else:
            asked = self.trainer.agree(self.interrupt.signum is not None)
        name = self.interrupt.name or "a signal to another worker"
        return Stop("signal", f"stopped by {name}") if asked else None


def train_loop(
    hp, trainer: Trainer, data, dev: Dev, translator, writer, interrupt: Interrupt, saved=None
) -> dict:
    """The epochs of :func:`train`, from the restored position to the end: each epoch's
    batches (:func:`train_epoch`), its partial accumulation, its dev evaluation and
    checkpoint (:func:`end_of_epoch`), then the end of the run (:func:`finish_run`).
    ``saved`` is the position (:attr:`Trainer.position`) of logdir's newest checkpoint."""
    # per epoch: the same every epoch (with bpe_dropout, epoch 1's: the others differ a little)
    updates = -(-len(data.batches(0)) // hp.accum_steps)
    budget = Budget(hp, trainer, updates)
    health = Health(hp, trainer, writer)
    run = Run(hp, trainer, dev, translator, writer, interrupt, budget, health, saved)
    if int(trainer.epoch) >= hp.num_epochs:
        print(
            f"train: {hp.logdir} has already finished {hp.num_epochs} epochs; raise "
            f"--num_epochs to train on"
        )
    if budget.seconds and int(trainer.epoch) < hp.num_epochs:
        budget.reserve = budget.estimate(dev, translator) * (2 if hp.average > 1 else 1)
        print(
            f"train: {budget.reserve:.1f} s of max_minutes kept back for the final dev "
            f"evaluation{' and the average' if hp.average > 1 else ''} (estimated)"
        )
    stop = None
    while int(trainer.epoch) < hp.num_epochs and stop is None:
        epoch = int(trainer.epoch)
        stop = train_epoch(run, data, epoch)
        if stop:
            break
        update = trainer.flush()  # the epoch's last, partial accumulation
        health.after(update, not (update.skipped or update.scale_skip))
        stop = run.signal_stop()
        if stop:
            break
        bleu = budget.bleu_due(run.bleu_seconds) or epoch + 1 == hp.num_epochs
        try:
            result = end_of_epoch(hp, trainer, dev, translator, writer, interrupt, bleu)
        except DevAbandoned:
            why = f"stopped by {interrupt.name}; the dev evaluation of epoch {epoch + 1} was"
            stop = Stop("signal", why + " abandoned (it runs again on resume)")
            break
        run.history.append(result)
        if bleu:
            run.bleu_seconds = result["seconds"]
            budget.reserve = run.bleu_seconds * (2 if hp.average > 1 else 1)
        run.saved = trainer.position
        stop = run.signal_stop()
        if stop is None and hp.early_stopping and int(trainer.bad_epochs) >= hp.early_stopping:
            stop = Stop("early", f"no better dev BLEU for {hp.early_stopping} epochs")
        stop = stop or run.budget_stop()
    return finish_run(run, stop)


def train_epoch(run: Run, data, epoch: int) -> Stop | None:
    """The batches of ``epoch`` from where the run stands in it, each one update (or one
    accumulation); a Stop when the budget runs out or a signal comes, else None."""
    hp, trainer = run.hp, run.trainer
    skip = int(trainer.batch_in_epoch)
    plan = data.batches(epoch)
    if epoch == 0 and skip == 0:
        pad_s, pad_t = data_load.padding_fraction(plan, data.epoch_corpus(0)[0], hp.pad_multiple)
        print(
            f"train: {len(plan):,} batches per epoch; padding {pad_s:.1%} of source "
            f"and {pad_t:.1%} of target positions"
        )
    bar = tqdm(
        data.dataset(epoch, skip, plan),
        total=len(plan),
        initial=skip,
        desc=f"epoch {epoch + 1}/{hp.num_epochs}",
        unit="batch",
        dynamic_ncols=True,
    )
    window, stop = Window(), None
    for batch in bar:
        run.budget.before_update()
        with out_of_memory(hp, "a training batch", batch[0].shape, batch[1].shape):
            stats, updated = trainer.train_batch(*batch, stop=run.interrupt.signum is not None)
        window.add(stats)
        trainer.batch_in_epoch.assign_add(1)
        run.health.after(stats, updated)
        if updated:
            step = trainer.step
            if step % 10 == 0 or step == 1:
                window = log_progress(run, bar, window, stats, step)
            every = hp.ckpt_every_steps and step % hp.ckpt_every_steps == 0
            if run.budget.checkpoint_due(step) or every:
                trainer.save()
                run.saved = trainer.position
            stop = run.budget_stop()
        stop = stop or run.signal_stop(stats)
        if stop:
            break
    bar.close()
    return stop


def log_progress(run: Run, bar, window: Window, stats: StepStats, step: int) -> Window:
    """The progress bar's loss, learning rate and tokens/s (every 10 updates), and every
    LOG_EVERY updates the TensorBoard scalars; returns the window to fill next."""
    trainer = run.trainer
    means, lr = window.means(), float(trainer.schedule(step - 1))
    run.last_loss = means["loss"]
    if run.first_loss != run.first_loss:  # NaN: the first log of this run
        run.first_loss = run.last_loss
    bar.set_postfix(
        loss=f"{run.last_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{means['tokens_per_sec']:,.0f}"
    )
    if step % LOG_EVERY and step != 1:
        return window
    with summaries_at(run.writer, step, run.hp):
        summaries.train_scalars(means, stats.grad_norm, lr)
        summaries.budget(run.budget.fraction(step), trainer.seconds_used())
        summaries.skipped_updates(int(trainer.skipped_steps), trainer.loss_scale.value())
        trainer.model.variant.summaries(trainer.model, step, trainer.schedules)
    return Window()


def finish_run(run: Run, stop: Stop | None) -> dict:
    """The end of a run: a dropped partial accumulation is said; a run ended by its
    budget gets a dev BLEU of its final weights; the last position is saved; the last
    checkpoints are averaged (``--average``) and the default model recorded; then the
    summary line and dict of :func:`train`."""
    hp, trainer, interrupt = run.hp, run.trainer, run.interrupt
    dropped = trainer.drop_partial()  # only a signal stops the run between updates
    if dropped:
        stop = stop.extended(
            f"; a partial gradient accumulation of {dropped} batch(es) was dropped (they are "
            f"trained again on resume)"
        )
    last = run.history[-1] if run.history else {}
    scored = last.get("step") == trainer.step and last.get("dev_bleu") is not None
    if stop and stop.kind == "budget" and not scored:  # the final weights may be the best
        try:
            run.history.append(
                evaluate(hp, trainer, run.dev, run.translator, run.writer, interrupt)
            )
            trainer.save(best=keep_best(trainer, run.history[-1]["dev_bleu"]))
            run.saved = trainer.position
        except DevAbandoned:
            stop = Stop("signal", f"stopped by {interrupt.name} during the final dev evaluation")
    if trainer.position != run.saved:
        trainer.save()
    signalled = stop is not None and stop.kind == "signal"  # here or in another worker
    averaged = None
    if hp.average > 1 and run.history and not signalled:
        averaged = average_last(hp, trainer, run.dev, run.translator)
    if trainer.chief and run.history:
        record_default(hp, trainer, averaged)
    share = float(trainer.eval_seconds) / max(trainer.seconds_used(), 1e-9)
    last_lr = float(trainer.schedule(max(trainer.step - 1, 0)))  # of the last update
    # the path this run saved (a non-chief worker may look before the chief's
    # `checkpoint` file names it), else the one it resumed from
    path = trainer.last_saved or trainer.latest_checkpoint
    if signalled:
        stop = stop.extended("; run the same command again to resume")
    print(
        f"train: {trainer.seconds_used() / 60:.1f} min, {share:.1%} of them on dev "
        f"evaluation; last lr {last_lr:.3g}"
    )
    print(f"train: {stop.why if stop else 'done'}; step {trainer.step}; checkpoint {path}")
    return {
        "step": trainer.step,
        "epoch": int(trainer.epoch),
        "history": run.history,
        "checkpoint": path,
        "stop_reason": stop.why if stop else None,
        "stop_kind": stop.kind if stop else None,
        "train_loss": run.last_loss,
        "first_loss": run.first_loss,
        "signal": interrupt.signum or (signal.SIGTERM if signalled else None),
        "eval_share": share,
        "last_lr": last_lr,
        "averaged": averaged,
    }


def evaluate(
    hp, trainer: Trainer, dev: Dev, translator, writer, interrupt=None, bleu: bool = True
) -> dict:
    """Dev loss (all of dev) and, with ``bleu``, dev BLEU of the dev subset: summaries,
    translations to evaldir; the time is added to ``trainer.eval_seconds``. A signal
    abandons it (:class:`DevAbandoned`; in one process only: other workers would wait for
    this one). Returns {epoch, step, dev_loss, dev_bleu (None without BLEU), seconds}."""
    epoch, step, t0 = int(trainer.epoch) + 1, trainer.step, time.time()
    interrupt = interrupt or Interrupt()
    with interrupt.abandonable_region(not trainer.multi_worker):
        dev_loss, dev_nll = trainer.dev_loss(dev.corpus, max(1, hp.tokens_per_batch // 64))
        hyps = translator.translate(dev.src, dev.docs) if bleu else []
        scores = decoding.scores(hyps, dev.ref) if bleu else None
    seconds = time.time() - t0
    trainer.eval_seconds.assign_add(seconds)
    if bleu and trainer.chief:
        name = f"E{epoch:02d}S{step}L{dev_loss:.2f}"
        text = "\n".join(hyps) + f"\nBLEU = {scores['sacrebleu']:.2f}\n"
        files.atomic_write(os.path.join(hp.evaldir, name), text)
    with summaries_at(writer, step, hp):
        summaries.dev_figures(dev_loss, dev_nll, scores)
        if bleu:
            summaries.sample_translations(dev.src, dev.ref, hyps)
        if bleu and dev.src and hp.attention_layers != "none":
            greedy = translator.decode if translator.k == 1 else None
            summaries.attention(
                trainer.model,
                trainer.tok,
                dev.src[0],
                hp.max_len_extra,
                hp.attention_layers,
                greedy,
            )
    return {
        "epoch": epoch,
        "step": step,
        "dev_loss": dev_loss,
        "dev_bleu": scores["sacrebleu"] if bleu else None,
        "example": f"{dev.src[0]!r} -> {hyps[0]!r}; " if hyps else "",
        "seconds": seconds,
    }


def keep_best(trainer: Trainer, bleu: float | None) -> bool:
    """Whether ``bleu`` beats the run's best dev BLEU (then it becomes the best); a
    figure that does not counts one more epoch for early stopping."""
    if bleu is None:
        return False
    if bleu > float(trainer.best_bleu):
        trainer.best_bleu.assign(bleu)
        trainer.bad_epochs.assign(0)
        return True
    trainer.bad_epochs.assign_add(1)
    return False


def end_of_epoch(
    hp,
    trainer: Trainer,
    dev: Dev,
    translator,
    writer,
    interrupt: Interrupt | None = None,
    bleu: bool = True,
) -> dict:
    """:func:`evaluate`, then the epoch counter moves on and a checkpoint is written
    (into logdir/best too if the dev BLEU is the best so far). The counter moves just
    before the checkpoint: a run stopped during the evaluation resumes at the end of the
    epoch and evaluates it."""
    result = evaluate(hp, trainer, dev, translator, writer, interrupt, bleu)
    trainer.epoch.assign_add(1)
    trainer.batch_in_epoch.assign(0)
    improved = keep_best(trainer, result["dev_bleu"])
    # the counters are updated first, so that a resumed run knows the true best so far
    path = trainer.save(best=improved)
    bleu_text = "not computed (eval_share)" if not bleu else f"{result['dev_bleu']:.2f}"
    print(
        f"epoch {result['epoch']}: dev loss {result['dev_loss']:.3f}, dev BLEU {bleu_text}"
        f"{' (best)' if improved else ''}; e.g. {result['example']}{path}"
    )
    return result


def average_last(hp, trainer: Trainer, dev: Dev, translator) -> dict | None:
    """The average of the run's last ``hp.average`` checkpoints (Vaswani et al. 2017,
    6.1; under wsd, spread over the cooldown: checkpoints.spread_checkpoints), scored on
    the dev subset; written to ``<logdir>/averaged/avg-last<N>-<step>``
    if it beats the best checkpoint. The model's own weights are put back after."""
    if trainer.multi_worker:
        print("train: --average is skipped in a multi-worker run: use average_checkpoints.py")
        return None
    saved = trainer.manager.checkpoints
    if hp.lr_schedule == "wsd":  # Budget.points: at least half their spacing apart
        gap = 0.5 * hp.cooldown * trainer.step / hp.average
        paths = checkpoints.spread_checkpoints(saved, hp.average, gap)
    else:
        paths = saved[-hp.average :]
    if len(paths) < hp.average:
        print(f"train: {len(paths)} checkpoint(s), fewer than --average {hp.average}: no average")
        return None
    model, t0 = trainer.model, time.time()
    own = [w.numpy() for w in model.weights]
    weights = checkpoints.average_weights(model, paths)
    scores = decoding.scores(translator.translate(dev.src, dev.docs), dev.ref)
    bleu, best = scores["sacrebleu"], float(trainer.best_bleu)
    wins = bleu > best
    out = os.path.join(hp.logdir, "averaged", f"avg-last{hp.average}-{trainer.step}")
    if wins and trainer.chief:
        with files.atomic_path(out) as tmp:  # its .index and .data-* files
            weights.write(tmp)
    for w, value in zip(model.weights, own):
        w.assign(value)
    trainer.eval_seconds.assign_add(time.time() - t0)
    names = ", ".join(os.path.basename(p) for p in paths)
    print(
        f"train: the average of {names} has dev BLEU {bleu:.2f} against the best "
        f"checkpoint's {best:.2f}: "
        + (f"it is the default model ({out})" if wins else "the best checkpoint stays")
    )
    return {"checkpoints": paths, "dev_bleu": bleu, "wins": wins, "path": out if wins else ""}


def record_default(hp, trainer: Trainer, averaged: dict | None) -> None:
    """``<logdir>/best.json``: the model eval.py, translate.py and export.py load by
    default (checkpoints.choose_checkpoint): the average where it won on dev, else the
    best checkpoint by dev BLEU."""
    if averaged and averaged["wins"]:
        path, bleu = averaged["path"], averaged["dev_bleu"]
        what = f"average of {', '.join(os.path.basename(p) for p in averaged['checkpoints'])}"
    else:
        path, bleu = tf.train.latest_checkpoint(trainer.best.directory), float(trainer.best_bleu)
        what = "best checkpoint by dev BLEU"
    if path:
        checkpoints.write_default(hp.logdir, path, bleu, what)


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    summary = train(hp, opts["ckpt"])
    if summary["signal"]:  # 130 for SIGINT, 143 for SIGTERM, as a shell reports them
        sys.exit(128 + summary["signal"])


if __name__ == "__main__":
    hparams.run_main(main)
